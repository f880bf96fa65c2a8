// GPT parameter layout, configuration checks, initialization and activation buffers.
// Forward and backward are in src/model/model_step.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iterator>
#include <sstream>
#include <string>

#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include "model_acts.h"

namespace xtrain {

void GPTConfig::validate() const {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw UsageError(msg);
  };
  need(V > 0, "vocabulary size must be positive");
  need(V <= kMaxVocab, "vocabulary size " + std::to_string(V) + " is too large (limit " + std::to_string(kMaxVocab) + ")");
  need(maxT > 0, "--seq must be positive");
  need(C > 0, "--dim must be positive");
  need(L > 0, "--layers must be positive");
  need(NH > 0, "--heads must be positive");
  need(KVH > 0 && NH % KVH == 0,
       "--kv-heads (" + std::to_string(KVH) + ") must divide --heads (" + std::to_string(NH) + ")");
  need(HS > 0, "--head-dim must be positive");
  need(F > 0, "--ffn must be positive");
  check_size();
  need(static_cast<int>(arch) >= 0 && static_cast<size_t>(arch) < std::size(kFamilyTraits),
       "--arch: unknown model family " + std::to_string(int(arch)));
  // the family's fields: each only where the family has the part that reads it (traits())
  const GPTConfig defaults;
  if (!traits().untied_head) need(tie_embeddings == 1, "--tie-embeddings false needs --arch llama (GPT-2's head is always wte)");
  if (!rotary()) need(rope_theta == defaults.rope_theta, "--rope-theta needs --arch llama (GPT-2 has learned positions)");
  if (!rmsnorm()) need(norm_eps == defaults.norm_eps, "--norm-eps needs --arch llama (GPT-2's LayerNorm eps is 1e-5)");
  if (rotary())
    need(HS % 2 == 0, "--head-dim must be even with --arch " + std::string(traits().name) +
                          " (rotary embeddings rotate channel pairs), got " + std::to_string(HS));
  if (rmsnorm()) {
    char eps_range[128];
    std::snprintf(eps_range, sizeof eps_range,
                  "--norm-eps must be in [%g, %g] (RMSNorm's epsilon; Llama models use 1e-5 or 1e-6)", kMinNormEps,
                  kMaxNormEps);
    need(norm_eps >= kMinNormEps && norm_eps <= kMaxNormEps, eps_range);  // false for nan too
  }
  if (rotary()) need(std::isfinite(rope_theta) && rope_theta > 1, "--rope-theta must be finite and > 1");
  need(tie_embeddings == 0 || tie_embeddings == 1, "--tie-embeddings must be true or false");
}

void check_model_config(const GPTConfig& cfg, const std::string& what, const std::vector<TokenIdField>& token_ids) {
  try {
    cfg.validate();
  } catch (const UsageError& e) {
    XT_FAIL(what << ": " << e.what());
  }
  // an id past the vocabulary names no row of wte or the head (transformers' generate would index
  // out of range); a negative one none at all
  for (const TokenIdField& t : token_ids)
    if (t.id < 0 || t.id >= cfg.V)
      XT_FAIL(what << ": " << t.field << " " << t.id << " is not a token id of the vocabulary (vocab_size " << cfg.V
                   << ": ids 0 to " << cfg.V - 1 << ")");
}

size_t GPTConfig::num_params() const {
  const std::vector<ParamTensor> pl = param_layout(*this);
  return pl.back().offset + pl.back().count;
}

Arch parse_arch(const std::string& s) {
  std::string names;
  for (const FamilyTraits& f : kFamilyTraits) {
    if (s == f.name) return f.arch;
    names += (names.empty() ? "" : &f == std::end(kFamilyTraits) - 1 ? " or " : ", ") + std::string(f.name);
  }
  throw UsageError("--arch must be " + names + ", got '" + s + "'");
}

const char* to_string(Arch a) {
  const int i = static_cast<int>(a);
  return i >= 0 && static_cast<size_t>(i) < std::size(kFamilyTraits) ? kFamilyTraits[i].name : "gpt2";
}

