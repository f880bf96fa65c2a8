// Optimizer pieces of the training step: learning-rate schedule (linear warmup + cosine decay,
// Loshchilov & Hutter 2017 "SGDR" without restarts, as in GPT-3/nanoGPT), global-norm gradient
// clipping (Pascanu et al. 2013) and AdamW over every tensor of the flat buffers.
#pragma once

#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/model/model.h>

namespace xtrain {

struct OptimConfig {
  float lr = 1e-3f;           // peak learning rate
  float min_lr_frac = 0.1f;   // cosine decays to lr * min_lr_frac at the last step
  int warmup_steps = 20;      // linear warmup over steps 1..warmup_steps
  int total_steps = 200;      // schedule length
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;  // GPT-3 paper, appendix B
  float weight_decay = 0.1f;  // decoupled, 2-D weights only
  float grad_clip = 1.0f;     // global L2 norm; 0 disables
};

// lr_at: learning rate for optimizer step `step` (1-based):
//   step <= W: lr * step / W;  else lr_min + 0.5 (lr - lr_min)(1 + cos(pi * (step-W)/(S-W))), lr_min = lr*f.
// Steps past total_steps stay at lr_min.
float lr_at(const OptimConfig& c, int step);

// clip_scale: the factor applied to gradients of global norm `grad_norm`: min(1, clip / norm)
// (1 when clip is 0 or the norm is not finite; the caller stops on a non-finite norm).
float clip_scale(const OptimConfig& c, double grad_norm);

// AdamW state (m, v) in the backend's memory, same layout as the parameters.
class AdamW {
 public:
  AdamW(Backend& be, size_t num_params);
  // step: one update at optimizer step t (1-based) with learning rate lr, gradients scaled by
  // grad_scale, weight decay only on tensors with ParamTensor::decay: one Backend::adamw_update over
  // the model's layout (one kernel launch on CUDA). Throws Error when this state was made for another
  // parameter count than model.num_params().
  void step(GPT& model, int t, float lr, float grad_scale, const OptimConfig& c);
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

}  // namespace xtrain
