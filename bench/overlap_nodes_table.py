#!/usr/bin/env python3
"""The table of bench/overlap_nodes.sh: reads DIR/runs.tsv and each run's metrics and log, prints one
markdown row per (rate, world): measured step times and exposed communication against the prediction
of bench/cost_model.py. Usage: overlap_nodes_table.py DIR BUCKET_MB RATE...

Step time of a cell: the median of the steps after step 1 pooled over all rounds; its spread: the
per-round medians. Exposed communication measured = step - t_c, t_c the same world's step on one node.
Model: S and S_e from the model line of the logs (sizes by cost_model.gpt_sizes, checked against the
parameter count xtrain prints), k = the bucket count xtrain prints, t_b = 2/3 t_c, alpha measured,
B = the tbf rate (the measured goodput for "none"); link bytes of a ring (the cost model of
docs/scaling.md) and of the schedule Open MPI's MPI_Iallreduce runs (cost_model.libnbc_two_nodes_factor)."""
import collections
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402


def main(d, bucket_mb, rates):
    runs, goodput, alpha = [], {}, collections.defaultdict(list)
    for line in open(os.path.join(d, "runs.tsv")):
        f = line.rstrip("\n").split("\t")
        if f[0] == "goodput":
            goodput[f[1]] = float(f[2])
        elif f[0] == "alpha":
            alpha[f[1]].append(float(f[2]))
        else:
            runs.append(dict(rate=f[1], np=int(f[2]), mb=f[3], where=f[4], rnd=int(f[5]), load=float(f[6]), name=f[7]))
    cells = collections.defaultdict(list)
    for r in runs:
        recs = [json.loads(x) for x in open(os.path.join(d, r["name"] + ".jsonl")) if '"train"' in x]
        r["ms"] = [x["ms"] for x in recs if x["step"] >= 2]
        r["losses"] = [x["loss"] for x in recs]
        log = open(os.path.join(d, r["name"] + ".log")).read()
        r["buckets"] = int(m.group(1)) if (m := re.search(r"^gradient all-reduce: (\d+) buckets", log, re.M)) else 1
        cells[(r["rate"], r["np"], r["mb"], r["where"])].append(r)
    m = re.search(r"^model +\| V=(\d+) T=(\d+) C=(\d+) L=(\d+) .*F=(\d+) \| ([\d.]+)M parameters", log, re.M)
    if not m:
        sys.exit("overlap_nodes_table.py: no model line in " + r["name"] + ".log")
    v, t, c, n_layer, ffn = map(int, m.groups()[:5])
    p, p_e = cost_model.gpt_sizes(v, c, n_layer, t, ffn)
    if abs(p / 1e6 - float(m.group(6))) > 0.006:
        sys.exit(f"overlap_nodes_table.py: cost_model.gpt_sizes gives {p / 1e6:.2f}M parameters, xtrain {m.group(6)}M")
    s, s_e = 4 * p, 4 * p_e

    def med(rs):
        return statistics.median(x for r in rs for x in r["ms"]) / 1e3

    def rounds(rs):
        return "/".join(f"{statistics.median(r['ms']) / 1e3:.2f}" for r in sorted(rs, key=lambda r: r["rnd"]))

    print(f"S = {s / 1e6:.1f} MB, S_e = {s_e / 1e6:.1f} MB (embeddings), {bucket_mb} MiB buckets; seconds; "
          "step: median over rounds (per-round medians in brackets)")
    print("| link | ranks | goodput Mbit/s | alpha us | t_c | step, one all-reduce | step, buckets | speed-up | "
          "exposed one / buckets, measured | model, ring | model, libnbc's schedule | losses | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for rate in rates:
        for n in (2, 4):
            one, bk, tc_runs = cells[(rate, n, "0", "nodes")], cells[(rate, n, bucket_mb, "nodes")], cells[("none", n, "0", "one")]
            if not one or not bk:
                continue
            t_one, t_bk, t_c = med(one), med(bk), med(tc_runs)
            b = (goodput.get(rate, 0) if rate == "none" else int(rate[:-4])) * 1e6 / 8
            a = statistics.median(alpha[rate]) * 1e-6
            k = bk[0]["buckets"]
            pred = {f: [cost_model.exposed(s, s_e, n, b, a, 2 / 3 * t_c, k, o, f) if b else float("nan")
                        for o in (False, True)] for f in (None, cost_model.libnbc_two_nodes_factor(n))}
            ring, nbc = pred.values()
            same = all(x["losses"] == y["losses"] for x in one for y in bk if x["rnd"] == y["rnd"])
            loads = [r["load"] for r in one + bk]
            print(f"| {rate} | {n} | {goodput.get(rate, float('nan')):.0f} | {a * 1e6:.0f} | {t_c:.2f} | "
                  f"{t_one:.2f} ({rounds(one)}) | {t_bk:.2f} ({rounds(bk)}) | {t_one / t_bk:.2f}x | "
                  f"{t_one - t_c:.2f} / {t_bk - t_c:.2f} | {ring[0]:.2f} / {ring[1]:.2f} | {nbc[0]:.2f} / {nbc[1]:.2f} | "
                  f"{'bitwise equal' if same else 'differ'} | {min(loads):.1f}-{max(loads):.1f} |")
    tc = {n: rounds(cells[("none", n, "0", "one")]) for n in (2, 4)}
    print(f"t_c, each run (start and end of each round): 2 ranks {tc[2]}, 4 ranks {tc[4]}; {k} buckets")


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) < 4:
        sys.exit("usage: overlap_nodes_table.py DIR BUCKET_MB RATE...")
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
