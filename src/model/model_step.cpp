// GPT forward and backward over the Backend ops (llm.c's gpt2_forward / gpt2_backward structure), both
// families (llama: RMSNorm, rotary, SwiGLU, no biases, tied or own head; absent tensors are null).
// Dropout (GPT-2's embd/resid dropout) sits on the embedding output and on each residual branch
// before it is added; its masks are recomputed from keys in backward, never stored. Under
// --recompute the backward also recomputes gelu(fch) (1, with the fc matmul: matmul_gelu_forward; llama:
// swiglu_forward on the kept fch) and ln1, ln2 (2) just before their use.
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include "model/block.h"
#include <xtrain/model/model.h>
#include "model_acts.h"

namespace xtrain {

namespace {
// Dropout site keys: site 0 = embeddings, 1 + 2*l = attention branch of layer l, 2 + 2*l = MLP branch.
std::vector<uint64_t> site_keys(const DropoutKeys& d, int site) {
  std::vector<uint64_t> k(d.seq_keys.size());
  for (size_t b = 0; b < k.size(); ++b) k[b] = hash_key(d.seq_keys[b], static_cast<uint64_t>(site));
  return k;
}
}  // namespace

double GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T, bool train, float dloss,
                    const DropoutKeys* dropout) {
  set_batch(tokens, targets, B, T);
  forward_pass(B, T, train, dloss, dropout);
  return loss_sum(B, T);
}

void GPT::set_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
  batch_B_ = 0, batch_T_ = 0;
  fwd_B_ = 0, fwd_T_ = 0;  // backward() differentiates a forward of the batch in the buffers
  ensure_acts(B, T);
  const size_t N = static_cast<size_t>(B) * T;
  be_.copy_to_device(tokens_.get(), tokens, sizeof(int32_t) * N);
  be_.copy_to_device(targets_.get(), targets, sizeof(int32_t) * N);
  batch_B_ = B, batch_T_ = T;
}

double GPT::loss_sum(int B, int T) {
  XT_CHECK(B > 0 && B <= B_ && T == T_, "loss_sum(B=" << B << ", T=" << T << ") outside the buffers (B <= " << B_
                                                      << ", T = " << T_ << ")");
  return be_.sum(static_cast<const float*>(gact(kLosses)), static_cast<size_t>(B) * T);
}

void GPT::position_losses(float* out, int B, int T) {
  XT_CHECK(B > 0 && B <= B_ && T == T_, "position_losses(B=" << B << ", T=" << T << ") outside the buffers (B <= "
                                                             << B_ << ", T = " << T_ << ")");
  be_.copy_to_host(out, gact(kLosses), static_cast<size_t>(B) * T * sizeof(float));
}

void GPT::forward_pass(int B, int T, bool train, float dloss, const DropoutKeys* dropout) {
  XT_CHECK(B == batch_B_ && T == batch_T_ && B > 0,
           "forward_pass(B=" << B << ", T=" << T << ") without set_batch of that shape");
  const int C = cfg_.C, V = cfg_.V, Vp = cfg_.Vp(), L = cfg_.L, NH = cfg_.NH, KVH = cfg_.KVH, HS = cfg_.HS;
  const int N = B * T;
  const bool drop = train && dropout && dropout->p > 0.0f;
  XT_CHECK(!drop || dropout->seq_keys.size() == static_cast<size_t>(B), "one dropout key per sequence");
  dropout_ = drop ? dropout : nullptr;
  dloss_ = dloss;
  fwd_B_ = 0, fwd_T_ = 0;  // set once this forward has completed (an exception leaves backward() refused)
  // the weights in the GEMMs' type, once for this forward and its backward (the parameters do not change
  // in between; the optimizer's write after the backward drops the copy until the next forward)
  be_.prepare_weights(params_.get(), num_params_);
  // act / gact (members): activation buffers (Backend::activation_bytes() per element); stat / gstat: the fp32 ones
  auto stat = [&](int l, int which) { return static_cast<float*>(act(l, which)); };
  auto gstat = [&](int which) { return static_cast<float*>(gact(which)); };
  const float* wte = tensor(kWte);
  const float* wpe = tensor(kWpe);  // null for llama: no learned positions

  void* encoded = gact(kEncoded);  // (B,T,C)
  be_.encoder_forward(encoded, tokens_.get(), wte, wpe, B, T, C);
  if (drop) be_.dropout_apply(encoded, site_keys(*dropout, 0).data(), B, static_cast<size_t>(T) * C, dropout->p);

  const float* lnfw = tensor(final_param_index(L, kLnfW));
  const float* lnfb = tensor(final_param_index(L, kLnfB));
  // Each residual add runs with the norm that reads its sum (block_forward): res2 with ln2, res3 with
  // the next layer's ln1 or with lnf; only ln1 of layer 0 (on the embeddings) stands alone.
  if (L > 0)
    norm_forward(be_, cfg_, act(0, kLn1), stat(0, kLn1Mean), stat(0, kLn1Rstd), encoded, param(0, kLn1W),
                 param(0, kLn1B), N);
  else
    norm_forward(be_, cfg_, gact(kLnf), gstat(kLnfMean), gstat(kLnfRstd), encoded, lnfw, lnfb, N);
  const void* residual = encoded;
  for (int l = 0; l < L; ++l) {
    const BlockActs a{act(l, kLn1), act(l, kQkv), act(l, kAtty), gact(kBranch), act(l, kRes2), act(l, kLn2),
                      stat(l, kLn2Mean), stat(l, kLn2Rstd), act(l, kFch), act(l, kFchGelu), gact(kBranch),
                      act(l, kRes3)};
    const NextNorm next = l + 1 < L ? NextNorm{act(l + 1, kLn1), stat(l + 1, kLn1Mean), stat(l + 1, kLn1Rstd),
                                               param(l + 1, kLn1W), param(l + 1, kLn1B)}
                                    : NextNorm{gact(kLnf), gstat(kLnfMean), gstat(kLnfRstd), lnfw, lnfb};
    auto attention = [&](void* atty, const void* qkv) {
      be_.attention_forward(atty, stat(l, kAtt), qkv, B, T, NH, KVH, HS);
    };
    BlockDropout block_dropout;  // sites 1 + 2*l (attention branch) and 2 + 2*l (MLP branch)
    if (drop)
      block_dropout = [&](void* branch, int site) {
        be_.dropout_apply(branch, site_keys(*dropout, 1 + 2 * l + site).data(), B, static_cast<size_t>(T) * C,
                          dropout->p);
      };
    block_forward(be_, cfg_, B, T, residual, block_weights(l), a, next, attention, block_dropout, nullptr);
    residual = act(l, kRes3);
  }
  // head (wte when tied, else lm_head): logits (N,Vp) over the padded vocabulary (model.h, GPTConfig::Vp)
  be_.matmul_forward(gact(kLogits), gact(kLnf), head(), nullptr, N, C, Vp);
  // fused loss + dlogits (in place over logits) when training; softmax over the first V columns only
  be_.cross_entropy_forward_backward(gstat(kLosses), train ? gact(kLogits) : nullptr, gact(kLogits),
                                     targets_.get(), dloss, N, V, Vp);
  if (train) fwd_B_ = B, fwd_T_ = T;
}

