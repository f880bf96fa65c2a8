// LR schedule, clipping factor and AdamW over the flat parameter buffer (see src/train/optim.h).
#include <xtrain/train/optim.h>

#include <cmath>
#include <vector>

#include <xtrain/core/error.h>

namespace xtrain {

float lr_at(const OptimConfig& c, int step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.lr * static_cast<float>(step) / static_cast<float>(c.warmup_steps);
  const double lr_min = static_cast<double>(c.lr) * c.min_lr_frac;
  const int decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;  // warmup covers the whole run
  if (step >= c.total_steps) return static_cast<float>(lr_min);
  const double progress = static_cast<double>(step - c.warmup_steps) / decay_steps;
  const double pi = 3.14159265358979323846;
  return static_cast<float>(lr_min + 0.5 * (c.lr - lr_min) * (1.0 + std::cos(pi * progress)));
}

float clip_scale(const OptimConfig& c, double grad_norm) {
  if (c.grad_clip <= 0.0f || !std::isfinite(grad_norm) || grad_norm <= c.grad_clip) return 1.0f;
  return static_cast<float>(c.grad_clip / grad_norm);
}

AdamW::AdamW(Backend& be, size_t num_params) : be_(be), m_(be, num_params), v_(be, num_params) {
  be_.zero(m_.get(), m_.bytes());
  be_.zero(v_.get(), v_.bytes());
}

void AdamW::step(GPT& model, int t, float lr, float grad_scale, const OptimConfig& c) {
  XT_CHECK(model.num_params() == count(), "AdamW state for " << count() << " parameters, model of "
                                                             << model.num_params());
  // One span per tensor (weight decay differs by tensor), all updated by one backend call.
  std::vector<ParamSpan> spans;
  spans.reserve(model.layout().size());
  for (const ParamTensor& p : model.layout()) spans.push_back({p.offset, p.count, p.decay});
  be_.adamw_update(model.params(), model.grads(), m_.get(), v_.get(), spans, lr, c.beta1, c.beta2, c.eps,
                   c.weight_decay, grad_scale, t);
}

}  // namespace xtrain
