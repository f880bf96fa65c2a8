// Decoder: the inference forward with a key/value cache (src/model/inference.h). The blocks are the
// training forward's (block_forward, src/model/block.h) without dropout and loss; attention reads and
// extends the cache through Backend::attention_decode; rotary runs at the absolute positions
// from the device position the attention reads too.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include <xtrain/core/error.h>
#include "backend/greedy.h"
#include "model/block.h"
#include <xtrain/model/inference.h>

namespace xtrain {

namespace {
// bf16_to_float: one bf16 value (2 bytes as the device stores them, little-endian) widened to fp32; bf16 is
// the upper half of an IEEE fp32, so widening is exact.
float bf16_to_float(const unsigned char* src) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
}  // namespace

Decoder::Decoder(GPT& model, int B, bool cuda_graph)
    : be_(model.backend()),
      cfg_(model.config()),
      B_(B),
      params_(model.params()),
      num_params_(model.num_params()),
      use_graph_(cuda_graph) {
  XT_CHECK(B >= 1, "decoder batch must be >= 1 (got " << B << ")");
  wte_ = model.tensor(kWte), wpe_ = model.tensor(kWpe);  // wpe_ null without learned positions
  head_ = model.head();
  lnfw_ = model.tensor(final_param_index(cfg_.L, kLnfW)), lnfb_ = model.tensor(final_param_index(cfg_.L, kLnfB));
  for (int l = 0; l < cfg_.L; ++l) layers_.push_back(model.block_weights(l));
  const size_t N = size_t(B) * cfg_.maxT, C = cfg_.C, ab = be_.activation_bytes();
  auto act = [&](size_t count) { return DeviceBuffer<unsigned char>(be_, count * ab); };
  x_ = act(N * C), x2_ = act(N * C), ln_ = act(N * C), branch_ = act(N * C);
  qkv_ = act(N * cfg_.qkv_width()), atty_ = act(N * cfg_.NH * cfg_.HS);
  fch_ = act(N * cfg_.fc_width()), fch_act_ = act(N * cfg_.F);  // fch: [gate | up] for SwiGLU
  mean_ = DeviceBuffer<float>(be_, N), rstd_ = DeviceBuffer<float>(be_, N);
  tokens_ = DeviceBuffer<int32_t>(be_, 1 + N);
  ids_ = DeviceBuffer<int32_t>(be_, B);
  pos_dev_ = tokens_.get(), tok_dev_ = tokens_.get() + 1;
  steps_ = DeviceBuffer<int32_t>(be_, size_t(kGreedySteps + 1) * (1 + B));
  codes_ = DeviceBuffer<int32_t>(be_, size_t(kGreedySteps) * B);
  const size_t cache = N * cfg_.KVH * cfg_.HS;
  for (int l = 0; l < cfg_.L; ++l) kcache_.push_back(act(cache)), vcache_.push_back(act(cache));
  prepare_weights();
}

void Decoder::prepare_weights() {
  be_.prepare_weights(params_, num_params_);
  weights_generation_ = be_.weights_generation();
}

void* Decoder::row(const DeviceBuffer<unsigned char>& buf, size_t elems) const {
  return buf.get() + elems * be_.activation_bytes();
}

void Decoder::blocks_and_head(int Tn, bool all_positions, const int32_t* pos, const int32_t* tokens) {
  const int C = cfg_.C, Vp = cfg_.Vp(), L = cfg_.L, N = B_ * Tn;
  // positions *pos.. read wpe rows *pos.. (no wpe with rotary positions; rotary reads the same position)
  be_.encoder_forward(x_.get(), tokens, wte_, wpe_, B_, Tn, C, pos);
  const BlockActs a{ln_.get(),   qkv_.get(),  atty_.get(), branch_.get(),  x2_.get(),     ln_.get(),
                    mean_.get(), rstd_.get(), fch_.get(),  fch_act_.get(), branch_.get(), x_.get()};
  auto attention_of = [&](int l) {
    // the one difference from training: attention against the cache, which it extends by these Tn positions
    return [this, l, Tn, pos](void* atty, const void* qkv) {
      be_.attention_decode(atty, kcache_[l].get(), vcache_[l].get(), qkv, B_, Tn, pos, cfg_.maxT, cfg_.NH,
                           cfg_.KVH, cfg_.HS);
    };
  };
  if (N == 1 && be_.fuses_rows()) {
    // batch 1, one token (block_forward_row): each norm in the next product's launch, each residual add in the
    // projection's; the same bits as the op sequence below, with 2 launches fewer per block
    for (int l = 0; l < L; ++l) block_forward_row(be_, cfg_, x_.get(), layers_[l], a, attention_of(l), pos);
    norm_forward(be_, cfg_, ln_.get(), mean_.get(), rstd_.get(), x_.get(), lnfw_, lnfb_, N);
    be_.matmul_forward(logits_.get(), ln_.get(), head_, nullptr, N, C, Vp);
    return;
  }
  // The training forward's ops in its order (GPT::forward_pass): ln1 of block 0, then block_forward, whose
  // last op writes the next block's ln1 (or lnf). Buffers are reused where block_forward allows: ln_ holds
  // ln1, ln2 and the next LayerNorm; branch_ both projections; x_ the block's input and its output.
  if (L > 0)
    norm_forward(be_, cfg_, ln_.get(), mean_.get(), rstd_.get(), x_.get(), layers_[0][kLn1W], layers_[0][kLn1B], N);
  else
    norm_forward(be_, cfg_, ln_.get(), mean_.get(), rstd_.get(), x_.get(), lnfw_, lnfb_, N);
  for (int l = 0; l < L; ++l) {
    const NextNorm next{ln_.get(), mean_.get(), rstd_.get(), l + 1 < L ? layers_[l + 1][kLn1W] : lnfw_,
                        l + 1 < L ? layers_[l + 1][kLn1B] : lnfb_};
    block_forward(be_, cfg_, B_, Tn, x_.get(), layers_[l], a, next, attention_of(l), BlockDropout(), pos);
  }
  // head (wte, or the untied lm_head) over ln_ = lnf(x): every new position, or the last new position of each sequence
  if (all_positions || Tn == 1) {
    be_.matmul_forward(logits_.get(), ln_.get(), head_, nullptr, N, C, Vp);  // (N,Vp); N = B_ when Tn == 1
  } else {
    for (int b = 0; b < B_; ++b)  // row b of the logits = the last new position of sequence b
      be_.matmul_forward(row(logits_, size_t(b) * Vp), row(ln_, (size_t(b) * Tn + Tn - 1) * C), head_, nullptr, 1, C, Vp);
  }
}

void Decoder::check_append(const int32_t* tokens, int count, int positions) const {
  XT_CHECK(positions <= cfg_.maxT - pos_, "positions [" << pos_ << ", " << int64_t(pos_) + positions
                                                        << ") exceed the model's context of " << cfg_.maxT << " tokens");
  for (int i = 0; i < count; ++i)
    XT_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.V,
             "token id " << tokens[i] << " outside the vocabulary [0, " << cfg_.V << ")");
}

