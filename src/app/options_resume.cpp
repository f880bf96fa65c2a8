// --resume takes the run's options from the checkpoint (see src/app/options_resume.h).
#include "app/options_resume.h"

#include <string>

#include "core/cli.h"
#include <xtrain/core/error.h>
#include <xtrain/checkpoint/checkpoint.h>

namespace xtrain {

bool take_from_checkpoint(const std::function<bool(const char*)>& given, TrainConfig& t, ModelOptions model,
                          std::string* seed, OptimizerOptions optim) {
  if (t.resume.empty()) return true;
  CheckpointMeta c;
  try {
    c = check_checkpoint_file(t.resume);  // the header only, in milliseconds
  } catch (const Error&) {
    return false;  // missing, unreadable or damaged: run_rank's input checks name the cause
  }
  auto take = [&](const char* opt, auto& dst, auto v) {
    if (!given(opt)) dst = v;
  };
  GPTConfig& m = t.model;
  // the model family first: a llama checkpoint resumes as llama with its head, norm and rotary settings
  if (!given("arch")) model.arch = to_string(c.model.arch);
  if (!given("tie-embeddings")) model.tie = c.model.tie_embeddings ? "true" : "false";
  if (c.model.rmsnorm()) take("norm-eps", m.norm_eps, c.model.norm_eps);
  if (c.model.rotary()) take("rope-theta", m.rope_theta, c.model.rope_theta);
  take("dim", m.C, c.model.C), take("heads", m.NH, c.model.NH), take("kv-heads", model.kv_heads, c.model.KVH);
  take("head-dim", model.head_dim, c.model.HS), take("layers", m.L, c.model.L), take("ffn", model.ffn, c.model.F);
  take("seq", t.seq, c.model.maxT), take("dropout", t.dropout, c.dropout);
  take("batch", t.batch, c.batch), take("grad-accum", t.grad_accum, c.grad_accum);
  take("lr", t.optim.lr, c.lr), take("warmup", t.optim.warmup_steps, c.warmup);
  take("min-lr-frac", t.optim.min_lr_frac, c.min_lr_frac), take("weight-decay", t.optim.weight_decay, c.weight_decay);
  take("grad-clip", t.optim.grad_clip, c.grad_clip);
  if (!given("seed")) *seed = std::to_string(c.seed);
  // the optimizer and schedule (a format-03 file: AdamW, cosine, the betas and eps of then)
  OptimConfig& oc = t.optim;
  const auto kind = static_cast<OptimizerKind>(c.optimizer);
  const auto schedule = static_cast<LrSchedule>(c.lr_schedule);
  if (!given("optimizer")) optim.optimizer = to_string(kind);
  if (!given("lr-schedule")) optim.lr_schedule = to_string(schedule);
  if (schedule == LrSchedule::wsd) take("decay-frac", oc.decay_frac, c.decay_frac);
  take("beta1", oc.beta1, c.beta1), take("beta2", oc.beta2, c.beta2), take("adam-eps", oc.eps, c.adam_eps);
  if (kind == OptimizerKind::muon) {
    take("muon-lr", oc.muon.lr, c.muon_lr), take("muon-momentum", oc.muon.momentum, c.muon_momentum);
    take("muon-weight-decay", oc.muon.weight_decay, c.muon_weight_decay);
    take("muon-ns-steps", oc.muon.ns_steps, c.muon_ns_steps);
    if (!given("muon-adjust")) optim.muon_adjust = to_string(static_cast<MuonAdjust>(c.muon_adjust));
  }
  // the held-out split is part of the run: the checkpoint's, unless an option that sets it is given (a
  // --val-every change that keeps the split is then allowed; one that changes it is the resume mismatch)
  if (!given("val-fraction") && !given("val-every") && !given("val-data")) t.resume_n_train = c.n_train;
  if (!given("steps")) {
    if (c.step > c.total_steps)
      throw UsageError("--resume " + t.resume + " is at step " + std::to_string(c.step) + ", past its LR schedule of " +
                       std::to_string(c.total_steps) + " steps (an extended run): give --steps to say where it ends");
    t.steps = c.total_steps;
  }
  // A longer run than the checkpoint's schedule extends it: the schedule keeps its length, or a wsd run
  // in its stable phase plans its decay again at the new end (wsd_replans). A shorter --steps than the
  // schedule is the resume comparison's mismatch error.
  const LrSchedule now = given("lr-schedule") ? parse_lr_schedule(optim.lr_schedule) : schedule;
  if (t.steps > c.total_steps && !(now == schedule && wsd_replans(schedule, c.step, c.total_steps, c.warmup, c.decay_frac, t.steps)))
    t.schedule_steps = c.total_steps;
  return true;
}

}  // namespace xtrain
