// GPT forward and backward over the Backend ops (llm.c's gpt2_forward / gpt2_backward structure), every
// family (GPTConfig::traits(); absent tensors are null): the embeddings, the blocks (block_forward,
// block_backward: src/model/block.h), the final norm, the head and the loss. The head, the loss and the
// head's backward run in chunks of rows at the end of the forward (head_and_loss), so the whole logits
// are never held; backward() starts at the final norm.
// Dropout (GPT-2's embd/resid dropout) sits on the embedding output and on each residual branch
// before it is added; its masks are recomputed from keys in backward, never stored. Under
// --recompute the backward also recomputes act(fch) (1) and ln1, ln2 (2) just before their use
// (block_backward, BlockRecompute).
#include <algorithm>

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
                    const DropoutKeys* dropout, Grad grads) {
  set_batch(tokens, targets, B, T);
  forward_pass(B, T, train, dloss, dropout, grads);
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

void GPT::forward_pass(int B, int T, bool train, float dloss, const DropoutKeys* dropout, Grad grads) {
  XT_CHECK(B == batch_B_ && T == batch_T_ && B > 0,
           "forward_pass(B=" << B << ", T=" << T << ") without set_batch of that shape");
  const int C = cfg_.C, L = cfg_.L, NH = cfg_.NH, KVH = cfg_.KVH, HS = cfg_.HS;
  const int N = B * T;
  const bool drop = train && dropout && dropout->p > 0.0f;
  XT_CHECK(!drop || dropout->seq_keys.size() == static_cast<size_t>(B), "one dropout key per sequence");
  XT_CHECK(!train || grads_.get() || num_params_ == 0,
           "forward(train=true): this model was made without gradients (with_grads false); the head's backward "
           "runs in the forward");
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
  const float* wpe = tensor(kWpe);  // null without learned positions (rotary families)

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
    const BlockActs a = block_acts(l);
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
  head_and_loss(N, train, grads);
  if (train) fwd_B_ = B, fwd_T_ = T, fwd_grads_ = grads;
}

void GPT::head_and_loss(int N, bool train, Grad grads) {
  const int C = cfg_.C, V = cfg_.V, Vp = cfg_.Vp();
  const size_t ab = be_.activation_bytes();
  // R rows a chunk (model_acts.h: at most the buffer's rows); the loop is the same for every step of a
  // shape, so a recorded graph (graph_step.cpp) holds it whole
  const int R = xtrain::logits_chunk_rows(cfg_, N, ab, logits_chunk_rows_);
  XT_CHECK(R <= logits_rows_, "head_and_loss: chunks of " << R << " rows, a logits buffer of " << logits_rows_);
  auto rows = [&](int which, int r0) { return static_cast<unsigned char*>(gact(which)) + size_t(r0) * C * ab; };
  void* logits = gact(kLogits);  // (R,Vp) one chunk's logits, then its dlogits in place
  float* losses = static_cast<float*>(gact(kLosses));
  const size_t head_idx = cfg_.tied() ? size_t(kWte) : final_param_index(cfg_.L, kLmHead);
  float* dhead = train ? grads_.get() + layout_[head_idx].offset : nullptr;  // (Vp,C) the head's gradient
  logits_chunks_ = 0;
  for (int r0 = 0; r0 < N; r0 += R, ++logits_chunks_) {
    const int n = std::min(R, N - r0);
    const void* lnf = rows(kLnf, r0);  // (n,C)
    // head (wte when tied, else lm_head): logits (n,Vp) over the padded vocabulary (model.h, GPTConfig::Vp)
    be_.matmul_forward(logits, lnf, head(), nullptr, n, C, Vp);
    // fused loss + dlogits (in place over logits) when training; softmax over the first V columns only
    be_.cross_entropy_forward_backward(losses + r0, train ? logits : nullptr, logits, targets_.get() + r0, dloss_, n,
                                       V, Vp);
    if (!train) continue;
    // the head's backward of these rows: the final norm's output gradient (n,C) into dtmp_c's rows (written:
    // Grad::assign; backward() reads it whole), and the head's weight gradient dW (Vp,C) += dlogits^T lnf.
    // dW: the first chunk writes it whole with `grads` (Grad::assign: the first micro-step, no memset of
    // the gradients before), the later chunks add to it; a tied wte's embedding part is added last by
    // backward()'s encoder_backward.
    be_.matmul_backward(rows(kDTmpC, r0), dhead, nullptr, logits, lnf, head(), n, C, Vp, Grad::assign,
                        r0 == 0 ? grads : Grad::accumulate);
  }
}

BlockActs GPT::block_acts(int l) const {
  auto stat = [&](int which) { return static_cast<float*>(act(l, which)); };
  return BlockActs{act(l, kLn1),  act(l, kQkv),     act(l, kAtty),        gact(kBranch), act(l, kRes2),
                   act(l, kLn2),  stat(kLn2Mean),   stat(kLn2Rstd),       act(l, kFch),  act(l, kFchAct),
                   gact(kBranch), act(l, kRes3)};
}

BlockGrads GPT::block_grads(int l, Grad mode) {
  BlockGrads g;
  g.mode = mode;
  for (int i = 0; i < kPerLayer; ++i) {
    const ParamTensor& t = layout_[layer_param_index(l, i)];
    g.g[i] = t.count ? grads_.get() + t.offset : nullptr;
  }
  return g;
}

void GPT::backward(Grad grads) {
  XT_CHECK(fwd_B_ > 0, "backward() needs a forward(train=true) first");
  XT_CHECK(grads_.get() || num_params_ == 0, "backward(): this model was made without gradients (with_grads false)");
  // the forward wrote the head's weight gradient (head_and_loss) in its mode: an assigning backward after an
  // accumulating forward would leave a tied wte's stale contents in, the reverse would drop a micro-step's head
  auto name = [](Grad m) { return m == Grad::assign ? "Grad::assign" : "Grad::accumulate"; };
  XT_CHECK(grads == fwd_grads_, "backward(" << name(grads) << ") after forward(train=true, " << name(fwd_grads_)
                                            << "): the forward writes the head's gradient, so both take one mode");
  const int B = fwd_B_, T = fwd_T_;
  const int C = cfg_.C, L = cfg_.L;
  const int N = B * T;
  const size_t NC = static_cast<size_t>(N) * C;
  auto stat = [&](int l, int which) { return static_cast<float*>(act(l, which)); };
  auto gstat = [&](int which) { return static_cast<const float*>(gact(which)); };
  // a tensor's gradient; null for one absent from this family (ops take it as "no bias", "no wpe")
  auto grad = [&](size_t idx) { return layout_[idx].count ? grads_.get() + layout_[idx].offset : nullptr; };
  auto zero_grad = [&](size_t idx) {
    if (layout_[idx].count) be_.zero(grad(idx), layout_[idx].count * sizeof(float));
  };
  const size_t act_bytes = be_.activation_bytes();
  auto zero = [&](void* p, size_t count) { be_.zero(p, count * act_bytes); };  // activation gradients
  const size_t lnf_idx = final_param_index(L, kLnfW);

  // the gradient buffers every block shares (Activation-gradient buffers are written first with
  // Grad::assign, no zeroing; the residual stream's gradient dres accumulates: each norm backward adds
  // its branch into it)
  const BlockGradBuffers g{gact(kDRes), gact(kDTmpC), gact(kDQkv), gact(kDAtty), gact(kDFch), gact(kDFchAct)};
  void* dtmp2 = gact(kDTmpC2);  // (N,C) the dropout-masked branch gradient
  // the head's backward ran in the forward (head_and_loss): the gradient at lnf's output is in g.dtmp,
  // the head's weight gradient is complete (tied wte: its head part)
  const void* last = L > 0 ? act(L - 1, kRes3) : gact(kEncoded);
  zero(g.dres, NC);
  norm_backward(be_, cfg_, g.dres, grad(lnf_idx), grad(lnf_idx + 1), g.dtmp, last, tensor(lnf_idx),
                gstat(kLnfMean), gstat(kLnfRstd), N, grads);
  auto grads_ready_from = [&](size_t offset) { if (grad_ready_) grad_ready_(offset); };
  grads_ready_from(layout_[lnf_idx].offset);
  // recomputed: the buffers the layers share under --recompute (model_acts.h)
  auto recomputed = [&](int which) { return kLayerActTable[which].shared(recompute_); };
  const BlockRecompute recompute{recomputed(kLn1), recomputed(kLn2), recomputed(kFchAct)};
  for (int l = L - 1; l >= 0; --l) {
    const void* residual = l == 0 ? gact(kEncoded) : act(l - 1, kRes3);
    // the gradient reaching a residual branch through its dropout mask (sites 1 + 2*l attention, 2 + 2*l
    // MLP): a masked copy of dres in dtmp2, since dres also flows on unmasked
    BlockBranchGrad branch_grad;
    if (dropout_)
      branch_grad = [&](int site) -> const void* {
        zero(dtmp2, NC);
        be_.add_inplace(dtmp2, g.dres, NC);
        be_.dropout_apply(dtmp2, site_keys(*dropout_, 1 + 2 * l + site).data(), B, static_cast<size_t>(T) * C,
                          dropout_->p);
        return dtmp2;
      };
    block_backward(be_, cfg_, B, T, residual, block_weights(l), block_grads(l, grads), block_acts(l),
                   BlockSaved{stat(l, kLn1Mean), stat(l, kLn1Rstd), stat(l, kAtt)}, g, recompute, branch_grad);
    grads_ready_from(layout_[layer_param_index(l, 0)].offset);
  }
  if (dropout_) be_.dropout_apply(g.dres, site_keys(*dropout_, 0).data(), B, static_cast<size_t>(T) * C, dropout_->p);
  // the embeddings' scatter-add writes only the rows the batch uses: assigned, their gradients are zeroed first,
  // wpe's and an untied wte's (a tied wte's holds the head's gradient, written above)
  if (grads == Grad::assign) {
    if (!cfg_.tied()) zero_grad(kWte);
    zero_grad(kWpe);
  }
  be_.encoder_backward(grad(kWte), grad(kWpe), g.dres, tokens_.get(), B, T, C);
  grads_ready_from(0);
}

}  // namespace xtrain
