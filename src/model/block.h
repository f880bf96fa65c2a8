// The transformer block's forward, written once for the training forward (GPT::forward_pass) and the
// decoder (Decoder, KV cache): pre-LN causal self-attention and a GELU MLP (GPT-2), each residual add
// fused with the LayerNorm that reads its sum. The callers differ only in the attention op and dropout.
#pragma once

#include <functional>

#include "backend/backend.h"
#include "model/model.h"

namespace xtrain {

// One block's activation buffers for N = B*T positions (backend memory; activation type unless fp32).
// Inputs: ln1 = layernorm1(x), written by the previous block's last op (or by the caller for block 0).
struct BlockActs {
  void* ln1;                    // (N,C)   in
  void* qkv;                    // (N,QKV) (N,(NH+2*KVH)*HS), qkv_layout.h
  void* atty;                   // (N,A)   attention output, A = NH*HS
  void* att_proj;               // (N,C)   attention projection (dropout applied in place)
  void* res2;                   // (N,C)   x + attention branch
  void* ln2;                    // (N,C)   layernorm2(res2)
  float *ln2_mean, *ln2_rstd;   // (N)     fp32
  void* fch;                    // (N,F)   fc output (GELU's input)
  void* fch_gelu;               // (N,F)   gelu(fch)
  void* fc_proj;                // (N,C)   MLP projection (dropout applied in place)
  void* res3;                   // (N,C)   res2 + MLP branch: the block's output
};

// The LayerNorm that reads the block's output: the next block's ln1, or the final lnf.
struct NextNorm {
  void* out;             // (N,C)
  float *mean, *rstd;    // (N) fp32
  const float *w, *b;    // (C)
};

// attention(atty, qkv): atty (N,NH*HS) from qkv (N,(NH+2*KVH)*HS) of this block (the training's
// Backend::attention_forward, or Backend::attention_decode against the cache).
using BlockAttention = std::function<void(void* atty, const void* qkv)>;
// dropout(branch, site): applies dropout in place to a residual branch (N,C) before its add; site 0 the
// attention branch, 1 the MLP branch. An empty function: no dropout.
using BlockDropout = std::function<void(void* branch, int site)>;

// block_forward: x (N,C) the block's input, a.ln1 = ln1(x) -> every other buffer of `a`, and next.out =
// layernorm(a.res3). The op sequence (each residual add fused with the LayerNorm that reads it:
// Backend::residual_layernorm_forward; fc and GELU as one op: matmul_gelu_forward) is the training
// forward's, so a caller with the same inputs per row gets the training's bits per row wherever the
// backend's ops compute a row independently of the others (the GEMMs: see Backend::matmul_forward).
// Buffers may be reused across these roles as far as each is read before it is overwritten:
// ln1, ln2 and next.out may be one buffer, att_proj and fc_proj one, res3 and x one (x is read first).
void block_forward(Backend& be, const GPTConfig& c, int N, const void* x, const BlockWeights& w, const BlockActs& a,
                   const NextNorm& next, const BlockAttention& attention, const BlockDropout& dropout);

}  // namespace xtrain
