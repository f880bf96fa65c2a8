#!/usr/bin/env python3
"""Summary of an xtrain --timeline trace (Chrome trace JSON, src/train/timeline.cpp): per recorded step, the
backward pass (first backward span's start to the last one's end), the gradient all-reduces (count,
first start and last end relative to the backward's end), the time some all-reduce is in flight (the
union of their spans: all_reduce_ms) and how much of it lies inside the backward pass (overlapped_ms),
in ms. A trace of world 1 has no gradient collective: its steps
report all_reduces 0, null first/last all-reduce times and 0.0 all_reduce_ms and overlapped_ms.

Usage: timeline_summary.py TRACE   -> one JSON line per step. Exits 1 with a one-line error naming the
file when it is not such a trace.
"""
import json
import sys


def summary(path):
    try:
        events = json.load(open(path))["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        spans = [e for e in events if e["ph"] == "X"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"timeline_summary.py: {path}: not an xtrain timeline ({e!r})")
    out = []
    if not spans:
        sys.exit(f"timeline_summary.py: {path}: no steps recorded (a run with no step to run?)")
    for step in sorted({e["args"]["step"] for e in spans}):
        mine = [e for e in spans if e["args"]["step"] == step]
        bwd = [e for e in mine if tracks[e["tid"]] == "compute" and e["name"].startswith("backward")]
        comm = [e for e in mine if tracks[e["tid"]] == "communication"]
        if not bwd:
            sys.exit(f"timeline_summary.py: {path}: step {step} has no backward span")
        b0, b1 = min(e["ts"] for e in bwd), max(e["ts"] + e["dur"] for e in bwd)
        if not comm:  # world 1: no gradient collective runs
            out.append({"step": step, "backward_ms": round((b1 - b0) / 1e3, 3), "all_reduces": 0,
                        "first_start_ms": None, "last_end_ms": None, "all_reduce_ms": 0.0, "overlapped_ms": 0.0})
            continue
        # the time some all-reduce is in flight: the union of the spans (MPI's buckets overlap each other)
        merged = []
        for s, e in sorted((e["ts"], e["ts"] + e["dur"]) for e in comm):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        busy = sum(e - s for s, e in merged)
        inside = sum(max(0.0, min(e, b1) - max(s, b0)) for s, e in merged)
        out.append({"step": step, "backward_ms": round((b1 - b0) / 1e3, 3), "all_reduces": len(comm),
                    "first_start_ms": round((min(e["ts"] for e in comm) - b1) / 1e3, 3),
                    "last_end_ms": round((max(e["ts"] + e["dur"] for e in comm) - b1) / 1e3, 3),
                    "all_reduce_ms": round(busy / 1e3, 3), "overlapped_ms": round(inside / 1e3, 3)})
    return out


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit("usage: timeline_summary.py TRACE")
    for rec in summary(sys.argv[1]):
        print(json.dumps(rec))