void GPTConfig::check_size() const {
  for (const SizeLimit& s : kSizeLimits)
    if (this->*s.size > s.limit)
      throw UsageError(std::string(s.option) + " = " + std::to_string(this->*s.size) + " is too large (limit " +
                       std::to_string(s.limit) + ")");
}

std::string GPTConfig::describe() const {
  std::ostringstream os;
  os << "V=" << V << " T=" << maxT << " C=" << C << " L=" << L << " NH=" << NH << " KVH=" << KVH
     << " HS=" << HS << " F=" << F;
  if (arch != GPTConfig().arch) {  // the default family's line names no family fields
    os << " arch=" << traits().name;
    if (rmsnorm()) os << " norm_eps=" << norm_eps;
    if (rotary()) os << " rope_theta=" << rope_theta;
    if (traits().untied_head) os << " tied=" << (tied() ? 1 : 0);
  }
  return os.str();
}

int param_dim(const GPTConfig& c, ParamDim d) {
  switch (d) {
    case ParamDim::one: return 1;
    case ParamDim::C: return c.C;
    case ParamDim::Vp: return c.Vp();
    case ParamDim::maxT: return c.maxT;
    case ParamDim::QKV: return c.qkv_width();
    case ParamDim::A: return c.NH * c.HS;
    case ParamDim::KV: return c.KVH * c.HS;
    case ParamDim::F: return c.F;
    case ParamDim::FC: return c.fc_width();
    case ParamDim::count: break;
  }
  XT_FAIL("param_dim: no such dimension");
}

int file_dim(const GPTConfig& c, ParamDim d) { return d == ParamDim::Vp ? c.V : param_dim(c, d); }

std::vector<ParamTensor> param_layout(const GPTConfig& c) {
  std::vector<ParamTensor> out;
  out.reserve(num_param_tensors(c.L));
  size_t off = 0;
  auto add = [&](const ParamSpec& s, int layer) {
    ParamTensor t;
    t.name = (layer >= 0 ? "h" + std::to_string(layer) + "." : std::string()) + s.name;
    t.shape = {param_present(c, s) ? param_dim(c, s.rows) : 0};  // an absent row: zero elements
    if (s.matrix()) t.shape.push_back(param_dim(c, s.cols));
    t.count = size_t(t.shape[0]) * (s.matrix() ? size_t(t.shape[1]) : 1);
    t.offset = off, t.decay = s.decay, t.spec = &s, t.layer = layer;
    off += t.count;
    out.push_back(std::move(t));
  };
  for (const ParamSpec& s : kEmbedParamTable) add(s, -1);
  for (int l = 0; l < c.L; ++l)
    for (const ParamSpec& s : kLayerParamTable) add(s, l);
  for (const ParamSpec& s : kFinalParamTable) add(s, -1);
  return out;
}

GPT::GPT(const GPTConfig& cfg, Backend& be, int recompute, bool with_grads) : cfg_(cfg), be_(be), recompute_(recompute) {
  cfg_.validate();
  XT_CHECK(recompute >= 0 && recompute <= kMaxRecompute, "recompute must be 0, 1 or 2, got " << recompute);
  layout_ = param_layout(cfg_);
  num_params_ = layout_.back().offset + layout_.back().count;
  params_ = DeviceBuffer<float>(be_, num_params_);
  be_.zero(params_.get(), params_.bytes());
  if (with_grads) {
    grads_ = DeviceBuffer<float>(be_, num_params_);
    be_.zero(grads_.get(), grads_.bytes());
  }
}

bool param_present(const GPTConfig& c, const ParamSpec& s) {
  switch (s.in) {
    case ParamIn::all: return true;
    // GPT-2's parts that another family may lack: wpe (the one maxT row: learned positions) and the biases
    case ParamIn::gpt2: return s.rows == ParamDim::maxT ? c.traits().positions == PositionKind::learned : c.traits().biases;
    case ParamIn::untied: return !c.tied();
  }
  return true;
}

