// train_rank: the data-parallel training loop (see src/train/train.h).
#include "train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/agree.h"
#include "core/error.h"
#include "core/io.h"
#include "core/log.h"
#include "core/stop_signal.h"
#include "metrics.h"
#include "train/checkpoint.h"
#include "train/grad_buckets.h"
#include "train/mfu.h"
#include "train/run_summary.h"
#include "train/timeline.h"

namespace xtrain {

namespace {
// params_hash: XXH3-64 of the parameter bytes (for the across-rank identity check).
uint64_t params_hash(GPT& model, Backend& be) {
  std::vector<float> host(model.num_params());
  be.copy_to_host(host.data(), model.params(), host.size() * sizeof(float));
  return xxh3_64(host.data(), host.size() * sizeof(float));
}

// A first step longer than this, and more than twice the second, is named as warm-up on rank 0 after
// the second step (device memory allocation, library handles and heuristics, kernel loading): the
// user sees why it was slow and that it is not the pace. A CPU step that is simply slow is not named.
constexpr double kWarmupNoteSeconds = 3.0;
// --timeline records this many steps after the first of the run (which carries the warm-up costs).
constexpr int kTimelineSteps = 3;
}  // namespace

void check_same_on_all_ranks(HostCollectives& group, uint64_t value, const std::string& what) {
  if (group.all_reduce_min_host(value) != group.all_reduce_max_host(value))
    XT_FAIL(what << " differs across ranks (rank " << group.rank() << " on " << group.host() << " has "
                 << std::hex << value << ")");
}

double max_param_diff(GPT& model, Backend& be, HostCollectives& group) {
  // In pieces of 16M parameters (64 MB): each broadcast is short and every rank's work between two is
  // the same, so the deadline never covers a whole large model's copy; two pieces of host memory.
  const size_t n = model.num_params(), piece = size_t{16} << 20;
  std::vector<float> mine(std::min(n, piece)), root(mine.size());
  double m = 0;
  for (size_t off = 0; off < n; off += piece) {
    const size_t k = std::min(piece, n - off);
    be.copy_to_host(mine.data(), model.params() + off, k * sizeof(float));
    std::copy_n(mine.begin(), k, root.begin());
    group.broadcast_host(root.data(), k * sizeof(float), 0);
    for (size_t i = 0; i < k; ++i) m = std::max(m, std::fabs(static_cast<double>(mine[i]) - root[i]));
  }
  group.all_reduce_max_host(&m, 1);
  return m;
}

TrainResult train_rank(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm) {
  const auto t_start = std::chrono::steady_clock::now();
  const int world = comm.world_size(), rank = comm.rank();
  const int T = cfg.seq, K = cfg.grad_accum;
  const int micro_global = cfg.batch / K;       // sequences per micro-step, all ranks
  const int micro_local = micro_global / world; // sequences per micro-step on this rank
  const size_t n = model.num_params();
  AdamW opt(be, n);
  OptimConfig oc = cfg.optim;
  oc.total_steps = cfg.steps;

  int start = 0;
  // Input checks agreed across ranks before the first training collective (agree.h).
  if (!cfg.resume.empty()) agree(comm, [&] { start = restore_checkpoint(cfg, data, model, opt, be, comm); });
  const uint64_t h = params_hash(model, be);
  agree(comm, [&] { check_same_on_all_ranks(comm, h, "initial parameters"); });

  MetricsWriter metrics(rank == 0 ? cfg.metrics : std::string(), start);
  TrainResult res;
  res.first_step = start + 1;
  res.last_step = start;  // a run with no step left (resumed at --steps) ends where it started
  Batch batch;
  DropoutKeys drop;
  drop.p = cfg.dropout;
  const float dloss = 1.0f / (static_cast<float>(cfg.batch / world) * T);  // local mean; avg across ranks
  double timed_s = 0;
  long timed_tokens = 0;
  // MFU (mfu.h): against the peak of the precision this run computes in; none on CPUs and unknown GPUs.
  const double fpt = flops_per_token(model.config(), T);
  const std::optional<GpuId> gpu = be.gpu_id();
  const double peak = gpu ? peak_flops(*gpu, to_string(be.dtype())).value_or(0.0) : 0.0;  // FLOP/s; 0 = unknown
  const auto mfu_at = [&](double tok_per_s) {
    return peak > 0 ? std::optional<double>(mfu(tok_per_s, fpt, peak, world)) : std::nullopt;
  };
  std::string ckpt_written;  // rank 0: the last checkpoint this run wrote
  double first_ms = 0;       // rank 0: the first step's time (warm-up note)

  int end = cfg.stop_after > 0 ? std::min(cfg.steps, start + cfg.stop_after) : cfg.steps;
  install_stop_signals();  // from here on SIGTERM/SIGINT/SIGUSR1 end the run after a step (stop_signal.h)
  // --bucket-mb > 0: the gradient all-reduce runs in buckets started during the last micro-step's
  // backward pass (grad_buckets.h); the result is the single all-reduce's, bitwise (comm.h).
  // At world 1 the average over one rank is the gradient itself (x * 1/1 == x bitwise): no collective
  // runs at all (NCCL would still copy and scale every gradient, ~1% of a GPT-2 124M step on one H200).
  const bool reduce_grads = world > 1;
  std::optional<BucketedAllReduce> buckets;
  if (cfg.bucket_mb > 0 && reduce_grads) {
    // at least 1 byte: a --bucket-mb below a byte asks for the smallest buckets (one tensor each), not for 0
    // (plan_grad_buckets' one bucket)
    const size_t bucket_bytes = std::max<size_t>(1, static_cast<size_t>(cfg.bucket_mb * 1024 * 1024));
    const std::vector<GradBucket> plan = plan_grad_buckets(model.layout(), bucket_bytes);
    size_t largest = 0;
    for (const GradBucket& b : plan) largest = std::max(largest, b.count);
    const double largest_mib = static_cast<double>(largest) * sizeof(float) / (1024.0 * 1024.0);
    buckets.emplace(comm, plan);
    if (rank == 0 && buckets->num_buckets() == 1)
      std::printf("gradient all-reduce: 1 bucket (all %.1f MiB of gradients; --bucket-mb %g): it starts when the "
                  "backward pass ends, no overlap\n", largest_mib, cfg.bucket_mb);
    else if (rank == 0)
      std::printf("gradient all-reduce: %zu buckets of up to %.1f MiB (--bucket-mb %g), overlapped with the backward "
                  "pass\n", buckets->num_buckets(), largest_mib, cfg.bucket_mb);
  }
  if (rank == 0 && reduce_grads && !buckets)
    std::printf("gradient all-reduce: one all-reduce after the backward pass (--bucket-mb 0)\n");
  // --timeline: rank 0 records steps first+1 .. first+kTimelineSteps (the first alone in a 1-step run).
  std::unique_ptr<TimelineClock> compute_clock;  // marks on the backend's compute stream
  std::optional<StepTimeline> timeline;
  if (rank == 0 && !cfg.timeline.empty()) {
    compute_clock = be.make_timeline_clock();
    timeline.emplace(model.layout(), *compute_clock);
  }
  StepTimeline* tl = timeline ? &*timeline : nullptr;
  struct TraceOff {  // the communicator forgets the recorder when it goes, on every path out
    Communicator& comm;
    ~TraceOff() { comm.set_trace(nullptr); }
  } trace_off{comm};
  comm.set_trace(tl);
  const int timeline_first = end > res.first_step ? res.first_step + 1 : res.first_step;
  // --cuda-graph (TrainConfig::cuda_graph): from the second step on, zero_grads + forward + backward
  // are recorded once as a graph (Backend::capture_graph; CUDA only) and launched as one; the batch is
  // copied in before each launch and the loss read after it. Only where the step is that device work and
  // nothing else: one micro-step, no dropout (its keys are host data per step), no timeline (marks per
  // phase), and one rank unless --cuda-graph on and the communicator records its collectives (NCCL): then
  // the bucketed gradient all-reduce is recorded too (its buckets started from the backward's hooks and
  // joined at its end; with --bucket-mb 0 one bucket started when the backward ends, as the single
  // all-reduce), every rank must have recorded (else all launch kernels), and after each launch the host
  // waits for the buckets under --comm-timeout. The same kernels and collectives on the same buffers:
  // the same bits as launching them one by one (tests/test_cuda_graph.sh). Recorded again if the model's
  // buffers are reallocated; if recording fails the run goes on launching kernels, saying so once.
  using CudaGraph = TrainConfig::CudaGraph;
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
  if (graph_wanted && reduce_grads && !buckets)  // --bucket-mb 0: one bucket, started when the backward ends
    buckets.emplace(comm, plan_grad_buckets(model.layout(), 0));
  std::unique_ptr<StepGraph> graph;
  uint64_t graph_generation = 0;
  bool graph_unavailable = false;
  int step = start;
  try {  // a failure inside a step (e.g. a collective that timed out) names the step
    for (step = start + 1; step <= end; ++step) {
      auto t0 = std::chrono::steady_clock::now();
      if (tl && step >= timeline_first && step < timeline_first + kTimelineSteps) tl->begin(step);
      double loss_sum = 0;
      if (graph_wanted && !graph_unavailable && step > res.first_step) {
        fill_batch(data, cfg, step, 0, rank, world, &batch);
        model.set_batch(batch.tokens.data(), batch.targets.data(), micro_local, T);
        if (!graph || graph_generation != model.buffers_generation()) {
          graph.reset();
          try {
            graph = be.capture_graph([&] {
              model.zero_grads();
              model.forward_pass(micro_local, T, true, dloss, nullptr);
              if (!buckets) {
                model.backward();
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
              model.backward();
              buckets->join();
              undo.done = true;
            });
            graph_generation = model.buffers_generation();
          } catch (const Error& e) {
            if (comm.failed()) throw;  // a collective failed while recording: the job ends, as when launched
            if (rank == 0)
              std::printf("cuda graph: recording the step failed (%s); every kernel is launched instead\n", e.what());
          }
          if (world > 1) {  // all ranks launch graphs or none: the lowest rank whose recording failed, if any
            const uint64_t failed = comm.all_reduce_min_host(graph ? UINT64_MAX : static_cast<uint64_t>(rank));
            if (failed != UINT64_MAX && graph) {
              graph.reset();
              if (rank == 0)
                std::printf("cuda graph: recording the step failed on rank %llu; every kernel is launched instead\n",
                            static_cast<unsigned long long>(failed));
            }
          }
          graph_unavailable = graph == nullptr;  // the CPU backend records nothing, silently
          if (graph && rank == 0)
            std::printf("cuda graph: step %d's forward and backward%s recorded; launched as one graph from now on\n",
                        step, buckets ? " with the gradient all-reduce" : "");
        }
      }
      if (graph) {
        graph->launch();
        if (buckets) buckets->wait();  // this launch's gradient buckets, under --comm-timeout
        loss_sum = model.loss_sum(micro_local, T);  // the launch ran the recorded forward's shape
      } else {
        model.zero_grads();
        for (int k = 0; k < K; ++k) {
          fill_batch(data, cfg, step, k, rank, world, &batch);
          drop.seq_keys.swap(batch.dropout_keys);
          loss_sum += model.forward(batch.tokens.data(), batch.targets.data(), micro_local, T, true, dloss, &drop);
          if (tl) tl->phase("forward");
          const bool reduce = buckets && k == K - 1;  // only the last micro-step's gradients are final
          if (reduce) buckets->begin(model.grads(), n, ReduceOp::avg);
          if (reduce || (tl && tl->recording()))
            model.set_grad_ready_hook([&, reduce](size_t offset) {
              if (tl) tl->grads_ready(offset);  // this block's backward has ended
              if (reduce) buckets->ready(offset);
            });
          model.backward();
          model.set_grad_ready_hook(nullptr);
        }
        if (buckets) {
          buckets->finish();  // clipping and AdamW read every bucket's result
        } else if (reduce_grads) {
          const size_t c0 = tl ? tl->mark() : 0;
          comm.all_reduce(model.grads(), n, ReduceOp::avg);  // the one gradient collective per step
          if (tl) tl->collective("all-reduce of the gradients", tl->clock(), c0, tl->mark());
        }
      }
      if (tl && reduce_grads) tl->phase("wait for the gradient all-reduce");
      // The stop flag rides on the loss all-reduce: every rank learns of a signal on any rank and
      // ends after this same step (it becomes the last: logged, validated, checkpointed).
      double sums[2] = {loss_sum, stop_signal_received() ? 1.0 : 0.0};
      comm.all_reduce_sum_host(sums, 2);
      if (sums[1] > 0 && step < end) end = step, res.stopped = true;
      const double loss = sums[0] / (static_cast<double>(cfg.batch) * T);
      const double grad_norm = std::sqrt(be.sum_squares(model.grads(), n));
      if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
        if (rank == 0) {
          std::ostringstream os;
          os << "non-finite " << (std::isfinite(loss) ? "gradient norm" : "loss") << " ("
             << (std::isfinite(loss) ? grad_norm : loss) << ") at step " << step << "; stopping"
             << (cfg.ckpt.empty()                                   ? ""
                 : !ckpt_written.empty() || cfg.resume == cfg.ckpt ? "; the last good checkpoint " + cfg.ckpt + " is kept"
                                                                    : "; no checkpoint was written");
          print_rank_line(0, comm.host(), os.str());
        }
        throw AgreedFailure(1);
      }
      const float lr = lr_at(oc, step);
      opt.step(model, step, lr, clip_scale(oc, grad_norm), oc);
      be.synchronize();
      if (tl) tl->phase("loss all-reduce, gradient norm, AdamW");
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (tl) tl->end();  // reads the step's marks (CUDA: waits for their events), outside the step's time
      const double tok_per_s = static_cast<double>(cfg.batch) * T / (ms / 1000.0);
      if (step > res.first_step || end == res.first_step) {  // the first step includes warm-up costs
        timed_s += ms / 1000.0;
        timed_tokens += static_cast<long>(cfg.batch) * T;
      }
      res.losses.push_back(loss);
      res.last_step = step;
      if (rank == 0) {
        StepStats st;
        st.step = step, st.steps = cfg.steps, st.loss = loss, st.lr = lr, st.grad_norm = grad_norm, st.ms = ms;
        st.tok_per_s = tok_per_s;
        st.eta_s = (timed_s > 0 ? timed_s / std::max(1, step - res.first_step) : ms / 1000.0) * (end - step);
        st.mfu = mfu_at(tok_per_s);
        st.mem_in_use_bytes = be.memory_in_use_bytes();
        st.peak_memory_bytes = be.peak_memory_bytes();
        if (step % cfg.log_every == 0 || step == end || step == res.first_step) print_step(st);
        if (step == res.first_step) first_ms = ms;
        if (step == res.first_step + 1 && first_ms / 1000.0 > kWarmupNoteSeconds && first_ms > 2 * ms)
          std::printf("step %5d/%d | warm-up: step %d took %.1f s, step %d %.1f s (one-time costs of the first step: "
                      "memory allocation, library set-up, kernel loading)\n",
                      step, cfg.steps, res.first_step, first_ms / 1000.0, step, ms / 1000.0);
        metrics.write(train_record(st));
      }
      if (cfg.val_every > 0 && cfg.val_fraction > 0 && (step % cfg.val_every == 0 || step == end)) {
        const double vl = validation_loss(cfg, data, model, comm, micro_local);
        res.val_loss = vl, res.val_step = step;
        if (rank == 0) {
          std::printf("step %5d/%d | val loss %.4f\n", step, cfg.steps, vl);
          metrics.write({{"type", "val"}, {"step", step}, {"val_loss", vl}});
        }
      }
      const bool last = step == end;
      if (!cfg.ckpt.empty() && (last || (cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0))) {
        res.ckpt_xxh3 = write_checkpoint(cfg, data, model, opt, be, comm, step);
        if (rank == 0) ckpt_written = cfg.ckpt;
      }
    }
  } catch (const AgreedFailure&) {
    throw;
  } catch (const Error& e) {
    XT_FAIL("step " << step << ": " << e.what());
  }
  if (tl) write_file_atomic(cfg.timeline, chrome_trace_json(tl->events(), rank), "cannot write --timeline");
  res.tok_per_s = timed_s > 0 ? timed_tokens / timed_s : 0;
  res.max_param_diff = max_param_diff(model, be, comm);
  if (rank == 0) {
    RunSummary s;
    s.first_step = res.first_step, s.last_step = res.last_step, s.world_size = world, s.params = n;
    s.tokens_per_step = static_cast<uint64_t>(cfg.batch) * T;
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    s.tok_per_s = res.tok_per_s;
    if (res.tok_per_s > 0) s.mfu = mfu_at(res.tok_per_s);
    if (!res.losses.empty()) s.train_loss = res.losses.back();
    s.val_loss = res.val_loss, s.val_step = res.val_step;
    s.peak_memory_bytes = be.peak_memory_bytes();
    s.max_param_diff = res.max_param_diff;
    s.ckpt = ckpt_written, s.ckpt_xxh3 = ckpt_written.empty() ? 0 : res.ckpt_xxh3;
    if (tl) {
      s.timeline = cfg.timeline;
      s.timeline_first = timeline_first;
      s.timeline_last = std::min(timeline_first + kTimelineSteps - 1, res.last_step);
    }
    metrics.write(final_record(s));
    for (const std::string& line : summary_lines(s)) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  return res;
}

}  // namespace xtrain
