// The transformer block's forward, written once for both families, the training forward
// (GPT::forward_pass) and the decoder (Decoder, KV cache): pre-norm causal self-attention (llama: rotary
// on q and k) and an MLP (gpt2: GELU; llama: SwiGLU), each residual add fused with the norm (gpt2:
// LayerNorm; llama: RMSNorm) that reads its sum. The callers differ in the attention op, dropout and
// the position rotary starts at.
#pragma once

#include <functional>

#include <xtrain/backend/backend.h>
#include <xtrain/model/model.h>

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
  float *ln2_mean, *ln2_rstd;   // (N)     fp32 (llama: rstd only)
  void* fch;                    // (N,FC)  fc output (GELU's input; llama: [gate | up], FC = 2F)
  void* fch_gelu;               // (N,F)   gelu(fch) (llama: swiglu(fch))
  void* fc_proj;                // (N,C)   MLP projection (dropout applied in place); may be att_proj's
                                //         buffer: each is read only by the residual add right after it
  void* res3;                   // (N,C)   res2 + MLP branch: the block's output
};

// The norm that reads the block's output: the next block's ln1, or the final lnf.
struct NextNorm {
  void* out;             // (N,C)
  float *mean, *rstd;    // (N) fp32 (llama: rstd only)
  const float *w, *b;    // (C) (llama: b null)
};

// norm_forward: the family's norm, inp (N,C) -> out (N,C): gpt2 layernorm_forward(w, b) with mean, rstd;
// llama rmsnorm_forward(w, eps = c.norm_eps) with rstd (mean untouched, b unused).
void norm_forward(Backend& be, const GPTConfig& c, void* out, float* mean, float* rstd, const void* inp, const float* w,
                  const float* b, int N);
// residual_norm_forward: res = a + b_in, then norm_forward(res): Backend::residual_layernorm_forward or
// residual_rmsnorm_forward.
void residual_norm_forward(Backend& be, const GPTConfig& c, void* res, const NextNorm& norm, const void* a,
                           const void* b_in, int N);

// attention(atty, qkv): atty (N,NH*HS) from qkv (N,(NH+2*KVH)*HS) of this block (the training's
// Backend::attention_forward, or Backend::attention_decode against the cache).
using BlockAttention = std::function<void(void* atty, const void* qkv)>;
// dropout(branch, site): applies dropout in place to a residual branch (N,C) before its add; site 0 the
// attention branch, 1 the MLP branch. An empty function: no dropout.
using BlockDropout = std::function<void(void* branch, int site)>;

// block_forward: x (N,C) the block's input, a.ln1 = ln1(x) -> every other buffer of `a`, and next.out =
// norm(a.res3). N = B*T rows of B sequences of T positions each. llama: rotary_forward on a.qkv right
// after the qkv matmul, row t of a sequence at position *pos + t (pos: one int32 in backend memory, the
// decoder's; null = 0, the training's); fc then swiglu_forward. The op sequence (each residual add fused
// with the norm that reads it: residual_norm_forward; gpt2's fc and GELU as one op: matmul_gelu_forward) is the training
// forward's, so a caller with the same inputs per row gets the training's bits per row wherever the
// backend's ops compute a row independently of the others (the GEMMs: see Backend::matmul_forward).
// Buffers may be reused across these roles as far as each is read before it is overwritten:
// ln1, ln2 and next.out may be one buffer, att_proj and fc_proj one, res3 and x one (x is read first).
void block_forward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                   const BlockActs& a, const NextNorm& next, const BlockAttention& attention,
                   const BlockDropout& dropout, const int32_t* pos);

}  // namespace xtrain
