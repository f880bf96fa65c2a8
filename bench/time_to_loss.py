#!/usr/bin/env python3
"""Time to a validation loss: PyTorch's side of bench/time_to_loss.sh, and the table of every run.

train: xtrain's model (bench/compare_pytorch.py's build, --arch gpt2) trained in PyTorch with torch.compile and
bf16 autocast on an llm.c token shard (xtrain_tokenize --shard-tokens), as xtrain trains it: the last
--val-fraction of the tokens held out, validation on its first --val-seqs consecutive windows every --val-every
steps and at the end, random training windows, global-norm clipping to 1.0, linear warmup then cosine decay to
0.1 x the peak (xtrain's lr_at). --optimizer adamw: AdamW (betas 0.9, 0.95, eps 1e-8, weight decay 0.1 on the 2-D
tensors, fused) at --lr on every tensor; muon: torch.optim.Muon at --muon-lr (momentum 0.95, Nesterov, 5 steps,
adjust_lr_fn original, weight decay 0) on the blocks' matrices with q, k and v as separate parameters (as
xtrain orthogonalizes them), AdamW at --lr on the rest. Writes JSON lines {"type": "val", "step", "val_loss",
"wall_s"} to --out; wall_s: the training steps' time up to that step (validation excluded; step 1, which
carries the compilation, counted at the median step time, as the table counts xtrain's).

table: reads the runs' files (xtrain's --metrics files: "xt-<optimizer>-<lr>.jsonl"; this script's:
"pt-<optimizer>-<lr>.jsonl"; a Muon run's lr is its pair MUON_LR,ADAMW_LR; "...@<steps>.jsonl" for a run planned
for fewer steps than the others), keeps each (implementation, optimizer)'s best learning rate by final validation
loss among the full-length runs (a NaN loss ranks last; ties: the first by file name), and prints per run: final
val loss, steps and wall seconds to reach xtrain AdamW's final val loss ("-" where the file has no wall time for
that step); then a row for every shorter-planned run that reaches it in fewer steps than its optimizer's
full-length run, sorted by steps, then wall seconds (a missing one last), then file name: the first of each
optimizer counts for its steps and time to the target (its final val loss stays the full-length run's); shorter-
planned runs of an optimizer without a full-length run are named in a "#" line and not counted. Then a JSON
summary line and the goals as PASS/FAIL lines (a time goal without the wall times it needs: FAIL). A file whose
name or contents it cannot read: one line on stderr naming it, exit 2; no xtrain AdamW run: exit 1.
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys
import time


def lr_factor(step, warmup, total, min_frac):
    """xtrain's lr_at (src/train/optim.cpp), cosine, as a factor of the peak."""
    if warmup > 0 and step <= warmup:
        return step / warmup
    if total - warmup <= 0:
        return 1.0
    if step >= total:
        return min_frac
    p = (step - warmup) / (total - warmup)
    return min_frac + 0.5 * (1 - min_frac) * (1 + math.cos(math.pi * p))