float* GPT::param(int layer, int which) { return const_cast<float*>(tensor(layer_param_index(layer, which))); }

const float* GPT::tensor(size_t index) const {
  return layout_[index].count ? params_.get() + layout_[index].offset : nullptr;
}

BlockWeights GPT::block_weights(int layer) {
  BlockWeights w;
  for (int i = 0; i < kPerLayer; ++i) w.w[i] = param(layer, i);
  return w;
}

void GPT::zero_grads() {
  XT_CHECK(grads_.get() || num_params_ == 0, "zero_grads(): this model was made without gradients (with_grads false)");
  be_.zero(grads_.get(), grads_.bytes());
}

void GPT::init_params(uint64_t seed) {
  std::vector<float> host(num_params_);
  const uint64_t base = hash_key(seed, kRngInit);
  // residual projections N(0, 0.02/sqrt(2L)) where the family scales them (GPT-2), else N(0, 0.02) as
  // every other matrix (Llama; model_params.h, ParamInit)
  const double std_w = 0.02, std_proj = cfg_.traits().scaled_residual_init ? 0.02 / std::sqrt(2.0 * cfg_.L) : std_w;
  for (size_t i = 0; i < layout_.size(); ++i) {
    const ParamTensor& t = layout_[i];
    float* p = host.data() + t.offset;
    switch (t.spec->init) {
      case ParamInit::ones: std::fill(p, p + t.count, 1.0f); break;
      case ParamInit::zeros: std::fill(p, p + t.count, 0.0f); break;
      case ParamInit::normal:
      case ParamInit::normal_residual: {
        const double sd = t.spec->init == ParamInit::normal_residual ? std_proj : std_w;
        const uint64_t key = hash_key(base, i);  // keyed by the tensor's index in the buffer
        // padded rows [V, Vp) stay zero: no token reads them and their logits are never a target
        const size_t drawn = t.spec->rows == ParamDim::Vp ? size_t(cfg_.V) * t.shape[1] : t.count;
        for (size_t j = 0; j < t.count; ++j) p[j] = j < drawn ? static_cast<float>(sd * normal(key, j)) : 0.0f;
        break;
      }
    }
  }
  be_.copy_to_device(params_.get(), host.data(), num_params_ * sizeof(float));
}

namespace {
// Fp8Matrix / fp8_matrices: the weight matrices --fp8 selects, as matmuls see them (rows = OC, cols = IC): each
// block's fc (fc_width, C) and fc_proj (C, F) for `mlp`, the head (Vp, C) for `head` (layer -1); only_taken: those
// a backend takes (Backend::fp8_takes at their offset in the parameters, whose buffer starts 256-byte aligned), so
// that the memory estimate counts what set_fp8_weights will take.
struct Fp8Matrix {
  int layer, which, rows, cols;
};
std::vector<Fp8Matrix> fp8_matrices(const GPTConfig& c, const Fp8Linears& f, bool only_taken = false) {
  std::vector<Fp8Matrix> m;
  for (int l = 0; f.mlp && l < c.L; ++l) {
    m.push_back({l, kFcW, c.fc_width(), c.C});
    m.push_back({l, kFcProjW, c.C, c.F});
  }
  if (f.head) m.push_back({-1, -1, c.Vp(), c.C});
  if (!only_taken) return m;
  const std::vector<ParamTensor> layout = param_layout(c);
  std::vector<Fp8Matrix> taken;
  for (const Fp8Matrix& x : m) {
    const size_t index = x.layer >= 0 ? layer_param_index(x.layer, x.which)
                                      : c.tied() ? size_t(kWte) : final_param_index(c.L, kLmHead);
    if (Backend::fp8_takes(x.rows, x.cols, layout[index].offset * sizeof(float))) taken.push_back(x);
  }
  return taken;
}
}  // namespace

