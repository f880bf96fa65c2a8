#!/usr/bin/env python3
"""Gates of data-parallel equivalence, read from two xtrain metrics files (JSON lines).

gate 1: for every step, |loss_other - loss_ref| / |loss_ref| < 1e-3 (world N trains what world 1 trains)
gate 2: the other run's final record has max_param_diff < 1e-6 (parameters agree across its ranks)

Usage: gate_compare.py REF.jsonl OTHER.jsonl [--min-steps 20] [--label TEXT]
Prints both figures; exit 0 when both gates hold, 1 otherwise.
"""
import argparse
import json
import sys

LOSS_REL_TOL = 1e-3    # gate 1: summation order differs across world sizes (float rounding)
PARAM_ABS_TOL = 1e-6   # gate 2: ranks apply the same averaged gradient


def read(path):
    train, final = {}, None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "train":
                train[r["step"]] = r["loss"]
            elif r.get("type") == "final":
                final = r
    return train, final


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("--min-steps", type=int, default=20)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    ref, _ = read(a.ref)
    other, final = read(a.other)
    ok = True
    if sorted(ref) != sorted(other) or len(ref) < a.min_steps:
        print(f"{a.label}: step sets differ or fewer than {a.min_steps} steps "
              f"(ref {len(ref)}, other {len(other)})")
        return 1
    rel = max(abs(other[s] - ref[s]) / abs(ref[s]) for s in ref)
    ok &= rel < LOSS_REL_TOL
    print(f"{a.label}: gate 1: max relative loss difference over {len(ref)} steps = {rel:.3e} "
          f"(limit {LOSS_REL_TOL:g}) {'PASS' if rel < LOSS_REL_TOL else 'FAIL'}")
    if final is None:
        print(f"{a.label}: gate 2: no final record in {a.other}")
        return 1
    d = final["max_param_diff"]
    ok &= d < PARAM_ABS_TOL
    print(f"{a.label}: gate 2: max |p_rank_i - p_rank_0| at world {final['world_size']} = {d:.3e} "
          f"(limit {PARAM_ABS_TOL:g}) {'PASS' if d < PARAM_ABS_TOL else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