void GPT::backward() {
  XT_CHECK(fwd_B_ > 0, "backward() needs a forward(train=true) first");
  const int B = fwd_B_, T = fwd_T_;
  const int C = cfg_.C, Vp = cfg_.Vp(), L = cfg_.L, NH = cfg_.NH, KVH = cfg_.KVH, HS = cfg_.HS, F = cfg_.F;
  const int N = B * T, QKV = cfg_.qkv_width(), A = NH * HS;
  const size_t NC = static_cast<size_t>(N) * C;
  auto stat = [&](int l, int which) { return static_cast<float*>(act(l, which)); };
  auto gstat = [&](int which) { return static_cast<const float*>(gact(which)); };
  // a tensor's gradient; null for one absent from this family (ops take it as "no bias", "no wpe")
  auto grad = [&](int idx) { return layout_[idx].count ? grads_.get() + layout_[idx].offset : nullptr; };
  auto lgrad = [&](int l, int which) { return grad(int(layer_param_index(l, which))); };
  // recomputed: the buffer is shared by the layers under --recompute (model_acts.h), so the backward
  // rewrites it with the forward's op on the forward's inputs before its use: the same bits
  auto recomputed = [&](int which) { return kLayerActTable[which].shared(recompute_); };
  const size_t act_bytes = be_.activation_bytes();
  auto zero = [&](void* p, size_t count) { be_.zero(p, count * act_bytes); };  // activation gradients
  const bool llama = cfg_.llama();
  const int lnf_idx = int(final_param_index(L, kLnfW));
  const int head_idx = cfg_.tied() ? int(kWte) : int(final_param_index(L, kLmHead));
  // norm_backward: the family's norm (layernorm with mean and bias, or rmsnorm) from its kept statistics
  auto norm_backward = [&](void* dinp, int w_idx, const void* dout, const void* inp, const float* mean,
                           const float* rstd) {
    if (llama)
      be_.rmsnorm_backward(dinp, grad(w_idx), dout, inp, tensor(w_idx), rstd, N, C);
    else
      be_.layernorm_backward(dinp, grad(w_idx), grad(w_idx + 1), dout, inp, tensor(w_idx), mean, rstd, N, C);
  };
  auto lidx = [&](int l, int which) { return int(layer_param_index(l, which)); };

  void* dres = gact(kDRes);    // (N,C) gradient of the residual stream
  void* dtmp = gact(kDTmpC);   // (N,C) scratch
  void* dtmp2 = gact(kDTmpC2); // (N,C) scratch
  // head: logits = lnf @ head^T (wte or lm_head), dlogits (N,Vp) already in the logits buffer (padded columns 0)
  // Activation-gradient buffers are written first with Grad::assign (no zeroing); the residual stream's
  // gradient dres accumulates (layernorm backward adds both branches into it).
  be_.matmul_backward(dtmp, grad(head_idx), nullptr, gact(kLogits), gact(kLnf), head(), N, C, Vp, Grad::assign);
  const void* last = L > 0 ? act(L - 1, kRes3) : gact(kEncoded);
  zero(dres, NC);
  norm_backward(dres, lnf_idx, dtmp, last, gstat(kLnfMean), gstat(kLnfRstd));
  auto grads_ready_from = [&](size_t offset) { if (grad_ready_) grad_ready_(offset); };
  grads_ready_from(layout_[lnf_idx].offset);
  // branch_grad: the gradient reaching a residual branch through its dropout mask (dres itself
  // without dropout; otherwise a masked copy in dtmp2, since dres also flows on unmasked).
  auto branch_grad = [&](int site) -> const void* {
    if (!dropout_) return dres;
    zero(dtmp2, NC);
    be_.add_inplace(dtmp2, dres, NC);
    be_.dropout_apply(dtmp2, site_keys(*dropout_, site).data(), B, static_cast<size_t>(T) * C, dropout_->p);
    return dtmp2;
  };
  for (int l = L - 1; l >= 0; --l) {
    const void* residual = l == 0 ? gact(kEncoded) : act(l - 1, kRes3);
    // MLP branch: dres is d res3; the branch gets dres through the dropout mask, res2 gets dres itself
    const void* dbranch = branch_grad(2 + 2 * l);
    if (recomputed(kLn2))
      norm_forward(be_, cfg_, act(l, kLn2), stat(l, kLn2Mean), stat(l, kLn2Rstd), act(l, kRes2), param(l, kLn2W),
                   param(l, kLn2B), N);
    const int FC = llama ? 2 * F : F;  // fc outputs: [gate | up] for llama
    if (llama) {
      // swiglu(fch) again from the kept fch (a separate op in the forward too: the same bits)
      if (recomputed(kFchGelu)) be_.swiglu_forward(act(l, kFchGelu), act(l, kFch), N, F);
      be_.matmul_backward(gact(kDFchGelu), lgrad(l, kFcProjW), nullptr, dbranch, act(l, kFchGelu),
                          param(l, kFcProjW), N, F, C, Grad::assign);
      be_.swiglu_backward(gact(kDFch), gact(kDFchGelu), act(l, kFch), N, F);
    } else {
      // the forward's op again (it also rewrites fch with the same bits): a fused backend's gelu(fch) comes
      // from the unrounded fc sum, so gelu_forward(fch) alone would not give the forward's bits
      if (recomputed(kFchGelu))
        be_.matmul_gelu_forward(act(l, kFch), act(l, kFchGelu), act(l, kLn2), param(l, kFcW), param(l, kFcB), N, C, F);
      be_.gelu_matmul_backward(gact(kDFch), lgrad(l, kFcProjW), lgrad(l, kFcProjB), dbranch, act(l, kFchGelu),
                               act(l, kFch), param(l, kFcProjW), gact(kDFchGelu), N, F, C);
    }
    be_.matmul_backward(dtmp, lgrad(l, kFcW), lgrad(l, kFcB), gact(kDFch), act(l, kLn2), param(l, kFcW), N, C, FC,
                        Grad::assign);
    norm_backward(dres, lidx(l, kLn2W), dtmp, act(l, kRes2), stat(l, kLn2Mean), stat(l, kLn2Rstd));
    // attention branch: dres is now d res2
    dbranch = branch_grad(1 + 2 * l);
    be_.matmul_backward(gact(kDAtty), lgrad(l, kAttProjW), lgrad(l, kAttProjB), dbranch, act(l, kAtty),
                        param(l, kAttProjW), N, A, C, Grad::assign);
    be_.attention_backward(gact(kDQkv), gact(kDAtty), act(l, kQkv), act(l, kAtty), stat(l, kAtt), B, T, NH, KVH, HS,
                           Grad::assign);
    // llama: the gradient at the rotated q, k -> at the qkv matmul's output (the kept qkv stays rotated:
    // attention_backward above read it as the forward's attention did)
    if (llama) be_.rotary_backward(gact(kDQkv), B, T, NH, KVH, HS, cfg_.rope_theta);
    if (recomputed(kLn1))
      norm_forward(be_, cfg_, act(l, kLn1), stat(l, kLn1Mean), stat(l, kLn1Rstd), residual, param(l, kLn1W),
                   param(l, kLn1B), N);
    be_.matmul_backward(dtmp, lgrad(l, kQkvW), lgrad(l, kQkvB), gact(kDQkv), act(l, kLn1), param(l, kQkvW), N,
                        C, QKV, Grad::assign);
    norm_backward(dres, lidx(l, kLn1W), dtmp, residual, stat(l, kLn1Mean), stat(l, kLn1Rstd));
    grads_ready_from(layout_[layer_param_index(l, 0)].offset);
  }
  if (dropout_) be_.dropout_apply(dres, site_keys(*dropout_, 0).data(), B, static_cast<size_t>(T) * C, dropout_->p);
  be_.encoder_backward(grad(kWte), grad(kWpe), dres, tokens_.get(), B, T, C);
  grads_ready_from(0);
}

}  // namespace xtrain