TrainMemory estimate_train_memory(const GPTConfig& cfg, int B, int T, const Backend& be, int recompute,
                                  int logits_chunk_rows, const Fp8Linears& fp8) {
  TrainMemory m;
  for (const ParamTensor& p : param_layout(cfg)) m.num_params += double(p.count);
  m.weights = (4.0 * sizeof(float) + double(be.weight_copy_bytes())) * m.num_params;
  if (fp8.any() && be.fp8_unavailable().empty()) {
    // the matrices the backend takes, E4M3 in both layouts; and the largest scratch of one product's casts
    // (matmul.cu's backward of a (OC, IC) weight over n rows: its output gradient in both layouts and its input
    // transposed, a byte each, n (2 OC + IC)): the MLP's over N = B*T rows, the head's over one chunk of rows
    const double N = double(B) * T;
    const double R = xtrain::logits_chunk_rows(cfg, B * T, be.activation_bytes(), logits_chunk_rows);
    for (const Fp8Matrix& f : fp8_matrices(cfg, fp8, true)) {
      m.weights += 2.0 * double(f.rows) * f.cols;
      m.scratch = std::max(m.scratch, (f.layer < 0 ? R : N) * (2.0 * f.rows + f.cols));
    }
  }
  // The backend's scratch count is a size_t product; ask it only where that cannot overflow, else
  // use the CPU's (B,NH,T,T), an upper bound that no memory holds anyway.
  const double att_bound = double(B) * cfg.NH * double(T) * T;
  const size_t att = att_bound < 1e18 ? be.attention_scratch_count(B, T, cfg.NH, cfg.KVH, cfg.HS) : 0;
  const ActDims dims = act_dims(cfg, B, T, att, be.activation_bytes(), logits_chunk_rows);
  const double act_bytes = double(be.activation_bytes());
  auto bytes = [&](const ActSpec& a) {
    const double count = a.cols == ActDim::att && att_bound >= 1e18 ? att_bound : double(dims[a.rows]) * double(dims[a.cols]);
    return count * (a.store == ActStore::fp32 ? sizeof(float) : act_bytes);
  };
  for (const ActSpec& a : kLayerActTable) m.activations += (a.shared(recompute) ? 1 : cfg.L) * bytes(a);
  for (const ActSpec& a : kGlobalActTable) m.activations += bytes(a);
  m.activations += 2.0 * double(B) * T * sizeof(int32_t);  // tokens, targets
  return m;
}

void check_train_memory(const GPTConfig& cfg, int B, int T, const Backend& be, int ranks_sharing, int recompute,
                        int logits_chunk_rows, const Fp8Linears& fp8) {
  const double avail = double(be.available_memory_bytes());
  if (avail <= 0) return;
  const TrainMemory m = estimate_train_memory(cfg, B, T, be, recompute, logits_chunk_rows, fp8);
  if (m.total() * ranks_sharing <= avail) return;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  XT_FAIL(std::fixed << std::setprecision(1) << "the model needs about " << m.total() / gib << " GiB per rank ("
          << std::setprecision(0) << m.num_params << " parameters: " << std::setprecision(1) << m.weights / gib
          << " GiB for parameters, gradients and AdamW state; " << m.activations / gib << " GiB of activations for "
          << B << " x " << T << " tokens per micro-step"
          << (m.scratch > 0 ? "; " + std::to_string(int(m.scratch / (1024.0 * 1024.0))) + " MiB of --fp8 cast scratch" : std::string())
          << ") but " << avail / gib << " GiB are available on "
          << be.device_name() << (ranks_sharing > 1 ? " for " + std::to_string(ranks_sharing) + " ranks" : std::string())
          << "; reduce --dim, --layers, --ffn, --seq or the per-rank batch (--batch / --grad-accum / ranks)"
          << (recompute < kMaxRecompute ? ", or raise --recompute" : ""));
}

