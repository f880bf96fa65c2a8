"""bench/kernel_gaps.py on hand-made traces whose answer is known: two steps of kernels with gaps of
known length, overlapping records (a copy under a kernel), and the one-line errors."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_checks import check, failures, run_script  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "kernel_gaps.py")

# Times in ns. Step 1 ends at the first AdamW (end 1000); step 2 runs 1000 .. 5000:
#   gemm 1100-2000 (gap 100 after AdamW), memcpy 1500-2500 overlapping it (busy to 2500),
#   layernorm 3000-3500 (gap 500), adamw 4000-5000 (gap 500). Busy 1400 + 500 + 1000 = 2900 of 4000:
#   idle 1100 = 27.5%.
ROWS = [
    ("kernel", 0, 1000, "adamw_kernel"),
    ("kernel", 1100, 2000, "nvjet_gemm"),
    ("memcpy", 1500, 2500, "kind 1 bytes 16"),
    ("kernel", 3000, 3500, "layernorm_forward_kernel"),
    ("kernel", 4000, 5000, "adamw_kernel"),
]

with tempfile.TemporaryDirectory() as d:
    trace = os.path.join(d, "trace.csv")
    with open(trace, "w") as f:
        f.write("kind,start_ns,end_ns,stream,name\n")
        for kind, s, e, name in ROWS:
            f.write(f'{kind},{s},{e},7,"{name}"\n')
    r = run_script(SCRIPT, trace, "1", "5", timeout=30)
    check(r.returncode == 0, f"a two-step trace is read (rc {r.returncode}, stderr {r.stderr.strip()!r})")
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check("0.004 ms" in first and "busy 0.003 ms" in first and "idle 0.001 ms (27.5%)" in first,
          f"step span, busy and idle of the known trace: {first!r}")
    check("3 kernels, 1 copies/sets, 3 gaps" in first, f"records and gaps counted: {first!r}")
    gap_lines = [l for l in r.stdout.splitlines() if " us after " in l]
    check(len(gap_lines) == 3 and gap_lines[0].strip().startswith("0.5 us after"),
          f"the gaps listed largest first: {gap_lines!r}")

    one = os.path.join(d, "one.csv")
    with open(one, "w") as f:
        f.write("kind,start_ns,end_ns,stream,name\n" + 'kernel,0,10,7,"adamw_kernel"\n')
    r = run_script(SCRIPT, one, timeout=30)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and "need two steps" in r.stderr,
          f"one AdamW kernel: a one-line error, exit 1 ({r.returncode}, {r.stderr.strip()!r})")
    r = run_script(SCRIPT, os.path.join(d, "missing.csv"), timeout=30)
    check(r.returncode == 1 and "cannot read" in r.stderr, f"a missing file: exit 1 ({r.stderr.strip()!r})")
    # a record on another stream running past the step's end counts only up to it
    over = os.path.join(d, "over.csv")
    with open(over, "w") as f:
        f.write("kind,start_ns,end_ns,stream,name\n" + 'kernel,0,1000,7,"adamw_kernel"\n'
                + 'kernel,1500,9000,8,"nccl_allreduce"\n' + 'kernel,2000,3000,7,"adamw_kernel"\n')
    r = run_script(SCRIPT, over, "1", timeout=30)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    check(r.returncode == 0 and "busy 0.002 ms, idle 0.001 ms (25.0%)" in first,
          f"a record past the step's end is clipped to it: {first!r} {r.stderr.strip()!r}")
    bad = {"same end": 'kernel,0,1000,7,"adamw_kernel"\nkernel,500,1000,7,"adamw_kernel"\n',
           "short row": 'kernel,5\n'}
    for what, body in bad.items():
        path = os.path.join(d, "bad.csv")
        with open(path, "w") as f:
            f.write("kind,start_ns,end_ns,stream,name\n" + body)
        r = run_script(SCRIPT, path, timeout=30)
        check(r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr,
              f"{what}: a one-line error, exit 1 ({r.returncode}, {r.stderr.strip()!r})")
    r = run_script(SCRIPT, "--help", timeout=30)
    check(r.returncode == 0 and "Usage" in r.stdout, "--help prints the usage")

sys.exit(1 if failures else 0)
