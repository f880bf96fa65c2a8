#!/usr/bin/env python3
"""Where a training step's GPU sits idle: reads the CSV of bench/kernel_trace.cpp (kind, start_ns, end_ns,
stream, name; GPU timestamps of every kernel, memcpy and memset of a real run) and, for the last complete
steps (a step ends with the AdamW kernel, one per step), prints the time from the previous step's AdamW
end to this one's (the step as the GPU sees it), the busy time (union of all records), the idle time and
its largest gaps with the records on either side. Usage: kernel_gaps.py TRACE.csv [steps=2] [gaps=12]
Exits 1 with a one-line error on a file it cannot read or a trace with fewer than two AdamW kernels."""
import csv
import sys


def fail(msg):
    print(f"kernel_gaps.py: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path):
    try:
        with open(path, newline="") as f:
            rows = [(int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]) for r in csv.DictReader(f)]
    except (OSError, KeyError, ValueError, TypeError, csv.Error) as e:
        fail(f"cannot read {path}: {e}")
    rows.sort()
    return rows


def short(name, n=70):
    name = name.split("(")[0]
    return name if len(name) <= n else name[: n - 3] + "..."


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    try:
        steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
        ngaps = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    except ValueError:
        fail(f"steps and gaps must be integers, got {sys.argv[2:4]}")
    if steps < 1 or ngaps < 0:
        fail(f"steps must be >= 1 and gaps >= 0, got {steps} and {ngaps}")
    rows = load(sys.argv[1])
    ends = [i for i, r in enumerate(rows) if r[2] == "kernel" and "adamw" in r[3]]
    if len(ends) < 2:
        fail(f"{sys.argv[1]}: {len(ends)} AdamW kernels; need two steps or more")
    for a, b in list(zip(ends, ends[1:]))[-steps:]:
        t0, t1 = rows[a][1], rows[b][1]  # previous AdamW end .. this AdamW end
        if t1 <= t0:
            fail(f"{sys.argv[1]}: AdamW kernels ending at {t0} and {t1} ns: no step between them")
        # the records that start in the step, clipped to it (one on another stream may run past its end)
        recs = [(s, min(e, t1), kind, name) for s, e, kind, name in rows[a + 1 : b + 1] if s < t1]
        busy, cur_s, cur_e, gaps, prev = 0, None, t0, [], rows[a]
        for s, e, kind, name in recs:
            if s > cur_e:
                gaps.append((s - cur_e, prev, (s, e, kind, name)))
                if cur_s is not None:
                    busy += cur_e - cur_s
                cur_s = s
            if cur_s is None:
                cur_s = s
            if e > cur_e:
                cur_e, prev = e, (s, e, kind, name)
        busy += cur_e - cur_s
        span = t1 - t0
        kernels = sum(1 for r in recs if r[2] == "kernel")
        print(f"step ending at AdamW #{ends.index(b)}: {span / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms, "
              f"idle {(span - busy) / 1e6:.3f} ms ({100 * (span - busy) / span:.1f}%), {kernels} kernels, "
              f"{len(recs) - kernels} copies/sets, {len(gaps)} gaps")
        by_size = sorted(gaps, reverse=True)[:ngaps]
        print(f"  gaps >= 20 us: {sum(1 for g in gaps if g[0] >= 20000)} totalling "
              f"{sum(g[0] for g in gaps if g[0] >= 20000) / 1e6:.3f} ms; < 20 us: "
              f"{sum(g[0] for g in gaps if g[0] < 20000) / 1e6:.3f} ms")
        for g, p, n in by_size:
            print(f"  {g / 1e3:9.1f} us after {short(p[3])} [{p[2]}] before {short(n[3])} [{n[2]}] "
                  f"at +{(n[0] - t0) / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
