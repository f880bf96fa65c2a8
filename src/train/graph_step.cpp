// The training step recorded as a CUDA graph (see src/train/graph_step.h). Moved out of train_rank
// unchanged: the same recording, launches and fallback.
#include "train/graph_step.h"

#include <cstdio>

#include <xtrain/core/error.h>

namespace xtrain {

bool cuda_graph_wanted(const TrainConfig& cfg, Backend& be, Communicator& comm) {
  using CudaGraph = TrainConfig::CudaGraph;
  const int world = comm.world_size(), rank = comm.rank(), K = cfg.grad_accum;
  const bool graph_ranks = world == 1 || (cfg.cuda_graph == CudaGraph::on && comm.records_collectives());
  const bool graph_wanted =
      cfg.cuda_graph != CudaGraph::off && graph_ranks && K == 1 && !(cfg.dropout > 0) && cfg.timeline.empty();
  if (rank == 0 && cfg.cuda_graph != CudaGraph::off && !graph_wanted && be.kind() == Device::cuda)  // say why not
    std::printf("cuda graph: not used (%s); every kernel is launched\n",
                !graph_ranks ? (cfg.cuda_graph == CudaGraph::on
                                    ? "several ranks on a communicator whose collectives cannot be recorded"
                                    : "several ranks: --cuda-graph on records their step too")
                : K > 1           ? "--grad-accum > 1"
                : cfg.dropout > 0 ? "--dropout > 0: its keys are host data per step"
                                  : "--timeline marks each phase");
  return graph_wanted;
}

GraphStep::GraphStep(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
                     BucketedAllReduce* buckets, Batch& batch)
    : cfg_(cfg), data_(data), model_(model), be_(be), comm_(comm), buckets_(buckets), batch_(batch) {}

std::optional<double> GraphStep::run(int step, int micro_local, float dloss) {
  if (graph_unavailable_) return std::nullopt;
  const int T = cfg_.seq;
  fill_batch(data_, cfg_, step, 0, comm_.rank(), comm_.world_size(), &batch_);
  model_.set_batch(batch_.tokens.data(), batch_.targets.data(), micro_local, T);
  // Recorded again if the model's buffers are reallocated.
  if (!graph_ || graph_generation_ != model_.buffers_generation()) record(step, micro_local, dloss);
  if (!graph_) return std::nullopt;
  graph_->launch();
  if (buckets_) buckets_->wait();  // this launch's gradient buckets, under --comm-timeout
  return model_.loss_sum(micro_local, T);  // the launch ran the recorded forward's shape
}

void GraphStep::record(int step, int micro_local, float dloss) {
  const int world = comm_.world_size(), rank = comm_.rank(), T = cfg_.seq;
  const size_t n = model_.num_params();
  GPT& model = model_;
  BucketedAllReduce* buckets = buckets_;
  graph_.reset();
  try {
    graph_ = be_.capture_graph([&] {
      model.forward_pass(micro_local, T, true, dloss, nullptr, Grad::assign);  // the head's gradient written
      if (!buckets) {
        model.backward(Grad::assign);  // one micro-step (K == 1): it writes the gradients, no memset first
        return;
      }
      struct Undo {  // a recording that throws part-way leaves no hook and no bucketed step open
        GPT& model;
        BucketedAllReduce& buckets;
        bool done = false;
        ~Undo() {
          model.set_grad_ready_hook(nullptr);
          if (!done) buckets.cancel();
        }
      } undo{model, *buckets};
      buckets->begin(model.grads(), n, ReduceOp::avg);
      model.set_grad_ready_hook([&](size_t offset) { buckets->ready(offset); });
      model.backward(Grad::assign);
      buckets->join();
      undo.done = true;
    });
    graph_generation_ = model.buffers_generation();
  } catch (const Error& e) {
    if (comm_.failed()) throw;  // a collective failed while recording: the job ends, as when launched
    if (rank == 0)
      std::printf("cuda graph: recording the step failed (%s); every kernel is launched instead\n", e.what());
  }
  if (world > 1) {  // all ranks launch graphs or none: the lowest rank whose recording failed, if any
    const uint64_t failed = comm_.all_reduce_min_host(graph_ ? UINT64_MAX : static_cast<uint64_t>(rank));
    if (failed != UINT64_MAX && graph_) {
      graph_.reset();
      if (rank == 0)
        std::printf("cuda graph: recording the step failed on rank %llu; every kernel is launched instead\n",
                    static_cast<unsigned long long>(failed));
    }
  }
  graph_unavailable_ = graph_ == nullptr;  // the CPU backend records nothing, silently
  if (graph_ && rank == 0)
    std::printf("cuda graph: step %d's forward and backward%s recorded; launched as one graph from now on\n",
                step, buckets ? " with the gradient all-reduce" : "");
}

}  // namespace xtrain
