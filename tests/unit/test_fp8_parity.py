#!/usr/bin/env python3
"""bench/fp8_parity.sh without a GPU: its refusal of bad settings (one line on stderr, exit 2, before anything
runs), --help, and its record per workload from two runs of a stand-in xtrain_mpi (and mpirun) that write
metrics files: the final validation losses, their difference (fp8 - bf16), both curves, the speed-up from the
steady step times, each command with --fp8 only in the FP8 run; a failed run gives an error record and exit 1."""
import json
import os
import stat
import subprocess
import tempfile

from script_checks import check, failures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "fp8_parity.sh")

# The stand-in trainer: reads --metrics and --fp8 from its arguments, writes 20 train records (bf16 10 ms a step,
# FP8 8 ms), validation every 10 steps (FP8's loss 0.005 above bf16's) and the final record; FAIL_FP8=1 makes the
# FP8 run fail.
FAKE_XTRAIN = r"""#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
metrics = a[a.index("--metrics") + 1]
fp8 = "--fp8" in a
if fp8 and os.environ.get("FAIL_FP8") == "1":
    print("rank 0 (host): usage error: stand-in failure", file=sys.stderr)
    sys.exit(2)
with open(metrics, "w") as f:
    for s in range(1, 21):
        ms = 8.0 if fp8 else 10.0
        f.write(json.dumps({"type": "train", "step": s, "loss": 5.0, "ms": ms, "tok_per_s": 4096 / ms * 1e3}) + "\n")
        if s % 10 == 0:
            f.write(json.dumps({"type": "val", "step": s, "val_loss": 6.0 - s / 100 + (0.005 if fp8 else 0.0)}) + "\n")
    f.write(json.dumps({"type": "final", "step": 20, "tokens_seen": 20 * 4096, "params": 1,
                        "peak_memory_bytes": (2 << 30) if fp8 else (1 << 30)}) + "\n")
"""
# mpirun's stand-in: runs what follows "-np N"
FAKE_MPIRUN = """#!/usr/bin/env bash
while [[ $# -gt 0 && $1 != -np ]]; do shift; done
shift 2
exec "$@"
"""


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(env_extra, *args):
    env = dict(os.environ, **env_extra)
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60, env=env)


with tempfile.TemporaryDirectory() as tmp:
    bin_dir = os.path.join(tmp, "bin")
    os.mkdir(bin_dir)
    write_exe(os.path.join(bin_dir, "xtrain_mpi"), FAKE_XTRAIN)
    write_exe(os.path.join(bin_dir, "mpirun"), FAKE_MPIRUN)
    base = {"BIN": bin_dir, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "DATA": tmp, "STEPS": "20",
            "VAL_EVERY": "10", "WARMUP": "2"}

    r = run(base, "--help")
    check(r.returncode == 0 and "FP8 loss parity" in r.stdout, "--help prints the header, exit 0")

    for name, env, pattern in [
        ("STEPS not a positive integer", {"STEPS": "x"}, "STEPS must be a positive integer"),
        ("VAL_EVERY 0", {"VAL_EVERY": "0"}, "VAL_EVERY must be a positive integer"),
        ("an unknown workload", {"WORKLOADS": "foo"}, "unknown workload 'foo'"),
        ("a batch of 0", {"BATCH_llama32_1b": "0"}, "BATCH_llama32_1b must be a positive integer"),
        ("no xtrain_mpi in BIN", {"BIN": tmp}, "xtrain_mpi not found"),
    ]:
        logdir = os.path.join(tmp, "refused-" + name.replace(" ", "-"))
        r = run(dict(base, LOGDIR=logdir, **env))
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and pattern in lines[0] and r.stdout == "" and
              not os.path.exists(os.path.join(logdir, "smollm_135m.bf16.log")),
              f"{name}: one line, exit 2, nothing run ({r.returncode}: {r.stderr.strip()})")

    r = run(dict(base, LOGDIR=os.path.join(tmp, "ok"), WORKLOADS="smollm_135m", FP8="mlp"))
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    check(r.returncode == 0 and len(recs) == 1, f"one record for one workload, exit 0 ({r.returncode}: {r.stderr})")
    if recs:
        rec = recs[0]
        check(rec["workload"] == "smollm_135m" and rec["fp8"] == "mlp" and rec["steps"] == 20, "workload, fp8, steps")
        check(rec["val_loss_bf16"] == 5.8 and rec["val_loss_fp8"] == 5.805 and rec["difference"] == 0.005,
              f"final val losses and their difference ({rec['val_loss_bf16']}, {rec['val_loss_fp8']}, {rec['difference']})")
        check(rec["val_curve_bf16"] == [[10, 5.9], [20, 5.8]] and rec["val_curve_fp8"] == [[10, 5.905], [20, 5.805]],
              "both validation curves")
        check(rec["speedup"] == 1.25 and rec["tok_per_s_bf16"] == 409600 and rec["tok_per_s_fp8"] == 512000,
              f"speed from the steady step times ({rec['speedup']})")
        check(rec["peak_device_mib_fp8"] == 2048 and rec["peak_device_mib_bf16"] == 1024, "peak memory of each run")
        check("--fp8 mlp" in rec["command_fp8"] and "--fp8" not in rec["command_bf16"] and
              "--batch 4" in rec["command_bf16"], "--fp8 in the FP8 command only; the workload's batch")

    r = run(dict(base, LOGDIR=os.path.join(tmp, "fail"), WORKLOADS="smollm_135m", FAIL_FP8="1"))
    recs = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    check(r.returncode == 1 and len(recs) == 1 and recs[0].get("mode") == "fp8" and "error" in recs[0] and
          "stand-in failure" in r.stderr, f"a failed FP8 run: an error record, its error line, exit 1 ({r.returncode})")

print(f"{len(failures)} failed" if failures else "all ok")
raise SystemExit(1 if failures else 0)
