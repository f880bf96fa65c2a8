#!/usr/bin/env python3
"""bench/time_to_loss.py's table on made-up runs: the best learning rate of each run by final val loss, the
target (xtrain AdamW's final val loss), the first validation step at or below it and its training wall time
(xtrain's: the steps' "ms", the first step counted at the median), and the goals' verdicts, PASS and FAIL."""
import json
import os
import sys
import tempfile

from script_checks import check, failures, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "time_to_loss.py")


def xtrain_run(path, vals, ms=10.0):
    """An xtrain metrics file of 100 steps of `ms` (step 1: 1000 ms, the warm-up) with val records every 25."""
    with open(path, "w") as f:
        for s in range(1, 101):
            f.write(json.dumps({"type": "train", "step": s, "loss": 5.0, "ms": 1000.0 if s == 1 else ms}) + "\n")
            if s % 25 == 0:
                f.write(json.dumps({"type": "val", "step": s, "val_loss": vals[s // 25 - 1]}) + "\n")


def torch_run(path, vals, per_step):
    with open(path, "w") as f:
        for i, v in enumerate(vals):
            s = 25 * (i + 1)
            f.write(json.dumps({"type": "val", "step": s, "val_loss": v, "wall_s": s * per_step}) + "\n")


def table(d):
    r = run_script(TOOL, "table", d, "--label", "t", timeout=60)
    check(r.returncode == 0, f"table exits 0 ({r.returncode}: {r.stderr.strip()})")
    return r.stdout


with tempfile.TemporaryDirectory() as d:
    xtrain_run(os.path.join(d, "xt-adamw-1e-3.jsonl"), [6.0, 5.8, 5.6, 5.5])
    xtrain_run(os.path.join(d, "xt-adamw-3e-3.jsonl"), [6.0, 5.9, 5.7, 5.6])  # worse: not the best
    xtrain_run(os.path.join(d, "xt-muon-0.02.jsonl"), [5.7, 5.5, 5.3, 5.2])
    torch_run(os.path.join(d, "pt-muon-0.02.jsonl"), [5.8, 5.6, 5.4, 5.25], 0.02)
    torch_run(os.path.join(d, "pt-adamw-1e-3.jsonl"), [6.0, 5.7, 5.5, 5.45], 0.02)
    out = table(d)
    summary = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    check(summary["target"] == 5.5, "target: xtrain AdamW's best final val loss")
    check(summary["runs"]["xt-adamw"]["lr"] == "1e-3", "best lr by final val loss")
    # xtrain muon: 5.5 at step 50; wall = 49 x 10 ms + the first step at the median (10 ms) = 0.5 s
    check(summary["runs"]["xt-muon"]["steps_to_target"] == 50, "xtrain muon: steps to the target")
    check(abs(summary["runs"]["xt-muon"]["wall_s_to_target"] - 0.5) < 1e-9, "xtrain muon: wall s, step 1 at the median")
    check(summary["runs"]["pt-muon"]["steps_to_target"] == 75, "torch muon: first val <= target at step 75")
    check(summary["runs"]["pt-adamw"]["steps_to_target"] == 75, "torch adamw: step 75")
    check("goal: xtrain muon reaches it in 50 steps <= 0.55 x 100: PASS" in out, "steps goal PASS")
    check("goal: and in 0.5 s <= 0.6 x 1.0 s: PASS" in out, "time goal PASS")
    check("or below: PASS" in out, "final val goal: 5.2 vs 5.25 PASS")
    check("<= 0.4 x torch.compile AdamW's 1.5 s: PASS" in out, "0.4x torch.compile AdamW's time PASS")
    # a muon as slow as AdamW fails the step goal
    xtrain_run(os.path.join(d, "xt-muon-0.02.jsonl"), [6.0, 5.8, 5.6, 5.45])
    out = table(d)
    check("goal: xtrain muon reaches it in 100 steps <= 0.55 x 100: FAIL" in out, "steps goal FAIL")
    check("or below: FAIL" in out, "final val goal: 5.45 vs 5.25 FAIL")
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
