// block_forward and block_backward (src/model/block.h): one transformer block over the Backend ops, shared
// by every family, the training step and the decoder; the family's norm in norm_forward /
// residual_norm_forward / norm_backward.
#include "model/block.h"

namespace xtrain {

void norm_forward(Backend& be, const GPTConfig& c, void* out, float* mean, float* rstd, const void* inp, const float* w,
                  const float* b, int N) {
  if (c.rmsnorm())
    be.rmsnorm_forward(out, rstd, inp, w, N, c.C, c.norm_eps);
  else
    be.layernorm_forward(out, mean, rstd, inp, w, b, N, c.C);
}

void residual_norm_forward(Backend& be, const GPTConfig& c, void* res, const NextNorm& n, const void* a,
                           const void* b_in, int N) {
  if (c.rmsnorm())
    be.residual_rmsnorm_forward(res, n.out, n.rstd, a, b_in, n.w, N, c.C, c.norm_eps);
  else
    be.residual_layernorm_forward(res, n.out, n.mean, n.rstd, a, b_in, n.w, n.b, N, c.C);
}

void norm_backward(Backend& be, const GPTConfig& c, void* dinp, float* dw, float* db, const void* dout, const void* inp,
                   const float* w, const float* mean, const float* rstd, int N, Grad dw_mode) {
  if (c.rmsnorm())
    be.rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c.C, dw_mode);
  else
    be.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c.C, dw_mode);
}

void block_forward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                   const BlockActs& a, const NextNorm& next, const BlockAttention& attention,
                   const BlockDropout& dropout, const int32_t* pos) {
  const int C = c.C, F = c.F, QKV = c.qkv_width(), A = c.NH * c.HS, N = B * T;
  // attention branch: res2 = x + dropout(proj(attn(rotary(qkv(ln1(x)))))), ln1 written by the caller;
  // absent biases (a family without them) are null (GPT::block_weights)
  be.matmul_forward(a.qkv, a.ln1, w[kQkvW], w[kQkvB], N, C, QKV);
  if (c.rotary()) be.rotary_forward(a.qkv, pos, B, T, c.NH, c.KVH, c.HS, c.rope_theta);
  attention(a.atty, a.qkv);
  be.matmul_forward(a.att_proj, a.atty, w[kAttProjW], w[kAttProjB], N, A, C);
  if (dropout) dropout(a.att_proj, 0);
  // MLP branch: res3 = res2 + dropout(proj(act(fc(ln2(res2))))), act: GELU, or SwiGLU on [gate | up]
  residual_norm_forward(be, c, a.res2, NextNorm{a.ln2, a.ln2_mean, a.ln2_rstd, w[kLn2W], w[kLn2B]}, x, a.att_proj, N);
  if (c.swiglu()) {
    be.matmul_forward(a.fch, a.ln2, w[kFcW], w[kFcB], N, C, 2 * F);  // (N,2F) [gate | up]
    be.swiglu_forward(a.fch_act, a.fch, N, F);
  } else {
    be.matmul_gelu_forward(a.fch, a.fch_act, a.ln2, w[kFcW], w[kFcB], N, C, F);
  }
  be.matmul_forward(a.fc_proj, a.fch_act, w[kFcProjW], w[kFcProjB], N, F, C);
  if (dropout) dropout(a.fc_proj, 1);
  // the residual add with the norm that reads its sum: the next block's ln1, or lnf
  residual_norm_forward(be, c, a.res3, next, a.res2, a.fc_proj, N);
}

namespace {
// norm_matmul_row: out (1,OC) = norm(inp) w^T + bias (pre set: the GELU fc), fused where the backend fuses it,
// else norm_forward into ln then the product
void norm_matmul_row(Backend& be, const GPTConfig& c, void* pre, void* out, const void* inp, const float* nw,
                     const float* nb, const float* w, const float* bias, int OC, void* ln, float* mean, float* rstd) {
  if (be.norm_matmul_forward(pre, out, inp, nw, c.rmsnorm() ? nullptr : nb, c.norm_eps, w, bias, c.C, OC)) return;
  norm_forward(be, c, ln, mean, rstd, inp, nw, nb, 1);
  if (pre)
    be.matmul_gelu_forward(pre, out, ln, w, bias, 1, c.C, OC);
  else
    be.matmul_forward(out, ln, w, bias, 1, c.C, OC);
}

// matmul_residual_row: res (1,C) = residual + inp w^T + bias, fused where the backend fuses it, else the product
// into branch then residual_forward
void matmul_residual_row(Backend& be, void* res, const void* residual, const void* inp, const float* w,
                         const float* bias, int IC, int C, void* branch) {
  if (be.matmul_residual_forward(res, residual, inp, w, bias, IC, C)) return;
  be.matmul_forward(branch, inp, w, bias, 1, IC, C);
  be.residual_forward(res, residual, branch, size_t(C));
}
}  // namespace

