#!/usr/bin/env python3
"""bench/compare_pytorch.py's argument checks, which run before torch is imported: each bad argument
(the model shape checks xtrain makes, --steps and --bench-warmup, an --encoder-json that is not xtrain's
JSON object of token -> id with ids 0..V-1, a FIFO, an abbreviated option) is one line "usage error:
... (see --help)" on stderr, nothing on stdout, exit 2, at once. Where torch is not installed, good
arguments give the one line "skipped: ..." and exit 0 (where it is, that path would run the benchmark,
so it is left out)."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

from script_checks import check, failures, run_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "compare_pytorch.py")
BOUND_S = 30  # a FIFO opened for reading would block: every run must end well within this


def run(*args):
    return run_script(TOOL, *args, timeout=BOUND_S)


def expect_usage_error(args, cause):
    """args -> exit 2 with exactly one stderr line holding `cause`."""
    try:
        r = run(*args)
    except subprocess.TimeoutExpired:
        check(False, f"{args}: still running after {BOUND_S} s")
        return
    lines = r.stderr.splitlines()
    good = (r.returncode == 2 and not r.stdout and len(lines) == 1
            and lines[0].startswith("compare_pytorch.py: usage error: ") and lines[0].endswith(" (see --help)")
            and cause in lines[0])
    check(good, f"{' '.join(args)} -> exit {r.returncode}: {r.stderr.strip()!r}")


def main():
    work = tempfile.mkdtemp()

    def json_file(name, value):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(value if isinstance(value, str) else json.dumps(value))
        return path
    small = json_file("small.json", {"a": 0, "b": 1, "c": 2})
    E = ["--encoder-json", small]

    # steps and warmup
    expect_usage_error(E + ["--bench-warmup", "-3"], "--bench-warmup (-3) must be in [0, --steps = 30)")
    expect_usage_error(E + ["--steps", "0", "--bench-warmup", "-1"], "--steps must be positive")
    expect_usage_error(E + ["--steps", "5", "--bench-warmup", "5"], "--bench-warmup (5) must be in [0, --steps = 5)")
    # the model shape, as xtrain_mpi words it (src/app/options.cpp, GPTConfig::validate)
    expect_usage_error(E + ["--dim", "130", "--heads", "4"], "--dim must be divisible by --heads (or give --head-dim)")
    expect_usage_error(E + ["--heads", "0"], "--heads must be positive")
    expect_usage_error(E + ["--kv-heads", "3"], "--kv-heads (3) must divide --heads (4)")
    expect_usage_error(E + ["--head-dim", "-1"], "--kv-heads, --head-dim and --ffn must be >= 0")
    expect_usage_error(E + ["--dim", "0"], "--dim must be positive")
    expect_usage_error(E + ["--seq", "0"], "--seq must be positive")
    expect_usage_error(E + ["--batch", "-2"], "--batch must be positive")
    expect_usage_error(E + ["--layers", "5000"], "--layers = 5000 is too large (limit 4096)")
    expect_usage_error(E + ["--modes", "eager,jit"], "--modes: unknown mode 'jit'")
    # argparse's own errors: one line too, and no abbreviations (--ste is not --steps)
    expect_usage_error(E + ["--ste", "5"], "unrecognized arguments: --ste")
    expect_usage_error(E + ["--steps", "many"], "argument --steps: invalid int value")
    # --encoder-json: xtrain's vocabulary format or a one-line error naming the file
    for name, value, cause in [
        ("five.json", 5, "the top level is not a JSON object of token -> id"),
        ("list.json", ["a", "b"], "the top level is not a JSON object of token -> id"),
        ("string.json", "\"abc\"", "the top level is not a JSON object of token -> id"),
        ("empty.json", {}, "the top level is not a JSON object of token -> id"),
        ("text_id.json", {"a": 0, "b": "1"}, "token 'b' has a non-integer id '1'"),
        ("bool_id.json", {"a": 0, "b": True}, "token 'b' has a non-integer id True"),
        ("sparse.json", {"a": 0, "b": 2}, "the ids are not 0..1, each once"),
        ("twice.json", {"a": 0, "b": 0}, "the ids are not 0..1, each once"),
        ("broken.json", "{\"a\": ", "Expecting value"),
    ]:
        expect_usage_error(["--encoder-json", json_file(name, value)], f"--encoder-json {work}/{name}: {cause}")
    expect_usage_error(["--encoder-json", os.path.join(work, "none.json")], f"{work}/none.json: No such file or directory")
    fifo = os.path.join(work, "fifo")
    os.mkfifo(fifo)
    expect_usage_error(["--encoder-json", fifo], f"--encoder-json {fifo}: not a regular file")
    expect_usage_error(["--encoder-json", work], f"--encoder-json {work}: not a regular file")

    if importlib.util.find_spec("torch") is None:
        for args in (E, E + ["--dim", "130", "--heads", "4", "--head-dim", "32", "--steps", "1", "--bench-warmup", "0"]):
            r = run(*args)
            check(r.returncode == 0 and r.stdout.startswith("skipped: torch is not installed") and not r.stderr,
                  f"{' '.join(args)} without torch -> exit {r.returncode}: {r.stdout.strip()!r} {r.stderr.strip()!r}")
    else:
        print("torch is installed: the skip path is not run (it would run the benchmark)")
    shutil.rmtree(work)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
