#!/usr/bin/env python3
"""Start-up time and memory of a training run's ranks (docs/scaling.md, "Data").

Usage: data_startup.py LABEL -- COMMAND...
Runs COMMAND (e.g. mpirun -np 4 xtrain_mpi ... --log-every 1), reads its standard output, and every
0.2 s reads /proc/<pid>/smaps_rollup of each xtrain_mpi / xtrain_threads process it started. Prints
one JSON line: label, startup_s (launch to the first "step" line, seconds), and per rank (process)
hwm_mb (VmHWM of /proc/<pid>/status, the kernel's peak resident size) and the sampled peaks of rss_mb (resident, file pages included: VmHWM-like), pss_mb (proportional: pages shared
by N processes count 1/N each) and anon_mb (private anonymous memory), in MiB, plus the exit code.
"""
import json
import os
import subprocess
import sys
import threading
import time

NAMES = {"xtrain_mpi", "xtrain_threads"}


def descendants(root):
    """pids of the processes under root (by /proc/<pid>/stat parent links)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def rollup(pid):
    """(rss, pss, anon, VmHWM) in kB from smaps_rollup, or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() not in NAMES:
                return None
        vals = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(":"):
                    vals[parts[0][:-1]] = int(parts[1])
        with open(f"/proc/{pid}/status") as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
        return vals.get("Rss", 0), vals.get("Pss", 0), vals.get("Anonymous", 0), hwm
    except (OSError, ValueError):
        return None


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0)
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    label, cmd = sys.argv[1], sys.argv[3:]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = {}
    done = threading.Event()

    def poll():
        while not done.is_set():
            for pid in descendants(proc.pid):
                r = rollup(pid)
                if r:
                    old = peak.get(pid, (0, 0, 0, 0))
                    peak[pid] = tuple(max(a, b) for a, b in zip(old, r))
            time.sleep(0.2)

    th = threading.Thread(target=poll)
    th.start()
    startup = None
    for line in proc.stdout:
        if startup is None and line.startswith("step"):
            startup = time.monotonic() - t0
        sys.stderr.write(line)
    rc = proc.wait()
    done.set()
    th.join()
    ranks = [{"hwm_mb": round(h / 1024), "rss_mb": round(r / 1024), "pss_mb": round(p / 1024), "anon_mb": round(a / 1024)}
             for _, (r, p, a, h) in sorted(peak.items())]
    print(json.dumps({"label": label, "startup_s": None if startup is None else round(startup, 2),
                      "ranks": ranks, "rc": rc, "command": " ".join(cmd)}))


if __name__ == "__main__":
    main()
