// The data-parallel training step: one optimizer step of train_rank (src/train/train.cpp), written once
// and called by the loop and by the tests. It holds what a step needs between steps: the gradient
// buckets, the batch buffers, the recorded CUDA graph (graph_step.h).
#pragma once

#include <memory>
#include <optional>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>
#include <xtrain/model/model.h>
#include <xtrain/train/batches.h>
#include <xtrain/train/config.h>
#include "train/grad_buckets.h"
#include <xtrain/train/optim.h>

namespace xtrain {

class GraphStep;
class StepTimeline;

// StepResult: one optimizer step, the same on every rank (every field comes out of a collective or of
// the all-reduced gradients).
struct StepResult {
  double loss = 0;       // global mean train loss of the step: nats per token over cfg.batch * T tokens
  double grad_norm = 0;  // global L2 norm of the averaged gradients, before clipping
  float lr = 0;          // AdamW's learning rate of this step (lr_at); 0 when the step was not finite
  bool stop = false;     // a stop signal reached some rank (stop_signal.h): the run ends after this step
  bool finite = true;    // loss and grad_norm finite; when false no update was applied
};

// StepRunner: the training step of one rank. step(s) runs optimizer step s (from 1) on this rank's
// sequences of the global batch (fill_batch: cfg.batch sequences of cfg.seq tokens, split i % world ==
// rank, in cfg.grad_accum micro-steps of B_local = batch / (grad_accum * world) sequences each):
//   zero grads; per micro-step forward (dloss = 1 / (B_local_total * T), B_local_total = batch / world:
//   the local mean) and backward, gradients accumulated; the gradients averaged over ranks (--bucket-mb
//   buckets started from the last micro-step's backward, grad_buckets.h, or one all-reduce after it; none
//   at world 1); the loss sums and the stop flag summed over ranks in one host all-reduce; the global
//   gradient norm; then, when both are finite, global-norm clipping and the optimizer (--optimizer: AdamW,
//   or Muon and AdamW) at the schedule's learning rates (lr_at, optim.h), and Backend::synchronize.
// Every rank must call step with the same s, in the same order (the collectives pair up); the parameters
// stay bitwise identical across ranks since every rank applies the same update to the same gradients.
// From the runner's second step on, a step may run as one recorded CUDA graph (graph_step.h; the same
// bits). tl (rank 0's --timeline recorder, or null) receives the step's phases. Construction prints
// (rank 0) how the gradients are all-reduced and, on CUDA, why no graph is used. Throws Error from the
// backend or a collective (e.g. one that timed out).
class StepRunner {
 public:
  StepRunner(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
             Optimizer& opt, StepTimeline* tl);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  StepResult step(int step);
  // micro_local: B_local, sequences per micro-step on this rank (validation runs in chunks of it).
  int micro_local() const { return micro_local_; }

 private:
  double eager_step(int step);  // the kernels launched one by one; returns this rank's loss sum

  const TrainConfig& cfg_;
  const TrainData& data_;
  GPT& model_;
  Backend& be_;
  Communicator& comm_;
  Optimizer& opt_;
  StepTimeline* tl_;
  OptimConfig oc_;
  int micro_local_;
  float dloss_;
  bool reduce_grads_;
  std::optional<BucketedAllReduce> buckets_;
  Batch batch_;
  DropoutKeys drop_;
  std::unique_ptr<GraphStep> graph_;  // null when --cuda-graph does not apply
  int steps_run_ = 0;
};

}  // namespace xtrain
