#!/usr/bin/env python3
"""The cost model of docs/scaling.md ("Cost model"): the data-parallel gradient all-reduce with and
without overlap. One home for its formulas; bench/overlap_nodes.sh predicts its measurements with it,
and run as a program it prints the GPT-2 124M cluster table of docs/scaling.md.

Units: bytes, bytes/s, seconds. Ring all-reduce time after Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations" (JPDC 2009); the same 2(N-1)/N factor is NCCL's
"bus bandwidth" (nccl-tests doc/PERFORMANCE.md).
"""
import sys


def t_allreduce(s_bytes, n, b_bytes_per_s, alpha_s, k=1):
    """Ring all-reduce of s_bytes over n ranks in k pieces (buckets): 2(n-1)/n * S/B + k * 2(n-1) * alpha."""
    if n < 2:
        return 0.0
    return 2 * (n - 1) / n * s_bytes / b_bytes_per_s + k * 2 * (n - 1) * alpha_s


def exposed(s_bytes, s_e_bytes, n, b_bytes_per_s, alpha_s, t_b_s, k=1, overlap=True):
    """Seconds of the all-reduce not hidden behind compute. Without overlap all of t_ar(S); with it the
    embeddings' s_e_bytes (final only at the end of backward) plus what the k layer buckets need beyond
    the backward time t_b_s."""
    if not overlap:
        return t_allreduce(s_bytes, n, b_bytes_per_s, alpha_s)
    return t_allreduce(s_e_bytes, n, b_bytes_per_s, alpha_s) + max(
        0.0, t_allreduce(s_bytes - s_e_bytes, n, b_bytes_per_s, alpha_s, k) - t_b_s)


def gpt_sizes(v, c, n_layer, max_t, ffn=None):
    """(P, P_e): parameters of xtrain's GPT (param_layout, include/xtrain/model.h: wte (Vp,C) with V
    padded to a multiple of 64, wpe (maxT,C), per layer 2 layernorms, qkv (3C,C)+b, proj (C,C)+b,
    fc (F,C)+b, proj (C,F)+b, then lnf) and of its embeddings wte + wpe. Multi-head, no GQA."""
    f = ffn or 4 * c
    vp = (v + 63) // 64 * 64
    p_e = vp * c + max_t * c
    layer = 4 * c + 3 * c * c + 3 * c + c * c + c + f * c + f + c * f + c
    return p_e + n_layer * layer + 2 * c, p_e


def cluster_table():
    """The GPT-2 124M table of docs/scaling.md: fp32 gradients, t_c = 82 ms (32 x 1024 tokens at ~400K
    tok/s on one H200), t_b = 2/3 t_c, alpha = 5 us, 25 MiB buckets (k = 13 for the layers)."""
    p, p_e = gpt_sizes(50257, 768, 12, 1024)
    s, s_e, t_c, alpha, k = 4 * p, 4 * p_e, 0.082, 5e-6, 13
    print(f"P = {p / 1e6:.2f}M, S = {s / 1e6:.0f} MB, S_e = {s_e / 1e6:.0f} MB")
    print("| link | GPUs | t_ar(S), ms | efficiency, one all-reduce | exposed with buckets, ms | efficiency, buckets |")
    print("|---|---:|---:|---:|---:|---:|")
    for gbit in (100, 400):
        for n in (8, 64, 512):
            b = gbit * 1e9 / 8
            one = exposed(s, s_e, n, b, alpha, 2 / 3 * t_c, k, overlap=False)
            bk = exposed(s, s_e, n, b, alpha, 2 / 3 * t_c, k)
            print(f"| {gbit} Gbit/s | {n} | {one * 1e3:.1f} | {t_c / (t_c + one):.0%} | {bk * 1e3:.1f} | "
                  f"{t_c / (t_c + bk):.0%} |")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit("usage: bench/cost_model.py   (prints the GPT-2 124M cluster table of docs/scaling.md)")
    cluster_table()
