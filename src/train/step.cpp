// The data-parallel training step (see src/train/step.h): micro-steps with gradient accumulation, the
// gradient all-reduce (bucketed or single), the loss all-reduce that carries the stop flag, clipping, the optimizer.
#include "train/step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <xtrain/core/stop_signal.h>
#include "train/graph_step.h"
#include "train/timeline.h"

namespace xtrain {

StepRunner::StepRunner(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
                       Optimizer& opt, StepTimeline* tl)
    : cfg_(cfg), data_(data), model_(model), be_(be), comm_(comm), opt_(opt), tl_(tl), oc_(cfg.optim) {
  const int world = comm.world_size(), rank = comm.rank(), T = cfg.seq;
  oc_.total_steps = cfg.schedule_length();
  micro_local_ = cfg.batch / cfg.grad_accum / world;  // sequences per micro-step on this rank
  dloss_ = 1.0f / (static_cast<float>(cfg.batch / world) * T);  // local mean; avg across ranks
  drop_.p = cfg.dropout;
  // --bucket-mb > 0: the gradient all-reduce runs in buckets started during the last micro-step's
  // backward pass (grad_buckets.h); the result is the single all-reduce's, bitwise (comm.h).
  // At world 1 the average over one rank is the gradient itself (x * 1/1 == x bitwise): no collective
  // runs at all (NCCL would still copy and scale every gradient, ~1% of a GPT-2 124M step on one H200).
  reduce_grads_ = world > 1;
  if (cfg.bucket_mb > 0 && reduce_grads_) {
    // at least 1 byte: a --bucket-mb below a byte asks for the smallest buckets (one tensor each), not for 0
    // (plan_grad_buckets' one bucket)
    const size_t bucket_bytes = std::max<size_t>(1, static_cast<size_t>(cfg.bucket_mb * 1024 * 1024));
    const std::vector<GradBucket> plan = plan_grad_buckets(model.layout(), bucket_bytes);
    size_t largest = 0;
    for (const GradBucket& b : plan) largest = std::max(largest, b.count);
    const double largest_mib = static_cast<double>(largest) * sizeof(float) / (1024.0 * 1024.0);
    buckets_.emplace(comm, plan);
    if (rank == 0 && buckets_->num_buckets() == 1)
      std::printf("gradient all-reduce: 1 bucket (all %.1f MiB of gradients; --bucket-mb %g): it starts when the "
                  "backward pass ends, no overlap\n", largest_mib, cfg.bucket_mb);
    else if (rank == 0)
      std::printf("gradient all-reduce: %zu buckets of up to %.1f MiB (--bucket-mb %g), overlapped with the backward "
                  "pass\n", buckets_->num_buckets(), largest_mib, cfg.bucket_mb);
  }
  if (rank == 0 && reduce_grads_ && !buckets_)
    std::printf("gradient all-reduce: one all-reduce after the backward pass (--bucket-mb 0)\n");
  if (rank == 0 && opt.muon()) {  // what Muon takes and how its work is split
    const Muon& mu = *opt.muon();
    std::printf("optimizer: muon on %zu matrices of %zu shapes (%.1f MiB of momentum), AdamW on the other tensors",
                mu.matrices().size(), mu.num_shapes(), mu.count() * sizeof(float) / (1024.0 * 1024.0));
    if (world > 1)
      std::printf("; each of the %d ranks orthogonalizes its share, one all-reduce shares the updates", world);
    std::printf("\n");
  }
  if (cuda_graph_wanted(cfg, be, comm)) {
    if (reduce_grads_ && !buckets_)  // --bucket-mb 0: one bucket, started when the backward ends
      buckets_.emplace(comm, plan_grad_buckets(model.layout(), 0));
    graph_ = std::make_unique<GraphStep>(cfg, data, model, be, comm, buckets_ ? &*buckets_ : nullptr, batch_);
  }
}

StepRunner::~StepRunner() = default;

StepResult StepRunner::step(int step) {
  const int T = cfg_.seq;
  const size_t n = model_.num_params();
  // From the second step on (the first carries the warm-up) the step may run as a recorded graph.
  std::optional<double> graph_loss;
  if (graph_ && steps_run_ > 0) graph_loss = graph_->run(step, micro_local_, dloss_);
  ++steps_run_;
  const double loss_sum = graph_loss ? *graph_loss : eager_step(step);
  if (tl_ && reduce_grads_) tl_->phase("wait for the gradient all-reduce");
  // The stop flag rides on the loss all-reduce: every rank learns of a signal on any rank and
  // ends after this same step (it becomes the last: logged, validated, checkpointed).
  double sums[2] = {loss_sum, stop_signal_received() ? 1.0 : 0.0};
  comm_.all_reduce_sum_host(sums, 2);
  StepResult r;
  r.stop = sums[1] > 0;
  r.loss = sums[0] / (static_cast<double>(cfg_.batch) * T);
  r.grad_norm = std::sqrt(be_.sum_squares(model_.grads(), n));
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.finite = false;
    return r;
  }
  r.lr = lr_at(oc_, step);
  opt_.step(model_, step, clip_scale(oc_, r.grad_norm), oc_);
  be_.synchronize();
  if (tl_) tl_->phase(opt_.muon() ? "loss all-reduce, gradient norm, Muon and AdamW" : "loss all-reduce, gradient norm, AdamW");
  return r;
}

double StepRunner::eager_step(int step) {
  const int world = comm_.world_size(), rank = comm_.rank(), T = cfg_.seq, K = cfg_.grad_accum;
  const size_t n = model_.num_params();
  StepTimeline* tl = tl_;
  double loss_sum = 0;
  for (int k = 0; k < K; ++k) {
    fill_batch(data_, cfg_, step, k, rank, world, &batch_);
    drop_.seq_keys.swap(batch_.dropout_keys);
    // the first micro-step writes the gradients (no memset of them first), the later ones add to them; the
    // forward writes the head's (GPT::head_and_loss), the backward the rest
    const Grad grads = k == 0 ? Grad::assign : Grad::accumulate;
    loss_sum +=
        model_.forward(batch_.tokens.data(), batch_.targets.data(), micro_local_, T, true, dloss_, &drop_, grads);
    if (tl) tl->phase("forward");
    const bool reduce = buckets_ && k == K - 1;  // only the last micro-step's gradients are final
    if (reduce) buckets_->begin(model_.grads(), n, ReduceOp::avg);
    if (reduce || (tl && tl->recording()))
      model_.set_grad_ready_hook([&, reduce](size_t offset) {
        if (tl) tl->grads_ready(offset);  // this block's backward has ended
        if (reduce) buckets_->ready(offset);
      });
    model_.backward(grads);
    model_.set_grad_ready_hook(nullptr);
  }
  if (buckets_) {
    buckets_->finish();  // clipping and the optimizer read every bucket's result
  } else if (reduce_grads_) {
    const size_t c0 = tl ? tl->mark() : 0;
    comm_.all_reduce(model_.grads(), n, ReduceOp::avg);  // the one gradient collective per step
    if (tl) tl->collective("all-reduce of the gradients", tl->clock(), c0, tl->mark());
  }
  return loss_sum;
}

}  // namespace xtrain