void block_forward_row(Backend& be, const GPTConfig& c, const void* x, const BlockWeights& w, const BlockActs& a,
                       const BlockAttention& attention, const int32_t* pos) {
  const int C = c.C, F = c.F, QKV = c.qkv_width(), A = c.NH * c.HS;
  // block_forward's ops in its order, ln1 now the qkv product's prologue
  norm_matmul_row(be, c, nullptr, a.qkv, x, w[kLn1W], w[kLn1B], w[kQkvW], w[kQkvB], QKV, a.ln1, a.ln2_mean,
                  a.ln2_rstd);
  if (c.rotary()) be.rotary_forward(a.qkv, pos, 1, 1, c.NH, c.KVH, c.HS, c.rope_theta);
  attention(a.atty, a.qkv);
  matmul_residual_row(be, a.res2, x, a.atty, w[kAttProjW], w[kAttProjB], A, C, a.att_proj);
  if (c.swiglu()) {
    norm_matmul_row(be, c, nullptr, a.fch, a.res2, w[kLn2W], w[kLn2B], w[kFcW], w[kFcB], 2 * F, a.ln2, a.ln2_mean,
                    a.ln2_rstd);
    be.swiglu_forward(a.fch_act, a.fch, 1, F);
  } else {
    norm_matmul_row(be, c, a.fch, a.fch_act, a.res2, w[kLn2W], w[kLn2B], w[kFcW], w[kFcB], F, a.ln2, a.ln2_mean,
                    a.ln2_rstd);
  }
  matmul_residual_row(be, a.res3, a.res2, a.fch_act, w[kFcProjW], w[kFcProjB], F, C, a.fc_proj);
}

void block_backward(Backend& be, const GPTConfig& c, int B, int T, const void* x, const BlockWeights& w,
                    const BlockGrads& dw, const BlockActs& a, const BlockSaved& saved, const BlockGradBuffers& g,
                    const BlockRecompute& recompute, const BlockBranchGrad& branch_grad) {
  const int C = c.C, F = c.F, FC = c.fc_width(), QKV = c.qkv_width(), NH = c.NH, KVH = c.KVH, HS = c.HS;
  const int A = NH * HS, N = B * T;
  auto branch = [&](int site) -> const void* { return branch_grad ? branch_grad(site) : g.dres; };
  // MLP branch: dres is d res3; the branch gets dres through the dropout mask, res2 gets dres itself
  const void* dbranch = branch(1);
  if (recompute.ln2) norm_forward(be, c, a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w[kLn2W], w[kLn2B], N);
  if (c.swiglu()) {
    // swiglu(fch) again from the kept fch (a separate op in the forward too: the same bits)
    if (recompute.fch_act) be.swiglu_forward(a.fch_act, a.fch, N, F);
    be.matmul_backward(g.dfch_act, dw[kFcProjW], dw[kFcProjB], dbranch, a.fch_act, w[kFcProjW], N, F, C, Grad::assign,
                       dw.mode);
    be.swiglu_backward(g.dfch, g.dfch_act, a.fch, N, F);
  } else {
    // the forward's op again (it also rewrites fch with the same bits): a fused backend's gelu(fch) comes
    // from the unrounded fc sum, so gelu_forward(fch) alone would not give the forward's bits
    if (recompute.fch_act) be.matmul_gelu_forward(a.fch, a.fch_act, a.ln2, w[kFcW], w[kFcB], N, C, F);
    be.gelu_matmul_backward(g.dfch, dw[kFcProjW], dw[kFcProjB], dbranch, a.fch_act, a.fch, w[kFcProjW], g.dfch_act, N,
                            F, C, dw.mode);
  }
  be.matmul_backward(g.dtmp, dw[kFcW], dw[kFcB], g.dfch, a.ln2, w[kFcW], N, C, FC, Grad::assign, dw.mode);
  norm_backward(be, c, g.dres, dw[kLn2W], dw[kLn2B], g.dtmp, a.res2, w[kLn2W], a.ln2_mean, a.ln2_rstd, N, dw.mode);
  // attention branch: dres is now d res2
  dbranch = branch(0);
  be.matmul_backward(g.datty, dw[kAttProjW], dw[kAttProjB], dbranch, a.atty, w[kAttProjW], N, A, C, Grad::assign,
                     dw.mode);
  be.attention_backward(g.dqkv, g.datty, a.qkv, a.atty, saved.att, B, T, NH, KVH, HS, Grad::assign);
  // rotary: the gradient at the rotated q, k -> at the qkv matmul's output
  if (c.rotary()) be.rotary_backward(g.dqkv, B, T, NH, KVH, HS, c.rope_theta);
  if (recompute.ln1) norm_forward(be, c, a.ln1, saved.ln1_mean, saved.ln1_rstd, x, w[kLn1W], w[kLn1B], N);
  be.matmul_backward(g.dtmp, dw[kQkvW], dw[kQkvB], g.dqkv, a.ln1, w[kQkvW], N, C, QKV, Grad::assign, dw.mode);
  norm_backward(be, c, g.dres, dw[kLn1W], dw[kLn1B], g.dtmp, x, w[kLn1W], saved.ln1_mean, saved.ln1_rstd, N,
                dw.mode);
}

}  // namespace xtrain
