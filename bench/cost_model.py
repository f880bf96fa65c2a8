#!/usr/bin/env python3
"""The cost model of docs/scaling.md ("Cost model"): the data-parallel gradient all-reduce with and
without overlap. One home for its formulas; bench/overlap_nodes.sh predicts its measurements with it,
and run as a program it prints the GPT-2 124M cluster table of docs/scaling.md.

Units: bytes, bytes/s, seconds. Ring all-reduce time after Patarasuk and Yuan, "Bandwidth optimal
all-reduce algorithms for clusters of workstations" (JPDC 2009); the same 2(N-1)/N factor is NCCL's
"bus bandwidth" (nccl-tests doc/PERFORMANCE.md).
"""
import sys


def ring_factor(n):
    """Bytes a ring all-reduce sends over each link, per direction, as a multiple of S: 2(n-1)/n."""
    return 2 * (n - 1) / n


def libnbc_two_nodes_factor(n):
    """The same multiple for the schedule Open MPI 4.1's MPI_Iallreduce (libnbc, nbc_iallreduce.c; xtrain
    uses it for every all-reduce) runs on n ranks over two nodes, ranks 0..n/2-1 on the first: below 4
    ranks a binomial reduce to rank 0 then a broadcast, so at n = 2 the link carries S one way, then S
    the other way: 2. From 4 ranks (a power of two) Rabenseifner's reduce-scatter by recursive halving
    and allgather by recursive doubling: only the distance-n/2 step crosses the link, n/2 ranks sending
    S/n each way in each phase: 1. Other n: ValueError."""
    if n == 2:
        return 2.0
    if n >= 4 and n & (n - 1) == 0:
        return 1.0
    raise ValueError(f"no libnbc schedule model for {n} ranks over two nodes")


def t_allreduce(s_bytes, n, b_bytes_per_s, alpha_s, k=1, factor=None):
    """All-reduce of s_bytes over n ranks in k pieces (buckets): factor * S/B + k * 2(n-1) * alpha, the
    factor ring_factor(n) unless given (the ring's latency term is kept either way)."""
    if n < 2:
        return 0.0
    f = ring_factor(n) if factor is None else factor
    return f * s_bytes / b_bytes_per_s + k * 2 * (n - 1) * alpha_s


def exposed(s_bytes, s_e_bytes, n, b_bytes_per_s, alpha_s, t_b_s, k=1, overlap=True, factor=None):
    """Seconds of the all-reduce not hidden behind compute. Without overlap all of t_ar(S); with it the
    embeddings' s_e_bytes (final only at the end of backward) plus what the k layer buckets need beyond
    the backward time t_b_s."""
    if not overlap:
        return t_allreduce(s_bytes, n, b_bytes_per_s, alpha_s, factor=factor)
    return t_allreduce(s_e_bytes, n, b_bytes_per_s, alpha_s, factor=factor) + max(
        0.0, t_allreduce(s_bytes - s_e_bytes, n, b_bytes_per_s, alpha_s, k, factor) - t_b_s)


def gpt_sizes(v, c, n_layer, max_t, ffn=None):
    """(P, P_e): parameters of xtrain's GPT (param_layout, src/model/model.h: wte (Vp,C) with V
    padded to a multiple of 64, wpe (maxT,C), per layer 2 layernorms, qkv (3C,C)+b, proj (C,C)+b,
    fc (F,C)+b, proj (C,F)+b, then lnf) and of its embeddings wte + wpe. Multi-head, no GQA."""
    f = ffn or 4 * c
    vp = (v + 63) // 64 * 64
    p_e = vp * c + max_t * c
    layer = 4 * c + 3 * c * c + 3 * c + c * c + c + f * c + f + c * f + c
    return p_e + n_layer * layer + 2 * c, p_e


def cluster_table():
    """The GPT-2 124M table of docs/scaling.md: fp32 gradients, t_c = 60.6 ms (32 x 1024 tokens at ~540K
    tok/s on one H200, measured with --timeline at commit dcf67d4: backward 38 ms, ~2/3), t_b = 2/3 t_c,
    alpha = 5 us, 25 MiB buckets (k = 13 for the layers)."""
    p, p_e = gpt_sizes(50257, 768, 12, 1024)
    s, s_e, t_c, alpha, k = 4 * p, 4 * p_e, 0.0606, 5e-6, 13
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
        usage = "usage: bench/cost_model.py   (prints the GPT-2 124M cluster table of docs/scaling.md)"
        if sys.argv[1] in ("-h", "--help"):
            print(usage)
            sys.exit(0)
        sys.exit(usage)
    cluster_table()