void Decoder::step(const int32_t* tokens, int Tn, bool all_positions, bool argmax) {
  XT_CHECK(Tn >= 1, "append needs at least one token per sequence (got " << Tn << ")");
  const int V = cfg_.V, Vp = cfg_.Vp(), N = B_ * Tn;
  check_append(tokens, N, Tn);
  refresh_weights();
  staging_.assign(1, pos_);  // [first new position, token ids]: one transfer
  staging_.insert(staging_.end(), tokens, tokens + N);
  be_.copy_to_device(tokens_.get(), staging_.data(), sizeof(int32_t) * staging_.size());

  logit_rows_ = all_positions ? N : B_;
  reserve_logits(logit_rows_);
  // the one-token step: the forward and the greedy ids of its B logit rows (argmax_rows, a few microseconds,
  // recorded with it so that a greedy one-token step is one graph launch)
  auto one_token_step = [&] {
    blocks_and_head(1, false, pos_dev_, tok_dev_);
    be_.argmax_rows(ids_.get(), logits_.get(), B_, V, Vp);
  };
  const bool one_token = Tn == 1 && !all_positions;
  if (one_token && record(graph_, graph_failed_, one_token_step)) {
    graph_->launch();
  } else {
    blocks_and_head(Tn, all_positions, pos_dev_, tok_dev_);
    if (argmax) be_.argmax_rows(ids_.get(), logits_.get(), B_, V, Vp);  // (B) rows: the last new positions
  }
  pos_ += Tn;
}

void Decoder::refresh_weights() {
  if (be_.weights_generation() == weights_generation_) return;
  prepare_weights();  // the backend's copy no longer holds our weights
  graph_.reset(), steps_graph_.reset();  // they may hold the address of a copy that moved: recorded again
  graph_failed_ = steps_graph_failed_ = false;
}

void Decoder::reserve_logits(int rows) {
  const size_t bytes = size_t(rows) * cfg_.Vp() * be_.activation_bytes();
  if (logits_.bytes() >= bytes) return;
  graph_.reset(), steps_graph_.reset();  // they write the old buffer: recorded again
  logits_ = DeviceBuffer<unsigned char>(be_, bytes);
}

