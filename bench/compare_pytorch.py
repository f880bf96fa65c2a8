#!/usr/bin/env python3
"""xtrain's training step in PyTorch, eager and torch.compile: the reference bench/bench_gpu.sh runs in
the same session.

The model is xtrain's (src/model/model.h, docs/design.md "Model"), either family:
--arch gpt2: pre-LN GPT-2 with learned position embeddings, layernorm eps 1e-5, GELU tanh, q/k/v from one
matmul with bias (grouped-query when --kv-heads < --heads), scaled_dot_product_attention(is_causal=True),
dropout 0, and the lm_head tied to the token embedding.
--arch llama: pre-norm RMSNorm (--norm-eps), rotary positions on q and k (rotate-half, --rope-theta), no
biases, no learned positions, SDPA with grouped-query attention, a SwiGLU MLP (gate and up as one matmul,
silu(gate) * up, down; --ffn is the intermediate size), the head tied or not (--tie-embeddings).
Token-embedding rows are padded to Vp = V rounded up to 64 (the padding rows zero; the loss is the softmax
cross-entropy over the first V columns). Initialization as xtrain's: N(0, 0.02), gpt2's residual
projections N(0, 0.02/sqrt(2L)), biases 0. The optimizer is xtrain's AdamW (src/train/optim.cpp,
options.cpp defaults): lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D weights only
(wte, wpe, the matmul weights), fused=True, after clipping the global gradient norm to 1.0. The learning
rate stays at its peak: xtrain's warmup + cosine schedule changes values, not work.
--dtype bf16: bf16 autocast over fp32 parameters (as xtrain's bf16); fp32: no autocast and no TF32
(xtrain's fp32 GEMMs use none).

Shapes come as xtrain's own options (--arch --dim --heads --kv-heads --head-dim --layers --ffn --seq --batch
--tie-embeddings --norm-eps --rope-theta, same defaults), so the bench scripts pass the workload arguments
they give xtrain (bench/common.sh). V is --vocab, else the size of --encoder-json (xtrain's GPT-2 vocabulary). Tokens are random: speed does not depend on them.
Each step reads its loss (as xtrain logs every step), so a step's time is host-measured like xtrain's
"ms"; tok/s = B*T / mean step time over the steps after --bench-warmup.

Output: one JSON line per mode, {"mode", "tok_per_s", "step_ms", "timed_steps", "params", "peak_device_mib",
"final_loss", "dtype", "torch", "gpu", "command"}. Exits 0 with one line "skipped: ..." where torch or a CUDA
device is absent; 2 on bad arguments (the shape checks xtrain makes; one line "usage error: ...").
"""
import argparse
import json
import math
import os
import stat
import sys
import time


# xtrain's size limits (GPTConfig::kMax*, src/model/model.h), checked as src/app/options.cpp checks them
LIMITS = {"dim": 1 << 16, "heads": 1 << 12, "kv_heads": 1 << 12, "head_dim": 1 << 12, "layers": 1 << 12,
          "ffn": 1 << 18, "seq": 1 << 20}


