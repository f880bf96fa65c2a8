// Decoder: the inference forward with a key/value cache (src/model/inference.h). Same op sequence
// as GPT::forward (src/model/model_step.cpp) without dropout and loss; attention reads and extends the cache
// through Backend::attention_decode.
#include <cstring>
#include <map>
#include <string>

#include "core/error.h"
#include "model/inference.h"

namespace xtrain {

namespace {
// bf16_to_float: bf16 is the upper half of an IEEE fp32, so widening is exact.
float bf16_to_float(uint16_t h) {
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
  std::map<std::string, const float*> p;
  for (const ParamTensor& t : model.layout()) p[t.name] = model.params() + t.offset;
  auto get = [&](const std::string& name) {
    auto it = p.find(name);
    XT_CHECK(it != p.end(), "parameter " << name << " missing from the model layout");
    return it->second;
  };
  wte_ = get("wte"), wpe_ = get("wpe"), lnfw_ = get("lnf.w"), lnfb_ = get("lnf.b");
  for (int l = 0; l < cfg_.L; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    layers_.push_back({get(h + "ln1.w"), get(h + "ln1.b"), get(h + "attn.qkv.w"), get(h + "attn.qkv.b"),
                       get(h + "attn.proj.w"), get(h + "attn.proj.b"), get(h + "ln2.w"), get(h + "ln2.b"),
                       get(h + "mlp.fc.w"), get(h + "mlp.fc.b"), get(h + "mlp.proj.w"), get(h + "mlp.proj.b")});
  }
  const size_t N = size_t(B) * cfg_.maxT, C = cfg_.C, ab = be_.activation_bytes();
  auto act = [&](size_t count) { return DeviceBuffer<unsigned char>(be_, count * ab); };
  x_ = act(N * C), x2_ = act(N * C), ln_ = act(N * C), branch_ = act(N * C);
  qkv_ = act(N * cfg_.qkv_width()), atty_ = act(N * cfg_.NH * cfg_.HS);
  fch_ = act(N * cfg_.F), fgelu_ = act(N * cfg_.F);
  mean_ = DeviceBuffer<float>(be_, N), rstd_ = DeviceBuffer<float>(be_, N);
  tokens_ = DeviceBuffer<int32_t>(be_, 1 + N);
  pos_dev_ = tokens_.get(), tok_dev_ = tokens_.get() + 1;
  const size_t cache = N * cfg_.KVH * cfg_.HS;
  for (int l = 0; l < cfg_.L; ++l) kcache_.push_back(act(cache)), vcache_.push_back(act(cache));
  prepare_weights();
}

void Decoder::prepare_weights() {
  be_.prepare_weights(params_, num_params_);
  weights_generation_ = be_.weights_generation();
}

void Decoder::reset() {
  pos_ = 0;
  graph_.reset();  // recorded again at the next one-token step, after the weights are read again
  graph_failed_ = false;
  prepare_weights();
}

void* Decoder::row(const DeviceBuffer<unsigned char>& buf, size_t elems) const {
  return buf.get() + elems * be_.activation_bytes();
}

void Decoder::blocks_and_head(int Tn, bool all_positions) {
  const int C = cfg_.C, Vp = cfg_.Vp(), NH = cfg_.NH, KVH = cfg_.KVH, HS = cfg_.HS, F = cfg_.F;
  const int N = B_ * Tn, QKV = cfg_.qkv_width(), A = NH * HS;
  const size_t NC = size_t(N) * C;
  for (int l = 0; l < cfg_.L; ++l) {
    const LayerParams& w = layers_[l];
    // attention branch: x2 = x + proj(attn(ln1(x))), keys and values appended to the cache
    be_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x_.get(), w.ln1w, w.ln1b, N, C);
    be_.matmul_forward(qkv_.get(), ln_.get(), w.qkvw, w.qkvb, N, C, QKV);
    be_.attention_decode(atty_.get(), kcache_[l].get(), vcache_[l].get(), qkv_.get(), B_, Tn, pos_dev_, cfg_.maxT,
                         NH, KVH, HS);
    be_.matmul_forward(branch_.get(), atty_.get(), w.projw, w.projb, N, A, C);
    be_.residual_forward(x2_.get(), x_.get(), branch_.get(), NC);
    // MLP branch: x = x2 + proj(gelu(fc(ln2(x2))))
    be_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x2_.get(), w.ln2w, w.ln2b, N, C);
    be_.matmul_forward(fch_.get(), ln_.get(), w.fcw, w.fcb, N, C, F);
    be_.gelu_forward(fgelu_.get(), fch_.get(), size_t(N) * F);
    be_.matmul_forward(branch_.get(), fgelu_.get(), w.fcprojw, w.fcprojb, N, F, C);
    be_.residual_forward(x_.get(), x2_.get(), branch_.get(), NC);
  }
  // final LayerNorm and tied head, for every new position or only the last one of each sequence
  const int rows = all_positions ? N : B_;
  if (all_positions) {
    be_.layernorm_forward(ln_.get(), mean_.get(), rstd_.get(), x_.get(), lnfw_, lnfb_, N, C);
  } else {
    for (int b = 0; b < B_; ++b)  // row b of ln = the last new position of sequence b
      be_.layernorm_forward(row(ln_, size_t(b) * C), mean_.get() + b, rstd_.get() + b,
                            row(x_, (size_t(b) * Tn + Tn - 1) * C), lnfw_, lnfb_, 1, C);
  }
  be_.matmul_forward(logits_.get(), ln_.get(), wte_, nullptr, rows, C, Vp);  // (rows,Vp)
}

