// Optimizer pieces of the training step: learning-rate schedules (linear warmup, then cosine decay as in
// GPT-3/nanoGPT (Loshchilov & Hutter 2017, SGDR without restarts), warmup-stable-decay (Hu et al. 2024,
// MiniCPM) or linear decay), global-norm gradient clipping (Pascanu et al. 2013), AdamW over the
// flat buffers, and Muon (Jordan et al. 2024, as PyTorch's torch.optim.Muon) for the blocks' matrices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>
#include <xtrain/model/model.h>

namespace xtrain {

// --optimizer: adamw updates every tensor; muon updates the tensors of the parameter table's `muon`
// column (the blocks' matrices) with Muon and the others with AdamW. --lr-schedule: see lr_at.
// --muon-adjust: torch.optim.Muon's adjust_lr_fn.
enum class OptimizerKind : int32_t { adamw = 0, muon = 1 };
enum class LrSchedule : int32_t { cosine = 0, wsd = 1, linear = 2 };
enum class MuonAdjust : int32_t { original = 0, match_rms_adamw = 1 };
// parse_* take the option's words ("adamw" | "muon", "cosine" | "wsd" | "linear", "original" |
// "match_rms_adamw") and throw UsageError naming the option and the value otherwise; to_string gives them back.
OptimizerKind parse_optimizer(const std::string& s);
LrSchedule parse_lr_schedule(const std::string& s);
MuonAdjust parse_muon_adjust(const std::string& s);
const char* to_string(OptimizerKind k);
const char* to_string(LrSchedule s);
const char* to_string(MuonAdjust a);

// MuonConfig: torch.optim.Muon's arguments (nesterov is always on, ns_coefficients kMuonNsCoefficients,
// eps kMuonEps). lr: the peak; the schedule scales it as it scales --lr.
struct MuonConfig {
  float lr = 0.02f;            // Keller Jordan's Muon (torch's default 1e-3 is for match_rms_adamw-like scales)
  float momentum = 0.95f;      // torch's default
  float weight_decay = 0.0f;   // decoupled: param *= 1 - lr * weight_decay
  int ns_steps = 5;            // torch's DEFAULT_NS_STEPS
  MuonAdjust adjust = MuonAdjust::original;
};

struct OptimConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;           // peak learning rate (AdamW's)
  float min_lr_frac = 0.1f;   // the schedule decays to lr * min_lr_frac at the last step
  int warmup_steps = 20;      // linear warmup over steps 1..warmup_steps
  int total_steps = 200;      // schedule length
  LrSchedule schedule = LrSchedule::cosine;
  float decay_frac = 0.2f;    // wsd: the decay's share of the run (wsd_decay_start)
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // GPT-3 paper, appendix B
  float weight_decay = 0.1f;  // AdamW's, decoupled, 2-D weights only
  float grad_clip = 1.0f;     // global L2 norm; 0 disables
  MuonConfig muon;            // with kind muon
};

// wsd_decay_start: the last step of a wsd schedule's stable phase: S - round(decay_frac * S), at least
// the warmup's end (S = total_steps).
int wsd_decay_start(int total_steps, int warmup_steps, float decay_frac);
// wsd_replans: whether a run resumed at `step` from a schedule of total_steps, extended to new_total >
// total_steps, plans its schedule again over new_total: a wsd run still in its stable phase (step <=
// wsd_decay_start) continues it and decays over the new run's last steps. Otherwise (cosine, linear, a
// wsd run already decaying) the schedule keeps its length and later steps run at its final learning rate.
bool wsd_replans(LrSchedule s, int step, int total_steps, int warmup_steps, float decay_frac, int new_total);

// lr_at: learning rate for optimizer step `step` (1-based) of a schedule peaking at `peak` (c.lr: AdamW's;
// c.muon.lr: Muon's), lr_min = peak * min_lr_frac, S = total_steps, W = warmup_steps:
//   step <= W: peak * step / W; then
//   cosine: lr_min + 0.5 (peak - lr_min)(1 + cos(pi (step-W)/(S-W)));
//   linear: lr_min + (peak - lr_min)(S - step)/(S - W);
//   wsd:    peak up to D = wsd_decay_start, then lr_min + (peak - lr_min)(S - step)/(S - D).
// Steps past total_steps stay at lr_min.
float lr_at(const OptimConfig& c, int step, float peak);
inline float lr_at(const OptimConfig& c, int step) { return lr_at(c, step, c.lr); }

// clip_scale: the factor applied to gradients of global norm `grad_norm`: min(1, clip / norm)
// (1 when clip is 0 or the norm is not finite; the caller stops on a non-finite norm).
float clip_scale(const OptimConfig& c, double grad_norm);

// muon_adjusted_lr: torch.optim.Muon's _adjust_lr for a (rows, cols) matrix: original: lr sqrt(max(1,
// rows/cols)); match_rms_adamw: lr 0.2 sqrt(max(rows, cols)). muon_lr_ratio: that factor, in double as
// torch computes it in Python floats; the adjusted lr is float(double(lr) * ratio) (MuonSpan::lr_ratio).
double muon_lr_ratio(MuonAdjust a, int rows, int cols);
float muon_adjusted_lr(MuonAdjust a, float lr, int rows, int cols);

