// LR schedules, clipping factor, AdamW and Muon over the flat parameter buffer (see <xtrain/train/optim.h>).
#include <xtrain/train/optim.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include <xtrain/core/error.h>
#include <xtrain/model/model_params.h>

namespace xtrain {

namespace {
template <typename E, size_t N>
E parse_word(const std::string& s, const char* const (&words)[N], const char* option) {
  for (size_t i = 0; i < N; ++i)
    if (s == words[i]) return static_cast<E>(i);
  std::string all;
  for (size_t i = 0; i < N; ++i) all += (i ? i + 1 == N ? " or " : ", " : "") + std::string(words[i]);
  throw UsageError(std::string("--") + option + " must be " + all + ", got '" + s + "'");
}
constexpr const char* kOptimizerWords[] = {"adamw", "muon"};
constexpr const char* kScheduleWords[] = {"cosine", "wsd", "linear"};
constexpr const char* kAdjustWords[] = {"original", "match_rms_adamw"};
}  // namespace

OptimizerKind parse_optimizer(const std::string& s) { return parse_word<OptimizerKind>(s, kOptimizerWords, "optimizer"); }
LrSchedule parse_lr_schedule(const std::string& s) { return parse_word<LrSchedule>(s, kScheduleWords, "lr-schedule"); }
MuonAdjust parse_muon_adjust(const std::string& s) { return parse_word<MuonAdjust>(s, kAdjustWords, "muon-adjust"); }
const char* to_string(OptimizerKind k) { return kOptimizerWords[static_cast<int>(k) & 1]; }
const char* to_string(LrSchedule s) { return static_cast<int>(s) < 3 ? kScheduleWords[static_cast<int>(s)] : "?"; }
const char* to_string(MuonAdjust a) { return kAdjustWords[static_cast<int>(a) & 1]; }

int wsd_decay_start(int total_steps, int warmup_steps, float decay_frac) {
  const int decay = static_cast<int>(std::lround(static_cast<double>(decay_frac) * total_steps));
  return std::max(total_steps - decay, std::min(warmup_steps, total_steps));
}

bool wsd_replans(LrSchedule s, int step, int total_steps, int warmup_steps, float decay_frac, int new_total) {
  return s == LrSchedule::wsd && new_total > total_steps && step <= wsd_decay_start(total_steps, warmup_steps, decay_frac);
}

float lr_at(const OptimConfig& c, int step, float peak) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return peak * static_cast<float>(step) / static_cast<float>(c.warmup_steps);
  const double lr_min = static_cast<double>(peak) * c.min_lr_frac;
  const int S = c.total_steps;
  // the step the decay starts after: the warmup's end, or the stable phase's for wsd
  const int from = c.schedule == LrSchedule::wsd ? wsd_decay_start(S, c.warmup_steps, c.decay_frac) : c.warmup_steps;
  const int decay_steps = S - from;
  if (decay_steps <= 0) return peak;  // warmup (or a wsd decay of 0 steps) covers the whole run
  if (step <= from) return peak;  // wsd's stable phase
  if (step >= S) return static_cast<float>(lr_min);
  const double progress = static_cast<double>(step - from) / decay_steps;
  if (c.schedule != LrSchedule::cosine) return static_cast<float>(lr_min + (peak - lr_min) * (1.0 - progress));
  const double pi = 3.14159265358979323846;
  return static_cast<float>(lr_min + 0.5 * (peak - lr_min) * (1.0 + std::cos(pi * progress)));
}

float clip_scale(const OptimConfig& c, double grad_norm) {
  if (c.grad_clip <= 0.0f || !std::isfinite(grad_norm) || grad_norm <= c.grad_clip) return 1.0f;
  return static_cast<float>(c.grad_clip / grad_norm);
}

double muon_lr_ratio(MuonAdjust a, int rows, int cols) {
  // torch computes the ratio in Python floats (double) and multiplies the float lr by it
  return a == MuonAdjust::original ? std::sqrt(std::max(1.0, static_cast<double>(rows) / cols))
                                   : 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
}

float muon_adjusted_lr(MuonAdjust a, float lr, int rows, int cols) {
  return static_cast<float>(static_cast<double>(lr) * muon_lr_ratio(a, rows, cols));
}

AdamW::AdamW(Backend& be, size_t num_params) : be_(be), m_(be, num_params), v_(be, num_params) {
  be_.zero(m_.get(), m_.bytes());
  be_.zero(v_.get(), v_.bytes());
}

void AdamW::step(GPT& model, int t, float lr, float grad_scale, const OptimConfig& c, bool skip_muon) {
  XT_CHECK(model.num_params() == count(), "AdamW state for " << count() << " parameters, model of "
                                                             << model.num_params());
  // One span per tensor (weight decay differs by tensor), all updated by one backend call.
  std::vector<ParamSpan> spans;
  spans.reserve(model.layout().size());
  for (const ParamTensor& p : model.layout())
    if (!(skip_muon && p.spec && p.spec->muon)) spans.push_back({p.offset, p.count, p.decay});
  be_.adamw_update(model.params(), model.grads(), m_.get(), v_.get(), spans, lr, c.beta1, c.beta2, c.eps,
                   c.weight_decay, grad_scale, t);
}