const std::vector<float>& Decoder::append(const int32_t* tokens, int Tn, bool all_positions) {
  XT_CHECK(Tn >= 1, "append needs at least one token per sequence (got " << Tn << ")");
  XT_CHECK(Tn <= cfg_.maxT - pos_, "positions [" << pos_ << ", " << int64_t(pos_) + Tn
                                                 << ") exceed the model's context of " << cfg_.maxT << " tokens");
  const int C = cfg_.C, V = cfg_.V, Vp = cfg_.Vp(), N = B_ * Tn;
  for (int i = 0; i < N; ++i)
    XT_CHECK(tokens[i] >= 0 && tokens[i] < V, "token id " << tokens[i] << " outside the vocabulary [0, " << V << ")");
  if (be_.weights_generation() != weights_generation_) {  // the backend's copy no longer holds our weights
    prepare_weights();
    graph_.reset();  // it may hold the address of a copy that moved: recorded again
    graph_failed_ = false;
  }
  staging_.assign(1, pos_);  // [first new position, token ids]: one transfer
  staging_.insert(staging_.end(), tokens, tokens + N);
  be_.copy_to_device(tokens_.get(), staging_.data(), sizeof(int32_t) * staging_.size());

  // positions pos_.. read wpe rows pos_..: encoder_forward adds wpe[t] for t in [0, Tn)
  be_.encoder_forward(x_.get(), tok_dev_, wte_, wpe_ + size_t(pos_) * C, B_, Tn, C);
  const int rows = all_positions ? N : B_;
  const size_t ab = be_.activation_bytes(), logits_bytes = size_t(rows) * Vp * ab;
  if (logits_.bytes() < logits_bytes) {
    graph_.reset();  // it writes the old buffer: recorded again
    logits_ = DeviceBuffer<unsigned char>(be_, logits_bytes);
  }
  const bool one_token = Tn == 1 && !all_positions;
  if (one_token && use_graph_ && !graph_ && !graph_failed_) {
    try {
      graph_ = be_.capture_graph([&] { blocks_and_head(1, false); });
    } catch (const Error&) {  // e.g. an op that cannot be recorded: launched one by one instead
    }
    graph_failed_ = graph_ == nullptr;  // also the CPU backend, which records nothing
  }
  if (one_token && graph_)
    graph_->launch();
  else
    blocks_and_head(Tn, all_positions);
  pos_ += Tn;

  host_raw_.resize(logits_bytes);
  be_.copy_to_host(host_raw_.data(), logits_.get(), logits_bytes);
  host_logits_.resize(size_t(rows) * V);
  for (int r = 0; r < rows; ++r) {
    float* dst = host_logits_.data() + size_t(r) * V;
    const unsigned char* src = host_raw_.data() + size_t(r) * Vp * ab;
    if (ab == sizeof(float)) {
      std::memcpy(dst, src, size_t(V) * sizeof(float));
    } else {
      for (int v = 0; v < V; ++v) {
        uint16_t h;
        std::memcpy(&h, src + size_t(v) * 2, 2);
        dst[v] = bf16_to_float(h);
      }
    }
  }
  return host_logits_;
}

}  // namespace xtrain