class Parser(argparse.ArgumentParser):
    """argparse with xtrain's usage errors: one line "<prog>: usage error: <cause> (see --help)", exit 2."""

    def error(self, message):
        print(f"{self.prog}: usage error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def read_vocab_size(path, p):
    """V of a GPT-2 encoder.json: a JSON object of token -> id with the ids 0..V-1, as xtrain reads it
    (src/data/tokenizer.cpp). A usage error naming the file otherwise; what is not a regular file (a FIFO
    would block) is refused before it is opened."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            p.error(f"--encoder-json {path}: not a regular file")
        with open(path, encoding="utf-8") as f:
            vocab = json.load(f)
    except OSError as e:
        p.error(f"--encoder-json {path}: {e.strerror or e}")
    except ValueError as e:  # not JSON, or not UTF-8
        p.error(f"--encoder-json {path}: {e}")
    if not isinstance(vocab, dict) or not vocab:
        p.error(f"--encoder-json {path}: the top level is not a JSON object of token -> id")
    ids = set()
    for token, i in vocab.items():
        if type(i) is not int:  # bool is an int subclass, and not an id
            p.error(f"--encoder-json {path}: token {token!r} has a non-integer id {i!r}")
        ids.add(i)
    if ids != set(range(len(vocab))):
        p.error(f"--encoder-json {path}: the ids are not 0..{len(vocab) - 1}, each once")
    return len(vocab)


def parse_args(argv):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = Parser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2", help="model family (xtrain's --arch)")
    p.add_argument("--tie-embeddings", choices=["true", "false"], default="true",
                   help="the head is the token embedding (false: its own matrix; --arch llama only)")
    p.add_argument("--norm-eps", type=float, default=1e-5, help="RMSNorm epsilon (--arch llama)")
    p.add_argument("--rope-theta", type=float, default=10000.0, help="rotary base theta (--arch llama)")
    p.add_argument("--vocab", type=int, default=0, help="V (0 = the size of --encoder-json)")
    p.add_argument("--dim", type=int, default=128, help="C: model width")
    p.add_argument("--heads", type=int, default=4, help="NH: query heads")
    p.add_argument("--kv-heads", type=int, default=0, help="KVH: key/value heads (0 = --heads)")
    p.add_argument("--head-dim", type=int, default=0, help="HS: head size (0 = dim / heads)")
    p.add_argument("--layers", type=int, default=4, help="L: transformer blocks")
    p.add_argument("--ffn", type=int, default=0, help="MLP hidden width (0 = 4 x dim)")
    p.add_argument("--seq", type=int, default=128, help="T: tokens per sequence")
    p.add_argument("--batch", type=int, default=16, help="B: sequences per step")
    p.add_argument("--encoder-json", default=os.path.join(repo, "data/gpt2/encoder.json"),
                   help="GPT-2 encoder.json: its size is V")
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=30, help="steps per mode")
    p.add_argument("--bench-warmup", type=int, default=5, help="first steps left out of tok/s, in [0, --steps)")
    p.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile")
    a = p.parse_args(argv)
    # the model's shape as src/app/options.cpp and GPTConfig::validate check it, in their order and words
    if a.heads <= 0:
        p.error("--heads must be positive")
    for name, hi in LIMITS.items():
        if getattr(a, name) > hi:
            p.error(f"--{name.replace('_', '-')} = {getattr(a, name)} is too large (limit {hi})")
    if a.head_dim == 0 and a.dim % a.heads:
        p.error("--dim must be divisible by --heads (or give --head-dim)")
    if a.kv_heads < 0 or a.head_dim < 0 or a.ffn < 0:
        p.error("--kv-heads, --head-dim and --ffn must be >= 0")
    a.kv_heads = a.kv_heads or a.heads
    a.head_dim = a.head_dim or a.dim // a.heads
    a.ffn = a.ffn or 4 * a.dim
    for name in ("seq", "dim", "layers", "batch"):
        if getattr(a, name) <= 0:
            p.error(f"--{name} must be positive")
    if a.heads % a.kv_heads:
        p.error(f"--kv-heads ({a.kv_heads}) must divide --heads ({a.heads})")
    if a.steps <= 0:
        p.error("--steps must be positive")
    if not 0 <= a.bench_warmup < a.steps:
        p.error(f"--bench-warmup ({a.bench_warmup}) must be in [0, --steps = {a.steps})")
    a.modes = a.modes.split(",")
    if bad := [m for m in a.modes if m not in ("eager", "compile")]:
        p.error(f"--modes: unknown mode {bad[0]!r} (eager, compile)")
    if a.tie_embeddings == "false" and a.arch != "llama":
        p.error("--tie-embeddings false needs --arch llama")
    if a.vocab < 0:
        p.error("--vocab must be >= 0")
    a.vocab = a.vocab or read_vocab_size(a.encoder_json, p)
    return a


def build(a, torch):
    """The model (a torch.nn.Module returning the mean loss) and its fused AdamW, on the GPU."""
    nn, F = torch.nn, torch.nn.functional
    C, NH, KVH, HS, L = a.dim, a.heads, a.kv_heads, a.head_dim, a.layers
    Vp = (a.vocab + 63) // 64 * 64  # xtrain's GPTConfig::Vp

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
            self.qkv = nn.Linear(C, (NH + 2 * KVH) * HS)
            self.proj = nn.Linear(NH * HS, C)
            self.fc = nn.Linear(C, a.ffn)
            self.fc_proj = nn.Linear(a.ffn, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([NH * HS, KVH * HS, KVH * HS], dim=-1)
            q, k, v = (t.view(B, T, -1, HS).transpose(1, 2) for t in (q, k, v))
            if KVH != NH:  # each key/value head serves NH / KVH consecutive query heads
                k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, NH * HS))
            return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def rotate(x, cos, sin):  # Hugging Face's rotate-half convention, x (B, H, T, HS)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class LlamaBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.RMSNorm(C, eps=a.norm_eps), nn.RMSNorm(C, eps=a.norm_eps)
            self.qkv = nn.Linear(C, (NH + 2 * KVH) * HS, bias=False)
            self.proj = nn.Linear(NH * HS, C, bias=False)
            self.gate_up = nn.Linear(C, 2 * a.ffn, bias=False)
            self.down_proj = nn.Linear(a.ffn, C, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).split([NH * HS, KVH * HS, KVH * HS], dim=-1)
            q, k, v = (t.view(B, T, -1, HS).transpose(1, 2) for t in (q, k, v))
            q, k = rotate(q, cos.to(q.dtype), sin.to(q.dtype)), rotate(k, cos.to(k.dtype), sin.to(k.dtype))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=KVH != NH)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, NH * HS))
            gate, up = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down_proj(F.silu(gate) * up)

    llama = a.arch == "llama"

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = None if llama else nn.Embedding(a.seq, C)
            self.blocks = nn.ModuleList((LlamaBlock if llama else Block)() for _ in range(L))
            self.lnf = nn.RMSNorm(C, eps=a.norm_eps) if llama else nn.LayerNorm(C, eps=1e-5)
            self.lm_head = nn.Linear(C, Vp, bias=False) if a.tie_embeddings == "false" else None
            for name, m in self.named_modules():  # the norms keep their default w = 1, b = 0
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    resid = name.endswith("proj") and not llama  # gpt2's attention and MLP output projections
                    nn.init.normal_(m.weight, std=0.02 / math.sqrt(2 * L) if resid else 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
            with torch.no_grad():
                for head in (self.wte, self.lm_head):
                    if head is not None:
                        head.weight[a.vocab:].zero_()
            if llama:  # rotary angles pos * theta^(-2i/HS), i < HS/2, repeated for both halves (src/backend/rotary.h)
                inv = a.rope_theta ** (-torch.arange(0, HS, 2, dtype=torch.float32) / HS)
                ang = torch.outer(torch.arange(a.seq, dtype=torch.float32), inv).repeat(1, 2)
                self.register_buffer("cos", ang.cos(), persistent=False)
                self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, idx, targets):
            x = self.wte(idx)
            if llama:
                T = idx.shape[1]
                cos, sin = self.cos[:T], self.sin[:T]
                for b in self.blocks:
                    x = b(x, cos, sin)
            else:
                x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
                for b in self.blocks:
                    x = b(x)
            head = self.lm_head.weight if self.lm_head is not None else self.wte.weight
            logits = self.lnf(x) @ head.t()  # (B, T, Vp)
            return F.cross_entropy(logits[..., :a.vocab].flatten(0, 1).float(), targets.flatten())

    model = GPT().cuda()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
    return model, opt


def measure(a, torch, mode):
    """Trains --steps steps of one mode; returns its JSON record."""
    torch.manual_seed(1)
    torch.cuda.reset_peak_memory_stats()
    model, opt = build(a, torch)
    step_fn = torch.compile(model) if mode == "compile" else model
    gen = torch.Generator(device="cuda").manual_seed(2)
    batches = torch.randint(0, a.vocab, (4, a.batch, a.seq + 1), device="cuda", generator=gen)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    times, loss = [], None
    for s in range(a.steps):
        t0 = time.perf_counter()
        tokens = batches[s % len(batches)]
        with autocast:
            out = step_fn(tokens[:, :-1], tokens[:, 1:])
        out.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = out.item()  # waits for the step, as xtrain's per-step loss does
        times.append(time.perf_counter() - t0)
    timed = times[a.bench_warmup:]
    ms = 1e3 * sum(timed) / len(timed)
    rec = {"mode": mode, "tok_per_s": round(a.batch * a.seq / (ms / 1e3)), "step_ms": round(ms, 2),
           "timed_steps": len(timed), "params": sum(p.numel() for p in model.parameters()),
           "peak_device_mib": round(torch.cuda.max_memory_reserved() / 2**20),
           "final_loss": loss, "dtype": a.dtype, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "command": " ".join([sys.argv[0]] + sys.argv[1:])}
    del model, opt, step_fn
    torch.cuda.empty_cache()
    return rec


def main(argv):
    a = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"skipped: torch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False  # xtrain's fp32 GEMMs use no TF32
    torch.backends.cudnn.allow_tf32 = False
    for mode in a.modes:
        print(json.dumps(measure(a, torch, mode)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
