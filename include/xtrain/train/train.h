// The data-parallel training run, identical on every rank (train_rank); the step itself is in step.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>
#include <xtrain/model/model.h>
#include <xtrain/train/batches.h>
#include <xtrain/train/config.h>
#include <xtrain/train/optim.h>

namespace xtrain {

// EvalFigure: one held-out set's figures at a validation step, the same on every rank and at any world
// size: an --eval set's loss (nats per token; mc false), or an --eval-mc set's items and accuracies
// (McResult, score/multiple_choice.h).
struct EvalFigure {
  std::string name;
  bool mc = false;
  double loss = 0;
  size_t items = 0;
  double acc = 0, acc_norm = 0, acc_token_mean = 0, right_logprob = 0;
};

struct TrainResult {
  int first_step = 0, last_step = 0;
  std::vector<double> losses;  // global mean train loss per step run
  double max_param_diff = 0;   // max |p_rank_i - p_rank_0| over all parameters at the end
  double tok_per_s = 0;        // global tokens per second over the steps after the first
  std::optional<double> val_loss;  // the last validation loss of this run, at val_step
  int val_step = 0;
  std::vector<EvalFigure> evals;  // the last evaluation of data.evals (at val_step), in their order
  uint64_t ckpt_xxh3 = 0;      // rank 0: XXH3-64 of the last checkpoint written (0 = none, other ranks)
  bool stopped = false;        // a stop signal ended the run early, after last_step (stop_signal.h)
};

// StepReport: one finished optimizer step, as train_rank's step callback sees it. Every figure but step_ms
// is all-reduced, so every rank gets the same report.
struct StepReport {
  int step = 0;        // the step just finished (from 1)
  int last_step = 0;   // the run's last step as known now (a stop signal makes it `step`)
  double loss = 0;     // global mean train loss of the step, nats per token
  double grad_norm = 0;  // global L2 norm of the averaged gradients, before clipping
  float lr = 0;        // the step's learning rate (lr_at, optim.h)
  double step_ms = 0;  // this rank's wall time of the step, milliseconds (not all-reduced)
  std::optional<double> val_loss;  // the validation loss, when the run validated at this step
};
// StepCallback: called by train_rank on every rank after each step, once the step's checkpoint is written
// and its validation done (so a callback may read the checkpoint file). It runs between the step's
// collectives and the next step's, on the training thread: it must not use the communicator, and its
// time adds to the run's. An exception it throws ends the run as a failing step does (Error "step N:
// <message>"); decide from the report (the same on every rank) so that every rank throws, else the others
// wait for it in the next step until --comm-timeout.
using StepCallback = std::function<void(const StepReport&)>;

// train_rank: the training loop every rank runs. Each step one counter-based RNG keyed by
// (seed, step) draws the whole global batch of B sequence offsets; rank r computes sequences
// i % world == r, in grad_accum micro-steps; loss is the mean over the global batch; gradients are
// averaged over the flat buffer, in --bucket-mb buckets started during the last micro-step's backward
// (grad_buckets.h) or, with --bucket-mb 0, ONE all-reduce after it; then clipping and AdamW. Rank 0 prints and
// writes metrics and checkpoints: per step the step line (every --log-every steps) and a `train`
// record, with MFU (mfu.h) and device memory where known; a first step of more than a few seconds and
// twice the second is named as warm-up; at the end the run summary (run_summary.h) as lines and the
// `final` record. At every --val-every step and the last, besides the validation loss, each set of
// data.evals is scored (score/: held_out_loss over min(--val-seqs, its windows) windows of --seq tokens,
// score_mc; in forwards of --eval-batch sequences, split across ranks) into the validation line and an
// `eval` record per set.
// on_step (may be empty): the step callback above, e.g. an embedding program's own log or early look at
// the loss (examples/train_callback.cpp); nothing else depends on it.
// Throws AgreedFailure (after printing) on a non-finite loss.
// Depends only on the Communicator (never on how the ranks were started): every collective, the
// agreement checks included, is bounded by its --comm-timeout deadline.
TrainResult train_rank(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
                       const StepCallback& on_step = {});

// max_param_diff: max over all parameters and ranks of |p_rank - p_rank0| (rank 0's parameters broadcast in
// pieces of 64 MB, then one max).
double max_param_diff(GPT& model, Backend& be, HostCollectives& group);

// check_same_on_all_ranks: throws Error naming `what` when the 64-bit value differs across ranks.
void check_same_on_all_ranks(HostCollectives& group, uint64_t value, const std::string& what);

}  // namespace xtrain