// AdamW state (m, v) in the backend's memory, same layout as the parameters.
class AdamW {
 public:
  AdamW(Backend& be, size_t num_params);
  // step: one update at optimizer step t (1-based) with learning rate lr, gradients scaled by
  // grad_scale, weight decay only on tensors with ParamTensor::decay: one Backend::adamw_update over
  // the model's layout (one kernel launch on CUDA); with skip_muon, over the tensors Muon does not take
  // (ParamSpec::muon). Throws Error when this state was made for another parameter count than
  // model.num_params().
  void step(GPT& model, int t, float lr, float grad_scale, const OptimConfig& c, bool skip_muon = false);
  float* m() { return m_.get(); }
  float* v() { return v_.get(); }
  size_t count() const { return m_.count(); }
  // memory_entries: m and v for the memory report (train/memory_report.h), bytes as requested.
  std::vector<MemoryEntry> memory_entries() const {
    return {{"adamw.m", m_.bytes(), "fp32", "AdamW first moment, parameter layout", MemoryCategory::optimizer, {m_.get()}},
            {"adamw.v", v_.bytes(), "fp32", "AdamW second moment, parameter layout", MemoryCategory::optimizer, {v_.get()}}};
  }

 private:
  Backend& be_;
  DeviceBuffer<float> m_, v_;
};

// MuonMatrix: one matrix Muon orthogonalizes: rows [row0, row0 + rows) of a table tensor (a part of a
// fused one, muon_parts) at `offset` of the parameter buffer, `rows` x `cols` elements.
struct MuonMatrix {
  size_t offset = 0;  // elements into the parameter buffer
  int rows = 0, cols = 0;
  size_t count() const { return size_t(rows) * cols; }
};
// muon_matrices: the matrices of the model's Muon tensors in buffer order. A fused tensor is cut into
// its parts, each orthogonalized alone, as separate q/k/v and gate/up projections (Hugging Face's
// Llama, torch.optim.Muon given them) would be: qkv into q (A rows), k (KV), v (KV) in both families;
// llama's fc into gate (F) and up (F); gpt2's fc (F rows, no gate) is one matrix.
std::vector<MuonMatrix> muon_matrices(const GPT& model);

// Muon: the momentum buffers of muon_matrices (buffer order, concatenated: `count` floats) and the
// update scratch, grouped by shape so that each shape is one batched Newton-Schulz. On several ranks,
// rank r orthogonalizes a contiguous share of each shape's matrices and one all-reduce (sum) of the
// update scratch, zero outside each rank's share, gives every rank every update (exact: x + 0 = x), so
// parameters stay bitwise identical across ranks and the Newton-Schulz cost falls with the world size.
class Muon {
 public:
  Muon(Backend& be, Communicator& comm, const GPT& model, const MuonConfig& c);
  // step: momentum (Nesterov), Newton-Schulz and the update of every Muon matrix at scheduled learning
  // rate lr with gradients scaled by grad_scale (clipping), as torch.optim.Muon's step.
  void step(GPT& model, float lr, float grad_scale);
  float* momentum() { return momentum_.get(); }
  size_t count() const { return momentum_.count(); }
  const std::vector<MuonMatrix>& matrices() const { return mats_; }
  size_t num_shapes() const { return groups_.size(); }
  std::vector<MemoryEntry> memory_entries() const {
    return {{"muon.momentum", momentum_.bytes(), "fp32", "Muon momentum buffers, its matrices in buffer order",
             MemoryCategory::optimizer, {momentum_.get()}},
            {"muon.update", update_.bytes(), "fp32", "Muon's orthogonalized updates, grouped by shape",
             MemoryCategory::optimizer, {update_.get()}}};
  }

 private:
  struct Group {  // the matrices of one shape, contiguous in update_
    int rows = 0, cols = 0;
    size_t at = 0;             // first element in update_
    std::vector<size_t> mats;  // indices into mats_
    int mine_begin = 0, mine_end = 0;  // this rank's share [begin, end) of mats
  };
  Backend& be_;
  Communicator& comm_;
  MuonConfig c_;
  std::vector<MuonMatrix> mats_;
  std::vector<size_t> mom_at_, upd_at_;  // per matrix: its first element in momentum_ and update_
  std::vector<MuonSpan> spans_;          // per matrix: where it lies in each buffer, its lr ratio
  std::vector<Group> groups_;
  DeviceBuffer<float> momentum_, update_;
};

// Optimizer: what --optimizer asks for: AdamW over every tensor, or Muon over the blocks' matrices and
// AdamW over the rest. AdamW's state keeps the parameter layout either way (its m and v of Muon's
// tensors stay zero), so the checkpoint's m and v are one layout for both.
class Optimizer {
 public:
  Optimizer(Backend& be, Communicator& comm, const GPT& model, const OptimConfig& c);
  // step: optimizer step t (1-based) at the schedule's learning rates lr_at(c, t) (AdamW) and
  // lr_at(c, t, c.muon.lr) (Muon), gradients scaled by grad_scale.
  void step(GPT& model, int t, float grad_scale, const OptimConfig& c);
  OptimizerKind kind() const { return muon_ ? OptimizerKind::muon : OptimizerKind::adamw; }
  AdamW& adamw() { return adamw_; }
  const AdamW& adamw() const { return adamw_; }
  Muon* muon() { return muon_.get(); }
  std::vector<MemoryEntry> memory_entries() const;

 private:
  AdamW adamw_;
  std::unique_ptr<Muon> muon_;
};

}  // namespace xtrain
