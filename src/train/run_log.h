// What a training run reports as it goes: rank 0's step lines, warm-up note, validation lines, the
// metrics file's records and the end-of-run summary; every rank's pace (tokens per second after the
// first step), which the summary and TrainResult carry.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/model/model.h>
#include <xtrain/train/config.h>
#include <xtrain/train/train.h>
#include "train/metrics.h"
#include "train/run_summary.h"
#include "train/step.h"

namespace xtrain {

// RunLog: one per train_rank call. first_step: the run's first step (the resumed checkpoint's step + 1;
// the metrics file keeps the records up to that checkpoint's step, MetricsWriter). Prints and writes on
// rank 0 only; throws Error when the metrics file cannot be opened or written.
class RunLog {
 public:
  RunLog(const TrainConfig& cfg, GPT& model, Backend& be, int world, int rank, int first_step);

  // step: after optimizer step `step` (of a run ending at `end`) took `ms` milliseconds of wall time:
  // counts it into the pace unless it is the first of several (it carries the warm-up costs); rank 0
  // prints the step line every --log-every steps and at the first and last, names a slow first step as
  // warm-up after the second, and writes the `train` record.
  void step(int step, int end, const StepResult& r, double ms);
  // validation: rank 0 prints the validation line of `step`: the validation loss (nats per token; none when
  // nothing is held out) and each eval set's figures, and writes the `val` record and one `eval` record per
  // set: {"type": "eval", "step", "name", "loss"} or {"type": "eval", "step", "name", "items", "acc",
  // "acc_norm", "acc_token_mean", "right_logprob"}.
  void validation(int step, std::optional<double> val_loss, const std::vector<EvalFigure>& evals);
  // summary: rank 0 writes the `final` record and prints the summary lines; MFU filled in where known.
  void summary(RunSummary s);

  // tok_per_s: global tokens per second over the steps counted so far; 0 before any.
  double tok_per_s() const { return timed_s_ > 0 ? timed_tokens_ / timed_s_ : 0; }

 private:
  // mfu_at: MFU (mfu.h) against the peak of the precision this run computes in; none on CPUs and
  // unknown GPUs.
  std::optional<double> mfu_at(double tok_per_s) const;

  const TrainConfig& cfg_;
  Backend& be_;
  int world_, rank_, first_step_;
  MetricsWriter metrics_;
  double flops_per_token_, peak_;  // FLOP per token; FLOP/s, 0 = unknown
  double timed_s_ = 0;
  long timed_tokens_ = 0;
  double first_ms_ = 0;  // rank 0: the first step's time (warm-up note)
};

}  // namespace xtrain
