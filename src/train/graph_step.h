// The training step recorded as a CUDA graph (--cuda-graph auto|on|off): the decision whether a run's
// step may be recorded, the recording (again when the model's buffers move), its launches, and the fallback
// to launching every kernel when recording fails. Kept apart from the step (step.h), as torchtitan keeps
// its CUDA graphs apart from its trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>
#include <xtrain/model/model.h>
#include <xtrain/train/batches.h>
#include <xtrain/train/config.h>
#include "train/grad_buckets.h"

namespace xtrain {

// cuda_graph_wanted: whether the step may run as a graph (TrainConfig::cuda_graph): the forward + the backward
// that writes the gradients (Grad::assign), recorded once and launched as one; the batch is copied in before each
// launch and the loss read after it. Only where the step is that device work and nothing else: one micro-step, no
// dropout (its keys are host data per step), no timeline (marks per phase), and one rank unless --cuda-graph on
// and the communicator records its collectives (NCCL): then the bucketed gradient all-reduce is recorded too (with
// --bucket-mb 0 one bucket, started when the backward ends, as the single all-reduce). On CUDA, rank 0 prints why
// not when --cuda-graph is not off and the answer is no.
bool cuda_graph_wanted(const TrainConfig& cfg, Backend& be, Communicator& comm);

// GraphStep: the recorded step of one rank. buckets: the gradient all-reduce to record with the step (at
// world > 1; null at world 1), batch: the step's batch buffer (shared with the kernel-by-kernel step).
// Every rank must record (else all launch kernels), and after each launch the host waits for the buckets
// under --comm-timeout. The same kernels and collectives on the same buffers: the same bits as launching
// them one by one (tests/integration/test_cuda_graph.sh).
class GraphStep {
 public:
  GraphStep(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
            BucketedAllReduce* buckets, Batch& batch);
  // run: optimizer step `step` (micro-step 0 only, micro_local sequences of cfg.seq tokens, loss scale
  // dloss) as one graph launch: fills and copies in this rank's batch, records the step first when there is
  // no graph yet or the model's buffers were reallocated, launches, waits for the gradient buckets. Returns
  // this rank's loss sum (nats), or nullopt when no graph is available (recording failed on some rank,
  // said once by rank 0, or the backend records nothing: the CPU, silently): the caller launches the
  // kernels, now and for the rest of the run. Collective at world > 1 when it records. Rethrows a
  // recording's Error when the communicator failed (the job ends, as when launched).
  std::optional<double> run(int step, int micro_local, float dloss);

 private:
  void record(int step, int micro_local, float dloss);

  const TrainConfig& cfg_;
  const TrainData& data_;
  GPT& model_;
  Backend& be_;
  Communicator& comm_;
  BucketedAllReduce* buckets_;
  Batch& batch_;
  std::unique_ptr<StepGraph> graph_;
  uint64_t graph_generation_ = 0;
  bool graph_unavailable_ = false;
};

}  // namespace xtrain
