#!/usr/bin/env python3
"""Steady-state figures of one xtrain metrics file, the one parser the bench scripts share.

The file is xtrain's JSON lines (`--metrics`): "train" records per step (step, loss, ms, tok_per_s,
mfu and peak_memory_bytes where known) and one "final" record (tokens_seen, step, params,
peak_memory_bytes). steady(path, warmup) returns, over the train records with step > warmup:
  tok_per_s         tokens per step (final tokens_seen / final step) / mean step time, tokens/s
  step_ms           that mean step time, ms
  median_tok_per_s  the median of the records' own tok_per_s, tokens/s
  mfu               harmonic mean of the records' mfu (mfu is proportional to 1/ms, so this is the MFU
                    at the mean step time); None where xtrain printed none
  peak_device_mib   final peak_memory_bytes in MiB (None where not recorded)
  params, timed_steps, final_loss (the last train record's loss), losses (every train loss, in order)
Errors: SystemExit with a one-line message naming the file when it holds no train record after warmup
or no final record.

CLI: steady.py METRICS WARMUP  -> the dict as one JSON line on stdout.
"""
import json
import statistics
import sys


def steady(path, warmup):
    try:
        rows = [json.loads(line) for line in open(path) if line.strip()]
    except (OSError, ValueError) as e:
        raise SystemExit(f"steady.py: {path}: {e}")
    train = [r for r in rows if r.get("type") == "train"]
    finals = [r for r in rows if r.get("type") == "final"]
    timed = [r for r in train if r["step"] > warmup]
    if not timed:
        raise SystemExit(f"steady.py: {path}: no train record after step {warmup}")
    if not finals:
        raise SystemExit(f"steady.py: {path}: no final record (did the run end early?)")
    final = finals[-1]
    ms = sum(r["ms"] for r in timed) / len(timed)
    mfu = len(timed) / sum(1 / r["mfu"] for r in timed) if all(r.get("mfu") for r in timed) else None
    peak = final.get("peak_memory_bytes")
    return {"tok_per_s": final["tokens_seen"] // final["step"] / (ms / 1e3), "step_ms": ms,
            "median_tok_per_s": statistics.median(r["tok_per_s"] for r in timed), "mfu": mfu,
            "peak_device_mib": peak / 2**20 if peak else None, "params": final.get("params"),
            "timed_steps": len(timed), "final_loss": train[-1]["loss"], "losses": [r["loss"] for r in train]}


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print("usage: steady.py METRICS WARMUP   (prints the steady-state figures of a metrics file as JSON)")
        sys.exit(0)
    if len(sys.argv) != 3:
        sys.exit("usage: steady.py METRICS WARMUP")
    print(json.dumps(steady(sys.argv[1], int(sys.argv[2]))))
