"""Shared by the tests of xtrain's Python scripts (test_compare_pytorch.py, test_plot_metrics.py): named
checks that print "ok" / "FAIL" and are counted, and one way to run a script under test."""
import subprocess
import sys

failures = []  # the names of the checks that failed


def check(cond, what):
    """Prints `ok   what` or `FAIL what`; a failure is kept in `failures`."""
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run_script(path, *args, timeout):
    """The script at `path` run with this interpreter and `args`; stdout and stderr captured as text.
    Raises subprocess.TimeoutExpired after `timeout` seconds."""
    return subprocess.run([sys.executable, path, *args], capture_output=True, text=True, timeout=timeout)
