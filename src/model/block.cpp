// block_forward (src/model/block.h): one transformer block over the Backend ops, shared by both families,
// the training forward and the decoder; the family's norm in norm_forward / residual_norm_forward.
#include "model/block.h"

namespace xtrain {

void norm_forward(Backend& be, const GPTConfig& c, void* out, float* mean, float* rstd, const void* inp, const float* w,
                  const float* b, int N) {
  if (c.llama())
    be.rmsnorm_forward(out, rstd, inp, w, N, c.C, c.norm_eps);
  else
    be.layernorm_forward(out, mean, rstd, inp, w, b, N, c.C);
}

void residual_norm_forward(Backend& be, const GPTConfig& c, void* res, const NextNorm& n, const void* a,
                           const void* b_in, int N) {
  if (c.llama())
    be.residual_rmsnorm_forward(res, n.out, n.rstd, a, b_in, n.w, N, c.C, c.norm_eps);
  else
    be.residual_layernorm_forward(res, n.out, n.mean, n.rstd, a, b_in, n.w, n.b, N, c.C);
}

void block_forward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                   const BlockActs& a, const NextNorm& next, const BlockAttention& attention,
                   const BlockDropout& dropout, const int32_t* pos) {
  const int C = c.C, F = c.F, QKV = c.qkv_width(), A = c.NH * c.HS, N = B * T;
  // attention branch: res2 = x + dropout(proj(attn(rotary(qkv(ln1(x)))))), ln1 written by the caller;
  // absent biases (llama) are null (GPT::block_weights)
  be.matmul_forward(a.qkv, a.ln1, w[kQkvW], w[kQkvB], N, C, QKV);
  if (c.llama()) be.rotary_forward(a.qkv, pos, B, T, c.NH, c.KVH, c.HS, c.rope_theta);
  attention(a.atty, a.qkv);
  be.matmul_forward(a.att_proj, a.atty, w[kAttProjW], w[kAttProjB], N, A, C);
  if (dropout) dropout(a.att_proj, 0);
  // MLP branch: res3 = res2 + dropout(proj(act(fc(ln2(res2))))), act: GELU, or SwiGLU on [gate | up]
  residual_norm_forward(be, c, a.res2, NextNorm{a.ln2, a.ln2_mean, a.ln2_rstd, w[kLn2W], w[kLn2B]}, x, a.att_proj, N);
  if (c.llama()) {
    be.matmul_forward(a.fch, a.ln2, w[kFcW], nullptr, N, C, 2 * F);  // (N,2F) [gate | up]
    be.swiglu_forward(a.fch_gelu, a.fch, N, F);
  } else {
    be.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w[kFcW], w[kFcB], N, C, F);
  }
  be.matmul_forward(a.fc_proj, a.fch_gelu, w[kFcProjW], w[kFcProjB], N, F, C);
  if (dropout) dropout(a.fc_proj, 1);
  // the residual add with the norm that reads its sum: the next block's ln1, or lnf
  residual_norm_forward(be, c, a.res3, next, a.res2, a.fc_proj, N);
}

}  // namespace xtrain
