// The transformer block, forward and backward, written once for every family (GPTConfig::traits()), the
// training step (GPT::forward_pass, GPT::backward) and the decoder (Decoder, KV cache): pre-norm causal
// self-attention (rotary on q and k where the family has it) and an MLP (GELU, or SwiGLU on [gate | up]),
// each residual add fused with the norm (LayerNorm or RMSNorm) that reads its sum. The callers differ in the
// attention op, dropout and the position rotary starts at.
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
  float *ln2_mean, *ln2_rstd;   // (N)     fp32 (RMSNorm: rstd only)
  void* fch;                    // (N,FC)  fc output, FC = GPTConfig::fc_width() (GELU's input, or SwiGLU's [gate | up])
  void* fch_act;                // (N,F)   the MLP activation's output act(fch), the projection's input
  void* fc_proj;                // (N,C)   MLP projection (dropout applied in place); may be att_proj's
                                //         buffer: each is read only by the residual add right after it
  void* res3;                   // (N,C)   res2 + MLP branch: the block's output
};

// The norm that reads the block's output: the next block's ln1, or the final lnf.
struct NextNorm {
  void* out;             // (N,C)
  float *mean, *rstd;    // (N) fp32 (RMSNorm: rstd only)
  const float *w, *b;    // (C) (RMSNorm: b null)
};

// norm_forward: the family's norm, inp (N,C) -> out (N,C): LayerNorm layernorm_forward(w, b) with mean, rstd;
// RMSNorm rmsnorm_forward(w, eps = c.norm_eps) with rstd (mean untouched, b unused).
void norm_forward(Backend& be, const GPTConfig& c, void* out, float* mean, float* rstd, const void* inp, const float* w,
                  const float* b, int N);
// residual_norm_forward: res = a + b_in, then norm_forward(res): Backend::residual_layernorm_forward or
// residual_rmsnorm_forward.
void residual_norm_forward(Backend& be, const GPTConfig& c, void* res, const NextNorm& norm, const void* a,
                           const void* b_in, int N);

// norm_backward: the family's norm backward from its kept statistics: dinp (N,C) +=, dw (C) += and, for
// LayerNorm, db (C) += (= with dw_mode Grad::assign; Backend::layernorm_backward or rmsnorm_backward; mean and db
// unused for RMSNorm).
void norm_backward(Backend& be, const GPTConfig& c, void* dinp, float* dw, float* db, const void* dout, const void* inp,
                   const float* w, const float* mean, const float* rstd, int N, Grad dw_mode);

// attention(atty, qkv): atty (N,NH*HS) from qkv (N,(NH+2*KVH)*HS) of this block (the training's
// Backend::attention_forward, or Backend::attention_decode against the cache).
using BlockAttention = std::function<void(void* atty, const void* qkv)>;
// dropout(branch, site): applies dropout in place to a residual branch (N,C) before its add; site 0 the
// attention branch, 1 the MLP branch. An empty function: no dropout.
using BlockDropout = std::function<void(void* branch, int site)>;

// block_forward: x (N,C) the block's input, a.ln1 = ln1(x) -> every other buffer of `a`, and next.out =
// norm(a.res3). N = B*T rows of B sequences of T positions each. Rotary families: rotary_forward on a.qkv
// right after the qkv matmul, row t of a sequence at position *pos + t (pos: one int32 in backend memory,
// the decoder's; null = 0, the training's); SwiGLU: fc then swiglu_forward. The op sequence (each residual
// add fused with the norm that reads it: residual_norm_forward; GELU's fc and activation as one op:
// matmul_gelu_forward) is the training forward's, so a caller with the same inputs per row gets the
// training's bits per row wherever the backend's ops compute a row independently of the others (the GEMMs:
// see Backend::matmul_forward). Buffers may be reused across these roles as far as each is read before it
// is overwritten: ln1, ln2 and next.out may be one buffer, att_proj and fc_proj one, res3 and x one (x is
// read first).
void block_forward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                   const BlockActs& a, const NextNorm& next, const BlockAttention& attention,
                   const BlockDropout& dropout, const int32_t* pos);

// block_forward_row: block_forward for one row (B = T = 1, the decoder's batch-1 step) through the backend's
// one-row fused ops (Backend::fuses_rows): each norm in the prologue of the product that reads it
// (norm_matmul_forward), each residual add in the epilogue of the projection before it (matmul_residual_forward),
// so x (1,C) -> a.res3 = the block's output with no norm launch; where an op does not fuse, the unfused ops in its
// place (norm_forward into a.ln1 / a.ln2, matmul_forward into a.att_proj / a.fc_proj, residual_forward). The
// bits of block_forward's a.res3 (its norms and residual adds round as the fused ones); a.ln1, a.ln2, the
// projections and the statistics are scratch, not block_forward's values, and no next norm is written.
void block_forward_row(Backend& be, const GPTConfig& c, const void* x, const BlockWeights& w, const BlockActs& a,
                       const BlockAttention& attention, const int32_t* pos);

// One block's parameter gradients (views into GPT::grads(), LayerParam order; null where absent) and how
// block_backward writes them: added to (accumulate), or overwritten (assign: the first backward of a step, the
// buffers' old values never read).
struct BlockGrads {
  float* g[kPerLayer] = {};
  Grad mode = Grad::accumulate;
  float* operator[](int which) const { return g[which]; }
};

// What block_backward reads of the forward besides BlockActs: ln1's statistics (the caller's norm of x)
// and the attention scratch of the block's attention_forward.
struct BlockSaved {
  float *ln1_mean, *ln1_rstd;  // (N) fp32 (RMSNorm: rstd only)
  float* att;                  // Backend::attention_scratch_count(B,T,NH,KVH,HS) fp32
};

// The backward's gradient buffers, one set shared by every block (the residual stream's gradient dres
// accumulates; the others are written first with Grad::assign, so they need no zeroing).
struct BlockGradBuffers {
  void* dres;      // (N,C)   in: d res3 (the block's output); out: d x (the block's input)
  void* dtmp;      // (N,C)   scratch: d ln2, then d ln1
  void* dqkv;      // (N,QKV)
  void* datty;     // (N,A)
  void* dfch;      // (N,FC)
  void* dfch_act;  // (N,F)
};

// The buffers that the layers share under --recompute (model_acts.h), which block_backward writes again
// with the forward's op on the forward's inputs just before their use: the same bits as kept buffers.
struct BlockRecompute {
  bool ln1 = false, ln2 = false, fch_act = false;
};

// branch_grad(site): the gradient reaching residual branch `site` (0 attention, 1 MLP) through its dropout
// mask, made from g.dres (which also flows on unmasked to the block's input). Empty: no dropout, g.dres itself.
using BlockBranchGrad = std::function<const void*(int site)>;

// block_backward: after block_forward with the same x, w, a: ADDS d(loss)/d(block parameters) into dw (or
// writes it, dw.mode Grad::assign: each of the block's weight gradients has one writer here) and
// turns g.dres from d res3 into d x (res3 = x + both branches, so dres accumulates each branch's input
// gradient through its norm). The reverse of block_forward's op sequence: MLP branch (projection, activation,
// fc, ln2), then attention branch (projection, attention, rotary where the family has it, qkv, ln1). The
// kept qkv is the rotated one (attention_backward reads it as the forward's attention did).
void block_backward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                    const BlockGrads& dw, const BlockActs& a, const BlockSaved& saved, const BlockGradBuffers& g,
                    const BlockRecompute& recompute, const BlockBranchGrad& branch_grad);

}  // namespace xtrain
