#!/usr/bin/env python3
"""bench/time_to_loss.py's table on made-up runs: the best learning rate of each run by final val loss, the
target (xtrain AdamW's final val loss), the first validation step at or below it and its training wall time
(xtrain's: the steps' "ms", the first step counted at the median), and the goals' verdicts, PASS and FAIL; the
runs planned for fewer steps (a row for each that is faster, the fastest counted, ties decided the same way
every time), a missing wall time, bad file names and records (one line on stderr, exit 2). And
bench/time_to_loss.sh's refusal of bad settings (MUON_STEPS, XTRAIN, PYTORCH) before anything runs."""
import json
import os
import subprocess
import sys
import tempfile

from script_checks import check, failures, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "time_to_loss.py")
SCRIPT = os.path.join(ROOT, "bench", "time_to_loss.sh")


def xtrain_run(path, vals, ms=10.0, train=True):
    """An xtrain metrics file of 25 x len(vals) steps of `ms` (step 1: 1000 ms, the warm-up) with val records
    every 25; train=False: the val records alone (no step times, so no wall time)."""
    with open(path, "w") as f:
        for s in range(1, 25 * len(vals) + 1):
            if train:
                f.write(json.dumps({"type": "train", "step": s, "loss": 5.0, "ms": 1000.0 if s == 1 else ms}) + "\n")
            if s % 25 == 0:
                f.write(json.dumps({"type": "val", "step": s, "val_loss": vals[s // 25 - 1]}) + "\n")


def torch_run(path, vals, per_step):
    """This script's output: val records every 25 steps, wall_s = step x per_step (None: no wall_s)."""
    with open(path, "w") as f:
        for i, v in enumerate(vals):
            s = 25 * (i + 1)
            r = {"type": "val", "step": s, "val_loss": v}
            if per_step is not None:
                r["wall_s"] = s * per_step
            f.write(json.dumps(r) + "\n")


def table(d):
    r = run_script(TOOL, "table", d, "--label", "t", timeout=60)
    check(r.returncode == 0, f"table exits 0 ({r.returncode}: {r.stderr.strip()})")
    return r.stdout


def summary_of(out):
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def rows(out, prefix):
    """The table's rows whose run column starts with prefix, as word lists."""
    return [line.split() for line in out.splitlines() if line.startswith(prefix)]


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
# runs planned for fewer steps: a row for every one faster than the full-length run, sorted by steps then wall,
# whatever the file names' order; the fastest counts (ties: less wall, a missing wall last, then the file name)
with tempfile.TemporaryDirectory() as d:
    xtrain_run(os.path.join(d, "xt-adamw-1e-3.jsonl"), [6.0, 5.8, 5.6, 5.5])
    xtrain_run(os.path.join(d, "xt-muon-0.02,3e-3.jsonl"), [6.0, 5.8, 5.6, 5.45])  # reaches it at step 100
    xtrain_run(os.path.join(d, "xt-muon-0.01,3e-3@75.jsonl"), [5.8, 5.6, 5.5])  # step 75
    xtrain_run(os.path.join(d, "xt-muon-0.02,3e-3@50.jsonl"), [5.6, 5.5], ms=20.0)  # step 50, 1.0 s
    xtrain_run(os.path.join(d, "xt-muon-0.04,3e-3@50.jsonl"), [5.6, 5.5])  # step 50, 0.5 s: the fastest
    xtrain_run(os.path.join(d, "xt-muon-0.08,3e-3@50.jsonl"), [5.6, 5.9])  # never reaches it: no row
    out = table(d)
    planned = rows(out, "xtrain muon (")
    check([(r[2], r[4], r[6], r[7]) for r in planned] == [("(50", "0.04,3e-3", "50", "0.5"),
                                                           ("(50", "0.02,3e-3", "50", "1.0"),
                                                           ("(75", "0.01,3e-3", "75", "0.8")],
          f"a row for every faster shorter-planned run, by steps then wall ({planned})")
    xm = summary_of(out)["runs"]["xt-muon"]
    check(xm["steps_to_target"] == 50 and xm["reached_by"] == {"lr": "0.04,3e-3", "planned_steps": 50},
          f"the fastest counts: fewer steps, then less wall ({xm})")
    check(xm["final_val"] == 5.45 and xm["lr"] == "0.02,3e-3", "the final val loss stays the full-length run's")
    check("goal: xtrain muon reaches it in 50 steps <= 0.55 x 100: PASS" in out, "the goals take the fastest")
    # a tie in steps and wall: the first by file name, every time
    xtrain_run(os.path.join(d, "xt-muon-0.02,3e-3@50.jsonl"), [5.6, 5.5])
    xm = summary_of(table(d))["runs"]["xt-muon"]
    check(xm["reached_by"]["lr"] == "0.02,3e-3", f"a tie in steps and wall: the first by file name ({xm})")
    # a shorter-planned run without a wall time: "-" in its row, and it ranks after one with a wall at its steps
    os.remove(os.path.join(d, "xt-muon-0.04,3e-3@50.jsonl"))
    xtrain_run(os.path.join(d, "xt-muon-0.015,3e-3@50.jsonl"), [5.6, 5.5], train=False)  # first by name
    out = table(d)
    planned = rows(out, "xtrain muon (")
    check([(r[4], r[7]) for r in planned][:2] == [("0.02,3e-3", "0.5"), ("0.015,3e-3", "-")],
          f"a missing wall prints '-' and ranks after a wall at the same steps ({planned})")
    check(summary_of(out)["runs"]["xt-muon"]["reached_by"]["lr"] == "0.02,3e-3", "a missing wall counts as slower")
    # only runs without a wall reach it first: the goals say FAIL for the time, with no traceback
    os.remove(os.path.join(d, "xt-muon-0.02,3e-3@50.jsonl"))
    out = table(d)
    check("goal: and in - s <= 0.6 x 1.0 s (no wall time recorded): FAIL" in out, "time goal without a wall: FAIL")
    # the full-length run reaches it first: a shorter-planned run in as many steps gets no row
    xtrain_run(os.path.join(d, "xt-muon-0.02,3e-3.jsonl"), [5.6, 5.5, 5.4, 5.3])
    out = table(d)
    check(rows(out, "xtrain muon (") == [] and summary_of(out)["runs"]["xt-muon"]["reached_by"] is None,
          "no row for a shorter-planned run no faster than the full-length run")

# shorter-planned runs of an optimizer without a full-length run: named, not silently lost
with tempfile.TemporaryDirectory() as d:
    xtrain_run(os.path.join(d, "xt-adamw-1e-3.jsonl"), [6.0, 5.8, 5.6, 5.5])
    xtrain_run(os.path.join(d, "xt-muon-0.02,3e-3@50.jsonl"), [5.6, 5.5])
    torch_run(os.path.join(d, "pt-muon-0.02,3e-3@50.jsonl"), [5.6, 5.5], None)
    out = table(d)
    check("# torch.compile muon: runs planned for fewer steps but no full-length run" in out and
          "# xtrain muon: runs planned for fewer steps but no full-length run" in out,
          "shorter-planned runs without a full-length run are named")
    # a diverged run (NaN, null in xtrain's JSON) is never the best, whatever the file names' order
    with open(os.path.join(d, "xt-adamw-0.1.jsonl"), "w") as f:
        f.write('{"type": "val", "step": 25, "val_loss": null}\n')
    torch_run(os.path.join(d, "pt-adamw-1e-2.jsonl"), [float("nan")], 0.02)
    torch_run(os.path.join(d, "pt-adamw-1e-3.jsonl"), [6.0, 5.7, 5.5, 5.45], 0.02)
    s = summary_of(table(d))
    check(s["runs"]["xt-adamw"]["lr"] == "1e-3" and s["runs"]["pt-adamw"]["lr"] == "1e-3",
          "a NaN final val loss ranks last")

# a file the table cannot read: one line on stderr naming it, exit 2, no traceback
for name, text in [("xt-muon-0.02,3e-3@abc.jsonl", None), ("xt-muon-0.02,3e-3@0.jsonl", None),
                   ("xt-muon-0.02,3e-3@.jsonl", None), ("notes.jsonl", None), ("xt-adamw.jsonl", None),
                   ("zz-adamw-1e-3.jsonl", None), ("xt-adamw-.jsonl", None), ("xt-adamw-fast.jsonl", None),
                   ("xt-muon-0.02,.jsonl", None), ("pt-muon-0.02,3e-3.jsonl", '{"type": "val", "step": 25'),
                   ("pt-muon-0.02,3e-3.jsonl", '{"type": "val", "step": 25}'),
                   ("pt-muon-0.02,3e-3.jsonl", '[1, 2]')]:
    with tempfile.TemporaryDirectory() as d:
        xtrain_run(os.path.join(d, "xt-adamw-1e-3.jsonl"), [6.0, 5.8, 5.6, 5.5])
        if text is None:
            xtrain_run(os.path.join(d, name), [5.6, 5.5])
        else:
            with open(os.path.join(d, name), "w") as f:
                f.write(text + "\n")
        r = run_script(TOOL, "table", d, "--label", "t", timeout=60)
        err = r.stderr.strip()
        check(r.returncode == 2 and len(err.splitlines()) == 1 and name in err and "Traceback" not in err,
              f"table refuses {name} ({text}): exit 2, one line naming it ({r.returncode}: {err})")


# time_to_loss.sh: a bad setting is refused before anything runs (BIN names no build: a setting that passes
# stops at the build check instead, later, with its own line)
def script(**env):
    e = {k: v for k, v in os.environ.items() if k not in ("LOGDIR", "MUON_STEPS", "STEPS", "XTRAIN", "PYTORCH")}
    e.update({"BIN": os.path.join(ROOT, "no-such-build"), **env})
    return subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=60, env=e)


for env, what in [({"STEPS": "100", "MUON_STEPS": "50"}, "must include STEPS"),
                  ({"STEPS": "100", "MUON_STEPS": "50 60"}, "must include STEPS"),
                  ({"MUON_STEPS": " "}, "must name at least one"),
                  ({"STEPS": "100", "MUON_STEPS": "100 50 100"}, "names 100 twice"),
                  ({"STEPS": "100", "MUON_STEPS": "0 100"}, "positive integer"),
                  ({"STEPS": "100", "MUON_STEPS": "100 200"}, "positive integer"),
                  ({"STEPS": "100", "MUON_STEPS": "100 abc"}, "positive integer"),
                  ({"STEPS": "100", "MUON_STEPS": "*"}, "positive integer"),
                  ({"STEPS": "100 50"}, "STEPS must be"),
                  ({"XTRAIN": "2"}, "XTRAIN must be 0 or 1"), ({"XTRAIN": "no"}, "XTRAIN must be 0 or 1"),
                  ({"PYTORCH": "yes"}, "PYTORCH must be auto, 0 or 1"),
                  ({"XTRAIN": "0"}, "set LOGDIR")]:
    r = script(**env)
    err = r.stderr.strip()
    check(r.returncode == 2 and len(err.splitlines()) == 1 and what in err,
          f"time_to_loss.sh refuses {env}: exit 2, one line ({r.returncode}: {err})")
for env in [{"STEPS": "100", "MUON_STEPS": "100 50"}, {"STEPS": "100", "MUON_STEPS": "50\n100"}, {},
            {"XTRAIN": "0", "LOGDIR": "/nonexistent-logdir"}, {"PYTORCH": "0", "XTRAIN": "1"}]:
    r = script(**env)
    check(r.returncode == 2 and "xtrain_mpi not found" in r.stderr,
          f"time_to_loss.sh takes {env} (stops at the build check: {r.stderr.strip()})")
# PYTORCH=1 where PY has no torch: refused before any run (a stand-in build, so the check is reached)
with tempfile.TemporaryDirectory() as d:
    os.mkdir(os.path.join(d, "bin"))
    with open(os.path.join(d, "bin", "xtrain_mpi"), "w") as f:
        f.write("#!/bin/sh\nexit 1\n")
    os.chmod(os.path.join(d, "bin", "xtrain_mpi"), 0o755)
    logdir = os.path.join(d, "log")
    r = script(BIN=os.path.join(d, "bin"), PY="false", PYTORCH="1", LOGDIR=logdir)
    check(r.returncode == 2 and "PYTORCH=1 but" in r.stderr and not os.path.exists(logdir),
          f"time_to_loss.sh refuses PYTORCH=1 without torch before any run ({r.returncode}: {r.stderr.strip()})")
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
