// train_rank: the data-parallel training loop (see include/xtrain/train.h).
#include "xtrain/train.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "metrics.h"
#include "xtrain/agree.h"
#include "xtrain/checkpoint.h"
#include "xtrain/error.h"
#include "xtrain/io.h"
#include "xtrain/log.h"
#include "xtrain/stop_signal.h"

namespace xtrain {

namespace {
// params_hash: XXH3-64 of the parameter bytes (for the across-rank identity check).
uint64_t params_hash(GPT& model, Backend& be) {
  std::vector<float> host(model.num_params());
  be.copy_to_host(host.data(), model.params(), host.size() * sizeof(float));
  return xxh3_64(host.data(), host.size() * sizeof(float));
}
}  // namespace

void check_same_on_all_ranks(HostCollectives& group, uint64_t value, const std::string& what) {
  if (group.all_reduce_min_host(value) != group.all_reduce_max_host(value))
    XT_FAIL(what << " differs across ranks (rank " << group.rank() << " on " << group.host() << " has "
                 << std::hex << value << ")");
}

double max_param_diff(GPT& model, Backend& be, HostCollectives& group) {
  std::vector<float> mine(model.num_params()), root(model.num_params());
  be.copy_to_host(mine.data(), model.params(), mine.size() * sizeof(float));
  root = mine;
  group.broadcast_host(root.data(), root.size() * sizeof(float), 0);
  double m = 0;
  for (size_t i = 0; i < mine.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(mine[i]) - root[i]));
  group.all_reduce_max_host(&m, 1);
  return m;
}

TrainResult train_rank(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm) {
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
  if (!cfg.resume.empty()) agree(comm, [&] { start = restore_checkpoint(cfg, data, model, opt, be, rank); });
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

  int end = cfg.stop_after > 0 ? std::min(cfg.steps, start + cfg.stop_after) : cfg.steps;
  install_stop_signals();  // from here on SIGTERM/SIGINT/SIGUSR1 end the run after a step (stop_signal.h)
  int step = start;
  try {  // a failure inside a step (e.g. a collective that timed out) names the step
    for (step = start + 1; step <= end; ++step) {
      auto t0 = std::chrono::steady_clock::now();
      model.zero_grads();
      double loss_sum = 0;
      for (int k = 0; k < K; ++k) {
        fill_batch(data, cfg, step, k, rank, world, &batch);
        drop.seq_keys.swap(batch.dropout_keys);
        loss_sum += model.forward(batch.tokens.data(), batch.targets.data(), micro_local, T, true, dloss, &drop);
        model.backward();
      }
      comm.all_reduce(model.grads(), n, ReduceOp::avg);  // the one gradient collective per step
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
             << (cfg.ckpt.empty() ? "" : "; the last good checkpoint " + cfg.ckpt + " is kept");
          print_rank_line(0, comm.host(), os.str());
        }
        throw AgreedFailure(1);
      }
      const float lr = lr_at(oc, step);
      opt.step(model, step, lr, clip_scale(oc, grad_norm), oc);
      be.synchronize();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const double tok_per_s = static_cast<double>(cfg.batch) * T / (ms / 1000.0);
      if (step > res.first_step || end == res.first_step) {  // the first step includes warm-up costs
        timed_s += ms / 1000.0;
        timed_tokens += static_cast<long>(cfg.batch) * T;
      }
      res.losses.push_back(loss);
      res.last_step = step;
      if (rank == 0) {
        const double eta = (timed_s > 0 ? timed_s / std::max(1, step - res.first_step) : ms / 1000.0) * (end - step);
        if (step % cfg.log_every == 0 || step == end || step == res.first_step)
          print_step(step, cfg.steps, loss, lr, grad_norm, ms, tok_per_s, eta);
        metrics.write({{"type", "train"}, {"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                       {"ms", ms}, {"tok_per_s", tok_per_s}});
      }
      if (cfg.val_every > 0 && cfg.val_fraction > 0 && (step % cfg.val_every == 0 || step == end)) {
        const double vl = validation_loss(cfg, data, model, comm, micro_local);
        if (rank == 0) {
          std::printf("step %5d/%d | val loss %.4f\n", step, cfg.steps, vl);
          metrics.write({{"type", "val"}, {"step", step}, {"val_loss", vl}});
        }
      }
      const bool last = step == end;
      if (!cfg.ckpt.empty() && (last || (cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0)))
        write_checkpoint(cfg, data, model, opt, be, rank, step);
    }
  } catch (const AgreedFailure&) {
    throw;
  } catch (const Error& e) {
    XT_FAIL("step " << step << ": " << e.what());
  }
  res.tok_per_s = timed_s > 0 ? timed_tokens / timed_s : 0;
  res.max_param_diff = max_param_diff(model, be, comm);
  if (rank == 0) {
    std::printf("max parameter difference across %d rank%s: %.3e\n", world, world == 1 ? "" : "s", res.max_param_diff);
    metrics.write({{"type", "final"}, {"step", res.last_step}, {"world_size", world},
                   {"max_param_diff", res.max_param_diff}, {"tok_per_s", res.tok_per_s}});
  }
  return res;
}

}  // namespace xtrain
