#!/usr/bin/python3
"""tools/plot_metrics.py on a one-step file, a resumed file (a step recorded twice: the later record
wins), a file with --eval and --eval-mc records (their own curves and accuracy panel) and several files: it writes a valid PNG (signature, IHDR size, non-trivial length) and an SVG;
--help works; bad input is a one-line error with exit 1 (usage errors: 2). Run with the Python that
has matplotlib (ctest: XTRAIN_PLOT_PYTHON)."""
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

from script_checks import check, failures, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "plot_metrics.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A 960x900 chart with axes, ticks and text compresses to tens of KB; an empty or blank image of the
# same size stays below this.
MIN_PNG_BYTES = 15000


def run(*args):
    return run_script(TOOL, *args, timeout=120)


def write(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def train(step, loss, lr=1e-3, tok=1000.0):
    return {"type": "train", "step": step, "loss": loss, "lr": lr, "grad_norm": 1.0, "ms": 10.0, "tok_per_s": tok}


def check_png(path, what):
    data = open(path, "rb").read() if os.path.exists(path) else b""
    check(data[:8] == PNG_SIGNATURE, f"{what}: PNG signature")
    width, height = struct.unpack(">II", data[16:24]) if len(data) >= 24 and data[12:16] == b"IHDR" else (0, 0)
    check((width, height) == (960, 900), f"{what}: IHDR {width}x{height} (960x900 expected)")
    check(len(data) > MIN_PNG_BYTES, f"{what}: {len(data)} bytes > {MIN_PNG_BYTES}")


def main():
    spec = importlib.util.spec_from_file_location("plot_metrics", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tmp = tempfile.mkdtemp(prefix="xtrain-plot.")

    r = run("--help")
    check(r.returncode == 0 and "usage: plot_metrics.py" in r.stdout and "--out" in r.stdout, "--help")
    r = run("--version")
    check(r.returncode == 0 and re.fullmatch(r"plot_metrics\.py [0-9]+\.[0-9]+\.[0-9]+\n", r.stdout) is not None,
          "--version prints the project's version: " + r.stdout + r.stderr)

    one = os.path.join(tmp, "one.jsonl")
    write(one, [train(1, 10.9), {"type": "val", "step": 1, "val_loss": 10.8},
                {"type": "final", "step": 1, "world_size": 1, "max_param_diff": 0.0, "tok_per_s": 0}])
    r = run(one, "-o", os.path.join(tmp, "one.png"))
    check(r.returncode == 0, f"one-step file: exit {r.returncode} {r.stderr.strip()}")
    check_png(os.path.join(tmp, "one.png"), "one-step file")

    # Resumed run: steps 1-6, a stale 7-8 written before the stop, then 7-10 again after --resume.
    resumed = os.path.join(tmp, "resumed.jsonl")
    write(resumed, [train(s, 10 - s * 0.5) for s in range(1, 9)] + [""] +
          [train(s, 5 - s * 0.1, tok=2000.0) for s in range(7, 11)] + [{"type": "val", "step": 10, "val_loss": 4.2}])
    t, v, e = tool.load(resumed)
    check(sorted(t) == list(range(1, 11)), "resumed file: every step once")
    check(t[7] == (4.3, 1e-3, 2000.0) and t[6] == (7.0, 1e-3, 1000.0), "resumed file: the later record of step 7 wins")
    check(v == {10: 4.2}, "resumed file: val record")
    check(e == {}, "resumed file: no eval records")
    svg = os.path.join(tmp, "resumed.svg")
    r = run(resumed, "-o", os.path.join(tmp, "resumed.png"), "-o", svg)
    check(r.returncode == 0, f"resumed file: exit {r.returncode} {r.stderr.strip()}")
    check_png(os.path.join(tmp, "resumed.png"), "resumed file")
    text = open(svg).read() if os.path.exists(svg) else ""
    check(text.startswith("<?xml") and "<svg" in text and text.rstrip().endswith("</svg>"), "resumed file: SVG")

    several = os.path.join(tmp, "several.png")
    r = run(f"w1={resumed}", one, "--title", "three runs", "-o", several)
    check(r.returncode == 0, f"several files: exit {r.returncode} {r.stderr.strip()}")
    check_png(several, "several files")
    check(os.path.getsize(several) != os.path.getsize(os.path.join(tmp, "resumed.png")),
          "several files: a different picture than one of them alone")

    # Eval sets: --eval losses beside the validation loss, --eval-mc accuracies in a panel of their own
    evals = os.path.join(tmp, "evals.jsonl")
    write(evals, [train(s, 10 - s * 0.5) for s in range(1, 11)] +
          [r for s in (5, 10) for r in ({"type": "val", "step": s, "val_loss": 9 - s * 0.4},
                                         {"type": "eval", "step": s, "name": "wiki", "loss": 9.5 - s * 0.3},
                                         {"type": "eval", "step": s, "name": "hs", "items": 40, "acc": 0.25 + s * 0.01,
                                          "acc_norm": 0.26 + s * 0.01, "acc_token_mean": 0.25, "right_logprob": -9.0})])
    t, v, e = tool.load(evals)
    check(e == {"wiki": {5: 8.0, 10: 6.5}, "hs": {5: (0.3, 0.31), 10: (0.35, 0.36)}}, f"eval records: {e}")
    r = run(evals, "-o", os.path.join(tmp, "evals.png"))
    check(r.returncode == 0, f"eval records: exit {r.returncode} {r.stderr.strip()}")
    check_png(os.path.join(tmp, "evals.png"), "eval records")
    check(os.path.getsize(os.path.join(tmp, "evals.png")) != os.path.getsize(os.path.join(tmp, "resumed.png")),
          "eval records: a picture of its own")

    # Bad input: exit 1 and one line naming the file (and line).
    broken = os.path.join(tmp, "broken.jsonl")
    write(broken, [train(1, 10.0), '{"type": "train", "step": 2, "loss": '])
    empty = os.path.join(tmp, "empty.jsonl")
    write(empty, [{"type": "final", "step": 0}])
    for args, want in (([broken], "broken.jsonl:2: not a metrics record"),
                       ([os.path.join(tmp, "missing.jsonl")], "missing.jsonl: No such file"),
                       ([empty], "empty.jsonl: no train, val or eval records")):
        r = run(*args, "-o", os.path.join(tmp, "bad.png"))
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and want in lines[0], f"bad input {want!r}: {r.stderr.strip()}")
    r = run(one, "-o", os.path.join(tmp, "out.pdf"))
    check(r.returncode == 2 and "must end in .png or .svg" in r.stderr, "output name without .png/.svg: usage error")
    check(not os.path.exists(os.path.join(tmp, "bad.png")), "no picture written on bad input")

    # Without matplotlib: one line naming the ways that install it (set-up without --tests does not)
    fake = os.path.join(tmp, "no-matplotlib", "matplotlib")
    os.makedirs(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write('raise ImportError("No module named matplotlib (a test stand-in)")\n')
    r = subprocess.run([sys.executable, TOOL, one, "-o", os.path.join(tmp, "none.png")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(fake)))
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and "scripts/setup.sh --tests" in lines[0] and
          "apt-get install python3-matplotlib" in lines[0], f"no matplotlib: {r.stderr.strip()}")

    print(f"{len(failures)} failure(s)" + (f"; pictures kept in {tmp}" if failures else ""))
    if not failures:
        shutil.rmtree(tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