void GPT::ensure_acts(int B, int T) {
  XT_CHECK(T <= cfg_.maxT, "sequence length " << T << " exceeds the model's context " << cfg_.maxT);
  const size_t act_bytes = be_.activation_bytes();
  const int chunk = xtrain::logits_chunk_rows(cfg_, B * T, act_bytes, logits_chunk_rows_);
  if (T == T_ && B <= B_) {  // buffers for a larger batch serve a smaller one
    if (chunk <= logits_rows_) return;
    // whose chunk may be larger (automatic chunks: all of its rows where they fit): the logits buffer alone
    // grows to it, so the smaller batch chunks as in buffers of its own (the same bits)
    acts_[static_cast<size_t>(cfg_.L) * kPerLayerActs + kLogits] =
        DeviceBuffer<unsigned char>(be_, size_t(chunk) * cfg_.Vp() * act_bytes);
    logits_rows_ = chunk;
    ++buffers_generation_;
    return;
  }
  const ActDims dims = act_dims(cfg_, B, T, be_.attention_scratch_count(B, T, cfg_.NH, cfg_.KVH, cfg_.HS), act_bytes,
                                logits_chunk_rows_);
  auto alloc = [&](const ActSpec& a) {
    acts_.emplace_back(be_, a.count(dims) * (a.store == ActStore::fp32 ? sizeof(float) : act_bytes));
  };
  acts_.clear();
  acts_.reserve(static_cast<size_t>(cfg_.L) * kPerLayerActs + kNumGlobalActs);
  for (int l = 0; l < cfg_.L; ++l)
    for (const ActSpec& a : kLayerActTable) {
      if (l > 0 && a.shared(recompute_)) acts_.emplace_back();  // layer 0's buffer serves (act())
      else alloc(a);
    }
  for (const ActSpec& a : kGlobalActTable) alloc(a);
  const size_t N = dims[ActDim::N];
  tokens_ = DeviceBuffer<int32_t>(be_, N);
  targets_ = DeviceBuffer<int32_t>(be_, N);
  B_ = B, T_ = T;
  logits_rows_ = int(dims[ActDim::R]);
  ++buffers_generation_;
  fwd_B_ = 0, fwd_T_ = 0;  // the activations backward() would read are gone
}

void* GPT::act(int l, int which) const {
  return acts_[static_cast<size_t>(layer_act_owner(l, which, recompute_)) * kPerLayerActs + which].get();
}

void* GPT::gact(int which) const { return acts_[static_cast<size_t>(cfg_.L) * kPerLayerActs + which].get(); }