std::vector<MuonMatrix> muon_matrices(const GPT& model) {
  const GPTConfig& cfg = model.config();
  std::vector<MuonMatrix> out;
  for (const ParamTensor& p : model.layout()) {
    if (!p.spec || !p.spec->muon || p.count == 0) continue;
    const int rows = p.shape[0], cols = p.shape[1];
    // the parts of a fused tensor where they make up its rows in this family (gpt2's fc has no gate)
    std::vector<int> parts;
    int sum = 0;
    for (int i = 0; i < p.spec->hf_llama_parts.count; ++i) {
      parts.push_back(param_dim(cfg, p.spec->hf_llama_parts.part[i].rows));
      sum += parts.back();
    }
    if (parts.empty() || sum != rows) parts = {rows};
    size_t off = p.offset;
    for (int r : parts) {
      out.push_back({off, r, cols});
      off += size_t(r) * cols;
    }
  }
  return out;
}

namespace {
size_t total_count(const std::vector<MuonMatrix>& mats) {
  size_t n = 0;
  for (const MuonMatrix& m : mats) n += m.count();
  return n;
}
}  // namespace

Muon::Muon(Backend& be, Communicator& comm, const GPT& model, const MuonConfig& c)
    : be_(be), comm_(comm), c_(c), mats_(muon_matrices(model)) {
  const size_t n = total_count(mats_);
  momentum_ = DeviceBuffer<float>(be, n);
  update_ = DeviceBuffer<float>(be, n);
  be_.zero(momentum_.get(), momentum_.bytes());
  // groups by shape, in order of first appearance; each group's matrices in buffer order
  std::map<std::pair<int, int>, size_t> index;
  for (size_t i = 0; i < mats_.size(); ++i) {
    const auto key = std::make_pair(mats_[i].rows, mats_[i].cols);
    auto [it, fresh] = index.emplace(key, groups_.size());
    if (fresh) groups_.push_back({key.first, key.second, 0, {}, 0, 0});
    groups_[it->second].mats.push_back(i);
  }
  const int world = comm.world_size(), rank = comm.rank();
  mom_at_.resize(mats_.size());
  upd_at_.resize(mats_.size());
  size_t at = 0;
  for (size_t i = 0; i < mats_.size(); ++i) mom_at_[i] = i ? mom_at_[i - 1] + mats_[i - 1].count() : 0;
  for (Group& g : groups_) {
    g.at = at;
    for (size_t i : g.mats) upd_at_[i] = at, at += mats_[i].count();
    const int k = static_cast<int>(g.mats.size());  // rank r's contiguous share of the group
    g.mine_begin = static_cast<int>(static_cast<long long>(k) * rank / world);
    g.mine_end = static_cast<int>(static_cast<long long>(k) * (rank + 1) / world);
  }
  for (size_t i = 0; i < mats_.size(); ++i)
    spans_.push_back({mats_[i].offset, mom_at_[i], upd_at_[i], mats_[i].count(),
                      muon_lr_ratio(c_.adjust, mats_[i].rows, mats_[i].cols)});
}

void Muon::step(GPT& model, float lr, float grad_scale) {
  const bool shared = comm_.world_size() > 1;
  be_.muon_momentum(momentum_.get(), update_.get(), model.grads(), spans_, c_.momentum, true, grad_scale);
  for (const Group& g : groups_) {
    const size_t per = size_t(g.rows) * g.cols;
    const size_t mine = g.at + per * g.mine_begin, mine_end = g.at + per * g.mine_end, end = g.at + per * g.mats.size();
    if (shared) {  // zero the others' matrices: the all-reduce adds their results in
      be_.zero(update_.get() + g.at, (mine - g.at) * sizeof(float));
      be_.zero(update_.get() + mine_end, (end - mine_end) * sizeof(float));
    }
    be_.newton_schulz(update_.get() + mine, g.mine_end - g.mine_begin, g.rows, g.cols, c_.ns_steps, kMuonEps);
  }
  if (shared) comm_.all_reduce(update_.get(), update_.count(), ReduceOp::sum);
  const float decay = static_cast<float>(1.0 - static_cast<double>(lr) * c_.weight_decay);  // torch: in Python floats
  be_.muon_apply(model.params(), update_.get(), spans_, decay, lr);  // each matrix at muon_adjusted_lr
}

Optimizer::Optimizer(Backend& be, Communicator& comm, const GPT& model, const OptimConfig& c)
    : adamw_(be, model.num_params()) {
  if (c.kind == OptimizerKind::muon) muon_ = std::make_unique<Muon>(be, comm, model, c.muon);
}

void Optimizer::step(GPT& model, int t, float grad_scale, const OptimConfig& c) {
  adamw_.step(model, t, lr_at(c, t), grad_scale, c, muon_ != nullptr);
  if (muon_) muon_->step(model, lr_at(c, t, c.muon.lr), grad_scale);
}

std::vector<MemoryEntry> Optimizer::memory_entries() const {
  std::vector<MemoryEntry> e = adamw_.memory_entries();
  if (muon_)
    for (MemoryEntry& m : muon_->memory_entries()) e.push_back(std::move(m));
  return e;
}

}  // namespace xtrain
