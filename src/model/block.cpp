// block_forward (src/model/block.h): one transformer block over the Backend ops, shared by the
// training forward and the decoder.
#include "model/block.h"

namespace xtrain {

void block_forward(Backend& be, const GPTConfig& c, int N, const void* x, const BlockWeights& w, const BlockActs& a,
                   const NextNorm& next, const BlockAttention& attention, const BlockDropout& dropout) {
  const int C = c.C, F = c.F, QKV = c.qkv_width(), A = c.NH * c.HS;
  // attention branch: res2 = x + dropout(proj(attn(ln1(x)))), ln1 written by the caller
  be.matmul_forward(a.qkv, a.ln1, w[kQkvW], w[kQkvB], N, C, QKV);
  attention(a.atty, a.qkv);
  be.matmul_forward(a.att_proj, a.atty, w[kAttProjW], w[kAttProjB], N, A, C);
  if (dropout) dropout(a.att_proj, 0);
  // MLP branch: res3 = res2 + dropout(proj(gelu(fc(ln2(res2)))))
  be.residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.att_proj, w[kLn2W], w[kLn2B], N, C);
  be.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, w[kFcW], w[kFcB], N, C, F);
  be.matmul_forward(a.fc_proj, a.fch_gelu, w[kFcProjW], w[kFcProjB], N, F, C);
  if (dropout) dropout(a.fc_proj, 1);
  // the residual add with the LayerNorm that reads its sum: the next block's ln1, or lnf
  be.residual_layernorm_forward(a.res3, next.out, next.mean, next.rstd, a.res2, a.fc_proj, next.w, next.b, N, C);
}

}  // namespace xtrain