bool Decoder::record(std::unique_ptr<StepGraph>& graph, bool& failed, const std::function<void()>& work) {
  if (graph) return true;
  if (!use_graph_ || failed) return false;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    graph = be_.capture_graph(work);
  } catch (const Error&) {  // e.g. an op that cannot be recorded: launched one by one instead
  }
  failed = graph == nullptr;  // also the CPU backend, which records nothing
  if (!graph) return false;
  ++graph_recordings_;
  graph_record_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

const std::vector<int32_t>& Decoder::append_greedy_steps(const int32_t* tokens, int steps) {
  XT_CHECK(steps >= 1, "append_greedy_steps needs at least one step (got " << steps << ")");
  check_append(tokens, B_, steps);
  const int V = cfg_.V, Vp = cfg_.Vp();
  host_steps_.resize(size_t(steps) * B_);
  if (steps != kGreedySteps) {  // another count: one recorded step at a time, the same tokens
    std::vector<int32_t> cur(tokens, tokens + B_);
    for (int k = 0; k < steps; ++k) {
      const std::vector<int32_t>& ids = append_greedy(cur.data(), 1);
      for (int b = 0; b < B_; ++b) {
        host_steps_[size_t(k) * B_ + b] = ids[b];
        cur[b] = argmax_code_id(ids[b]);  // what argmax_rows' tokens hold
      }
    }
    return host_steps_;
  }
  refresh_weights();
  // steps_: blocks of (1 + B) int32, block k = [the position of step k | its tokens]; step k's argmax writes
  // block k + 1's tokens. One transfer of the positions and the first tokens, one of the (steps, B) codes back.
  const size_t block = size_t(1) + B_;
  staging_.assign(size_t(steps) * block, 0);
  for (int k = 0; k < steps; ++k) staging_[size_t(k) * block] = pos_ + k;
  std::copy(tokens, tokens + B_, staging_.begin() + 1);
  be_.copy_to_device(steps_.get(), staging_.data(), sizeof(int32_t) * staging_.size());
  logit_rows_ = B_;
  reserve_logits(B_);
  auto run = [&] {
    for (int k = 0; k < steps; ++k) {
      int32_t* blk = steps_.get() + size_t(k) * block;
      blocks_and_head(1, false, blk, blk + 1);
      be_.argmax_rows(codes_.get() + size_t(k) * B_, logits_.get(), B_, V, Vp, blk + block + 1);
    }
  };
  if (record(steps_graph_, steps_graph_failed_, run)) steps_graph_->launch();
  else run();
  be_.copy_to_host(host_steps_.data(), codes_.get(), sizeof(int32_t) * host_steps_.size());
  pos_ += steps;
  return host_steps_;
}

void Decoder::rewind(int pos) {
  XT_CHECK(pos >= 0 && pos <= pos_, "rewind to position " << pos << " outside [0, " << pos_ << "]");
  pos_ = pos;
}

const std::vector<float>& Decoder::append(const int32_t* tokens, int Tn, bool all_positions) {
  step(tokens, Tn, all_positions, false);
  const int V = cfg_.V, Vp = cfg_.Vp(), rows = logit_rows_;
  const size_t ab = be_.activation_bytes(), logits_bytes = size_t(rows) * Vp * ab;
  host_raw_.resize(logits_bytes);
  be_.copy_to_host(host_raw_.data(), logits_.get(), logits_bytes);
  host_logits_.resize(size_t(rows) * V);
  for (int r = 0; r < rows; ++r) {
    float* dst = host_logits_.data() + size_t(r) * V;
    const unsigned char* src = host_raw_.data() + size_t(r) * Vp * ab;
    if (ab == sizeof(float)) {
      std::memcpy(dst, src, size_t(V) * sizeof(float));
    } else {
      for (int v = 0; v < V; ++v) dst[v] = bf16_to_float(src + size_t(v) * 2);
    }
  }
  return host_logits_;
}

const std::vector<int32_t>& Decoder::append_greedy(const int32_t* tokens, int Tn) {
  step(tokens, Tn, false, true);
  host_ids_.resize(B_);
  be_.copy_to_host(host_ids_.data(), ids_.get(), sizeof(int32_t) * B_);
  return host_ids_;
}

float Decoder::logit(int row, int v) const {
  XT_CHECK(row >= 0 && row < logit_rows_ && v >= 0 && v < cfg_.V,
           "logit (" << row << ", " << v << ") outside the last append's (" << logit_rows_ << ", " << cfg_.V << ")");
  const size_t ab = be_.activation_bytes();
  unsigned char raw[sizeof(float)];
  be_.copy_to_host(raw, logits_.get() + (size_t(row) * cfg_.Vp() + v) * ab, ab);
  if (ab == sizeof(float)) {
    float f;
    std::memcpy(&f, raw, sizeof(f));
    return f;
  }
  return bf16_to_float(raw);
}

}  // namespace xtrain