def train(a):
    import numpy as np
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compare_pytorch
    head = np.fromfile(a.shard, dtype=np.int32, count=256)
    assert head[0] == 20240520, f"{a.shard}: not an llm.c uint16 shard"
    tokens = np.fromfile(a.shard, dtype=np.uint16, offset=1024)[: head[2]].astype(np.int64)
    n = len(tokens)
    n_train = int(n * (1.0 - a.val_fraction))
    T, B = a.seq, a.batch
    seqs = min(a.val_seqs, (n - n_train - 1) // T)
    data = torch.from_numpy(tokens).cuda()
    val_x = torch.stack([data[n_train + j * T: n_train + j * T + T] for j in range(seqs)])
    val_y = torch.stack([data[n_train + j * T + 1: n_train + j * T + T + 1] for j in range(seqs)])
    margs = compare_pytorch.parse_args(["--arch", "gpt2", "--dim", str(a.dim), "--heads", str(a.heads), "--layers",
                                        str(a.layers), "--seq", str(T), "--batch", str(B), "--vocab", "50257"])
    torch.manual_seed(a.seed)
    model, _ = compare_pytorch.build(margs, torch)
    nn = torch.nn

    class SplitQkv(nn.Module):  # q, k, v as three parameters (Muon orthogonalizes each), one matmul as before
        def __init__(self, lin, rows):
            super().__init__()
            self.w = nn.ParameterList([nn.Parameter(w.detach().clone()) for w in lin.weight.split(rows)])
            self.bias = nn.Parameter(lin.bias.detach().clone())

        def forward(self, x):
            return F.linear(x, torch.cat(list(self.w)), self.bias)

    HS = a.dim // a.heads
    for b in model.blocks:
        b.qkv = SplitQkv(b.qkv, [a.heads * HS] * 3)
    blocks = {id(p) for b in model.blocks for p in b.parameters() if p.dim() == 2}
    muon_p = [p for p in model.parameters() if id(p) in blocks] if a.optimizer == "muon" else []
    rest = [p for p in model.parameters() if id(p) not in {id(q) for q in muon_p}]
    opts = [torch.optim.AdamW([{"params": [p for p in rest if p.dim() >= 2], "weight_decay": 0.1},
                               {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}],
                              lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)]
    if muon_p:
        opts.append(torch.optim.Muon(muon_p, lr=a.muon_lr, weight_decay=0.0, momentum=0.95, nesterov=True))
    peaks = [[g["lr"] for g in o.param_groups] for o in opts]
    step_fn = torch.compile(model)
    gen = torch.Generator(device="cuda").manual_seed(a.seed + 1)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16)

    def validate():
        with torch.no_grad(), autocast:
            return sum(model(val_x[i:i + B], val_y[i:i + B]).item() * len(val_x[i:i + B])
                       for i in range(0, seqs, B)) / seqs

    times, out = [], open(a.out, "w")
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        f = lr_factor(step, a.warmup, a.steps, 0.1)
        for o, pk in zip(opts, peaks):
            for g, p in zip(o.param_groups, pk):
                g["lr"] = p * f
        starts = torch.randint(0, n_train - T, (B,), device="cuda", generator=gen)
        idx = starts[:, None] + torch.arange(T + 1, device="cuda")
        w = data[idx]
        with autocast:
            loss = step_fn(w[:, :-1], w[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - t0)
        if step % a.val_every == 0 or step == a.steps:
            med = statistics.median(times[1:]) if len(times) > 1 else times[0]
            wall = med + sum(times[1:])
            out.write(json.dumps({"type": "val", "step": step, "val_loss": validate(), "wall_s": wall}) + "\n")
            out.flush()
    return 0


NAMES = {"xt": "xtrain", "pt": "torch.compile"}  # the implementations of the run files' names


class RunFileError(Exception):
    """A run file the table cannot use; its message names the file."""


def _is_float(x):
    try:
        float(x)
        return True
    except ValueError:
        return False


def parse_name(path):
    """(impl, opt, lr, planned steps or None) of a run file named <impl>-<opt>-<lr>[@<steps>].jsonl: impl xt or
    pt, opt a word, lr one learning rate or a Muon run's pair MUON_LR,ADAMW_LR, steps a positive integer."""
    parts = os.path.basename(path)[:-len(".jsonl")].split("-", 2)
    if len(parts) == 3:
        impl, opt, rest = parts
        lr, at, planned = rest.partition("@")
        if impl in NAMES and opt.isalnum() and lr and all(_is_float(x) for x in lr.split(",")) and \
                (not at or (planned.isascii() and planned.isdigit() and int(planned) > 0)):
            return impl, opt, lr, int(planned) if at else None
    raise RunFileError(f"{path}: not a run file name (<xt|pt>-<optimizer>-<lr>[,<lr>][@<steps>].jsonl, "
                       "e.g. xt-muon-0.02,3e-3@330.jsonl)")


def read_run(path):
    """(val {step: loss}, wall {step: seconds}) of a run file: xtrain's metrics or this script's output. A val
    loss of null (JSON's non-finite) reads as NaN. Raises RunFileError on a line that is not such a record."""
    val, ms, wall = {}, {}, {}
    n = 0
    try:
        with open(path) as f:
            for line in f:
                n += 1
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("type") == "val":
                    v = r["val_loss"]
                    val[int(r["step"])] = math.nan if v is None else float(v)
                    if r.get("wall_s") is not None:
                        wall[int(r["step"])] = float(r["wall_s"])
                elif r.get("type") == "train":
                    ms[int(r["step"])] = float(r["ms"])
    except UnicodeDecodeError:
        raise RunFileError(f"{path}: not a text file") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else f"{type(e).__name__}: {e}"
        raise RunFileError(f"{path}:{n}: not a run record ({why})") from None
    if ms:  # xtrain: step 1 (warm-up) counted at the median, as for PyTorch
        med = statistics.median([ms[s] for s in ms if s > 1] or [ms[min(ms)]])
        total, acc = 0.0, {}
        for s in sorted(ms):
            total += med if s == 1 else ms[s]
            acc[s] = total / 1e3
        wall = {s: acc[s] for s in val if s in acc}
    return val, wall


def table(a):
    runs = []  # (file name, impl, opt, lr, planned steps or None, val, wall)
    try:
        for path in sorted(glob.glob(os.path.join(a.dir, "*.jsonl"))):
            impl, opt, lr, planned = parse_name(path)
            val, wall = read_run(path)
            if val:
                runs.append((os.path.basename(path), impl, opt, lr, planned, val, wall))
    except (RunFileError, OSError) as e:
        print(f"table: {e}", file=sys.stderr)
        return 2
    def loss_key(v):  # a NaN loss (a diverged run) ranks last
        return math.inf if math.isnan(v) else v
    best = {}  # each (implementation, optimizer)'s full-length run of the lowest final val loss (ties: file name)
    for _, impl, opt, lr, planned, val, wall in runs:
        last = max(val)
        if planned is None and ((impl, opt) not in best or loss_key(val[last]) < loss_key(best[(impl, opt)]["final"])):
            best[(impl, opt)] = {"lr": lr, "final": val[last], "steps": last, "val": val, "wall": wall}
    if ("xt", "adamw") not in best:
        print("table: no xtrain AdamW run (xt-adamw-*.jsonl)")
        return 1
    target = best[("xt", "adamw")]["final"]

    def reach(val, wall):  # (first validated step at or below the target, its wall seconds or None), or (None, None)
        hit = next((s for s in sorted(val) if val[s] <= target), None)
        return hit, (wall.get(hit) if hit is not None else None)

    def wall_text(w):
        return "-" if w is None else f"{w:.1f}"

    def speed(hit, w, name):  # the order of "faster": fewer steps, then less wall (a missing wall last), then name
        return hit, w is None, w or 0.0, name
    res = {}
    print(f"# {a.label}: target = xtrain AdamW's final val loss {target:.4f}")
    print(f"{'run':<32} {'lr':>14} {'final val':>10} {'steps to target':>16} {'wall s to target':>17}")
    for (impl, opt), r in sorted(best.items()):
        hit, w = reach(r["val"], r["wall"])
        res[(impl, opt)] = (hit, w, r)
        print(f"{NAMES[impl] + ' ' + opt:<32} {r['lr']:>14} {r['final']:>10.4f} {str(hit or 'not reached'):>16} "
              f"{wall_text(w):>17}")
    # runs planned for fewer steps: a row for each that reaches the target in fewer steps than its optimizer's
    # full-length best; the fastest of them counts for that optimizer's steps and time to the target
    faster, orphans = [], set()  # faster: (speed, impl, opt, lr, planned, final val loss, wall)
    for name, impl, opt, lr, planned, val, wall in runs:
        if planned is None:
            continue
        if (impl, opt) not in res:
            orphans.add(f"{NAMES[impl]} {opt}")
            continue
        hit, w = reach(val, wall)
        full_hit = res[(impl, opt)][0]
        if hit is not None and (full_hit is None or hit < full_hit):
            faster.append((speed(hit, w, name), impl, opt, lr, planned, val[max(val)], w))
    faster.sort(key=lambda f: f[0])  # the speed tuple ends with the file name: no two are equal
    counted = set()
    for (hit, _, _, _), impl, opt, lr, planned, final, w in faster:
        print(f"{NAMES[impl] + ' ' + opt + f' ({planned} steps)':<32} {lr:>14} {final:>10.4f} {hit:>16} "
              f"{wall_text(w):>17}")
        if (impl, opt) not in counted:  # the fastest
            counted.add((impl, opt))
            res[(impl, opt)] = (hit, w, dict(res[(impl, opt)][2], fastest={"lr": lr, "planned_steps": planned}))
    for o in sorted(orphans):
        print(f"# {o}: runs planned for fewer steps but no full-length run to compare with: not counted")
    print(json.dumps({"label": a.label, "target": target, "runs": {f"{i}-{o}": {"lr": r["lr"], "final_val": r["final"],
                      "steps_to_target": h, "wall_s_to_target": w, "reached_by": r.get("fastest")}
                      for (i, o), (h, w, r) in res.items()}}))

    def goal(text, ok):
        print(f"goal: {text}: {'PASS' if ok else 'FAIL'}")
    xa, xm, pm, pa = (res.get(k) for k in [("xt", "adamw"), ("xt", "muon"), ("pt", "muon"), ("pt", "adamw")])
    if xa and xm and xm[0]:
        goal(f"xtrain muon reaches it in {xm[0]} steps <= 0.55 x {xa[0]}", xm[0] <= 0.55 * xa[0])
        if xm[1] is None or xa[1] is None:  # a run file without the step times: the goal is not shown
            goal(f"and in {wall_text(xm[1])} s <= 0.6 x {wall_text(xa[1])} s (no wall time recorded)", False)
        else:
            goal(f"and in {xm[1]:.1f} s <= 0.6 x {xa[1]:.1f} s", xm[1] <= 0.6 * xa[1])
    if xm and pm:
        d = xm[2]["final"] - pm[2]["final"]
        goal(f"xtrain muon's final val {xm[2]['final']:.4f} within 0.02 of torch.optim.Muon's {pm[2]['final']:.4f} or below",
             d <= 0.02)
    if xm and pa and xm[0]:
        if xm[1] is not None and pa[1] is not None:
            goal(f"xtrain muon's {xm[1]:.1f} s to it <= 0.4 x torch.compile AdamW's {pa[1]:.1f} s", xm[1] <= 0.4 * pa[1])
        elif xm[1] is not None and pa[0] is None and pa[2]["wall"]:  # its whole run bounds its time to the target
            full = pa[2]["wall"][max(pa[2]["wall"])]
            goal(f"torch.compile AdamW does not reach it in {pa[2]['steps']} steps ({full:.1f} s): xtrain muon's "
                 f"{xm[1]:.1f} s <= 0.4 x that bound", xm[1] <= 0.4 * full)
        else:
            goal(f"xtrain muon's {wall_text(xm[1])} s to it <= 0.4 x torch.compile AdamW's {wall_text(pa[1])} s "
                 "(no wall time recorded)", False)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--shard", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw")
    t.add_argument("--lr", type=float, default=1.5e-3)
    t.add_argument("--muon-lr", type=float, default=0.02)
    for k, v in [("dim", 384), ("heads", 6), ("layers", 6), ("seq", 256), ("batch", 32), ("steps", 600),
                 ("warmup", 30), ("val-every", 25), ("val-seqs", 64), ("seed", 1)]:
        t.add_argument("--" + k, type=int, default=v)
    t.add_argument("--val-fraction", type=float, default=0.1)
    s = sub.add_parser("table")
    s.add_argument("dir")
    s.add_argument("--label", default="")
    a = ap.parse_args()
    return train(a) if a.cmd == "train" else table(a)


if __name__ == "__main__":
    sys.exit(main())