std::vector<MemoryEntry> GPT::memory_entries() const {
  std::vector<MemoryEntry> out;
  const MemoryCategory P = MemoryCategory::parameters, A = MemoryCategory::activations;
  // parameters: one row per table row, a block's summed over its L tensors (layout_ order: first seen)
  std::vector<std::pair<const ParamSpec*, size_t>> rows;  // spec -> index into out
  for (const ParamTensor& t : layout_) {
    if (t.count == 0) continue;
    auto it = std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == t.spec; });
    if (it == rows.end()) {
      const std::string name = t.layer < 0 ? t.name : "h*." + std::string(t.spec->name);
      rows.emplace_back(t.spec, out.size());
      out.push_back({name, 0, "fp32", t.layer < 0 ? "master weights" : "master weights, x L layers", P, {params_.get()}});
      it = rows.end() - 1;
    }
    out[it->second].bytes += t.count * sizeof(float);
  }
  out.push_back({"gradients", grads_.bytes(), "fp32", "parameter layout, one buffer (one all-reduce)",
                 MemoryCategory::gradients, {grads_.get()}});
  if (acts_.empty()) return out;
  const char* act_type = be_.activation_bytes() == 2 ? "bf16" : "fp32";
  auto dtype = [&](const ActSpec& a) { return a.store == ActStore::fp32 ? "fp32" : act_type; };
  for (const ActSpec& a : kLayerActTable) {
    MemoryEntry e{std::string("h*.") + a.name, 0, dtype(a),
                  a.shared(recompute_) ? "one buffer for all layers (--recompute " + std::to_string(recompute_) + ")"
                                       : std::string("kept for the backward, x L layers"),
                  A, {}};
    for (int l = 0; l < cfg_.L; ++l)
      if (layer_act_owner(l, a.id, recompute_) == l) {
        const DeviceBuffer<unsigned char>& b = acts_[size_t(l) * kPerLayerActs + a.id];
        e.bytes += b.count();
        if (b.get()) e.blocks.push_back(b.get());
      }
    out.push_back(e);
  }
  const size_t N = size_t(B_) * T_;
  const size_t R = size_t(logits_rows_);
  // the rows the buffer holds: the chunk of the B_ x T_ rows the buffers are sized for (after an evaluation of
  // another length, the evaluation's), or a smaller batch's larger chunk it grew to (ensure_acts)
  const std::string shape = " (B " + std::to_string(B_) + " x T " + std::to_string(T_) + ")";
  const bool grown = R > size_t(logits_buffer_rows(cfg_, int(N), be_.activation_bytes(), logits_chunk_rows_));
  const std::string held = R == N ? "all " + std::to_string(N) + " rows" + shape + ", one chunk"
                                  : std::to_string(R) + " of the " + std::to_string(N) + " rows" + shape +
                                        (grown ? ", grown to a smaller batch's larger chunk" : "") + ", a chunk at a time";
  const std::string logits_note =
      held + " (--logits-chunk-rows " +
      (logits_chunk_rows_ > 0 ? std::to_string(logits_chunk_rows_) : std::string("0: automatic")) +
      "): logits, then dlogits in place";
  for (const ActSpec& a : kGlobalActTable) {
    const DeviceBuffer<unsigned char>& b = acts_[size_t(cfg_.L) * kPerLayerActs + a.id];
    out.push_back({a.name, b.count(), dtype(a),
                   a.id == kLogits   ? logits_note
                   : a.id == kBranch ? "forward scratch, one buffer for every layer"
                   : a.id >= kDRes   ? "backward scratch, one buffer for every layer"
                                   : "forward output, one buffer",
                   A, {b.get()}});
  }
  out.push_back({"tokens", tokens_.bytes(), "int32", "the micro-batch's input ids", A, {tokens_.get()}});
  out.push_back({"targets", targets_.bytes(), "int32", "the micro-batch's target ids", A, {targets_.get()}});
  return out;
}

const void* GPT::logits() const {
  if (acts_.empty()) return nullptr;
  XT_CHECK(logits_chunks_ <= 1, "logits(): the last forward ran the head in " << logits_chunks_
                                    << " chunks of rows (--logits-chunk-rows); the buffer holds the last chunk only");
  return gact(kLogits);
}

Fp8Linears parse_fp8_linears(const std::string& text) {
  Fp8Linears which;
  if (text == "none") return which;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (part == "mlp" && !which.mlp) which.mlp = true;
    else if (part == "head" && !which.head) which.head = true;
    else
      throw UsageError("--fp8 must be none, mlp, head or mlp,head (got '" + text + "')");
    if (comma == std::string::npos) return which;
    at = comma + 1;
  }
}

std::string fp8_linears_name(const Fp8Linears& which) {
  if (which.mlp && which.head) return "mlp,head";
  return which.mlp ? "mlp" : which.head ? "head" : "none";
}

std::pair<size_t, size_t> GPT::set_fp8(const Fp8Linears& which) {
  std::vector<Backend::WeightMatrix> list;
  for (const Fp8Matrix& f : fp8_matrices(cfg_, which))
    list.push_back({f.layer < 0 ? head() : block_weights(f.layer)[f.which], f.rows, f.cols});
  const size_t taken = be_.set_fp8_weights(list);
  fp8_ = which;
  return {taken, list.size()};
}

void GPT::set_logits_chunk_rows(int rows) {
  XT_CHECK(rows >= 0, "logits chunk rows must be >= 0 (0 = automatic), got " << rows);
  if (rows == logits_chunk_rows_) return;
  logits_chunk_rows_ = rows;
  T_ = 0;  // the logits buffer's rows change: the next set_batch allocates the buffers again
  batch_B_ = 0, batch_T_ = 0, fwd_B_ = 0, fwd_T_ = 0;
}

}  // namespace xtrain
