#!/usr/bin/env python3
"""xtrain's Muon against PyTorch's torch.optim.Muon on the same parameters and gradients.

The Muon matrices of an xtrain model (muon_step --layout: the blocks' matrices, a fused q/k/v or gate/up
matrix cut into its parts, as xtrain orthogonalizes them) get random parameters (N(0, 0.02)) and, for each
of --steps steps, random gradients (N(0, 0.01)). xtrain applies its Muon (build/muon_step: the backend's
momentum, batched Newton-Schulz and update ops); PyTorch applies torch.optim.Muon to one nn.Parameter per
matrix (lr, weight_decay, momentum, nesterov=True, ns_steps, adjust_lr_fn as given). Compared: each
implementation's total update (params after - params before), max |xtrain - torch| / max |torch| over all
matrices.

--device cpu: xtrain's fp32 Newton-Schulz against torch.optim.Muon's with its bf16 cast removed (the same
function, torch/optim/_muon.py's _zeropower_via_newtonschulz, run in fp32: PyTorch rounds to bf16 on every
device, which would hide fp32 differences); tolerance 1e-4 (fp32 rounding through 5 steps of products).
--device cuda: xtrain's bf16 tensor-core Newton-Schulz against torch.optim.Muon unchanged (bf16 on the GPU);
tolerance 5e-2 (two bf16 computations in different orders: ~15 bf16 roundings each, test_cuda_muon.cpp).

Output: one JSON line {"device", "arch", "steps", "matrices", "max_rel_update_diff", "tolerance", "pass",
"torch", "command"}; exit 0 when it passes, 1 when not, 0 with "skipped: ..." where torch (>= 2.9, for
torch.optim.Muon) or the device is absent.
Example: python3 bench/muon_check.py --bin build/muon_step --device cuda --arch llama --dim 768 --heads 12
--kv-heads 4 --layers 2 --ffn 2048 --steps 3
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOL = {"cpu": 1e-4, "cuda": 5e-2}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/muon_step")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.95)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--ns-steps", type=int, default=5)
    ap.add_argument("--adjust", choices=["original", "match_rms_adamw"], default="original")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        import torch
        from torch.optim import _muon
    except ImportError as e:
        print(f"skipped: torch with torch.optim.Muon not importable ({e})")
        return 0
    if a.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 0
    model = ["--arch", a.arch, "--dim", str(a.dim), "--heads", str(a.heads), "--kv-heads", str(a.kv_heads or a.heads),
             "--layers", str(a.layers), "--ffn", str(a.ffn or 4 * a.dim)]
    muon = ["--lr", repr(a.lr), "--momentum", repr(a.momentum), "--weight-decay", repr(a.weight_decay),
            "--ns-steps", str(a.ns_steps), "--adjust", a.adjust]
    lay = json.loads(subprocess.run([a.bin, "--layout", "--device", a.device] + model, check=True,
                                    capture_output=True, text=True).stdout)
    n, mats = lay["num_params"], lay["matrices"]
    g = torch.Generator().manual_seed(a.seed)
    p0 = torch.randn(n, generator=g) * 0.02
    grads = [torch.randn(n, generator=g) * 0.01 for _ in range(a.steps)]
    with tempfile.TemporaryDirectory() as d:
        fin, fout = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        torch.cat([p0] + grads).numpy().tofile(fin)
        subprocess.run([a.bin, "--device", a.device, "--steps", str(a.steps), "--in", fin, "--out", fout] + model + muon,
                       check=True)
        xt = torch.from_file(fout, size=n, dtype=torch.float32).clone()

    if a.device == "cpu":  # the same iteration without its bf16 cast: fp32 throughout
        def ns_fp32(grad, ns_coefficients, ns_steps, eps, *_):  # torch 2.11 passes these four; later ones more
            a_, b_, c_ = ns_coefficients
            x = grad.float()
            if grad.size(0) > grad.size(1):
                x = x.T
            x = x / x.norm().clamp(min=eps)
            for _ in range(ns_steps):
                gram = x @ x.T
                x = a_ * x + (b_ * gram + c_ * gram @ gram) @ x
            return x.T if grad.size(0) > grad.size(1) else x
        _muon._zeropower_via_newtonschulz = ns_fp32
    dev = torch.device(a.device)
    params = [torch.nn.Parameter(p0[o:o + r * c].view(r, c).clone().to(dev)) for o, r, c in mats]
    opt = torch.optim.Muon(params, lr=a.lr, weight_decay=a.weight_decay, momentum=a.momentum, nesterov=True,
                           ns_steps=a.ns_steps, adjust_lr_fn=a.adjust)
    for k in range(a.steps):
        for p, (o, r, c) in zip(params, mats):
            p.grad = grads[k][o:o + r * c].view(r, c).clone().to(dev)
        opt.step()
    diff = scale = 0.0
    for p, (o, r, c) in zip(params, mats):
        before = p0[o:o + r * c]
        ut = p.detach().cpu().flatten().double() - before.double()
        ux = xt[o:o + r * c].double() - before.double()
        diff, scale = max(diff, (ux - ut).abs().max().item()), max(scale, ut.abs().max().item())
    rel = diff / scale
    ok = rel <= TOL[a.device]
    print(json.dumps({"device": a.device, "arch": a.arch, "steps": a.steps, "matrices": len(mats),
                      "max_rel_update_diff": rel, "tolerance": TOL[a.device], "pass": ok, "torch": torch.__version__,
                      "command": " ".join(sys.argv)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
