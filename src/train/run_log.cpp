// What a training run reports as it goes (see src/train/run_log.h): the step line, the warm-up note,
// validation lines, the metrics records and the summary, with the run's pace and MFU.
#include "train/run_log.h"

#include <algorithm>
#include <cstdio>

#include <xtrain/core/stop_signal.h>
#include "train/mfu.h"

namespace xtrain {

namespace {
// A first step longer than this, and more than twice the second, is named as warm-up on rank 0 after
// the second step (device memory allocation, library handles and heuristics, kernel loading): the
// user sees why it was slow and that it is not the pace. A CPU step that is simply slow is not named.
constexpr double kWarmupNoteSeconds = 3.0;
}  // namespace

RunLog::RunLog(const TrainConfig& cfg, GPT& model, Backend& be, int world, int rank, int first_step)
    : cfg_(cfg), be_(be), world_(world), rank_(rank), first_step_(first_step),
      metrics_(rank == 0 ? cfg.metrics : std::string(), first_step - 1),
      flops_per_token_(flops_per_token(model.config(), cfg.seq)) {
  const std::optional<GpuId> gpu = be.gpu_id();
  peak_ = gpu ? peak_flops(*gpu, to_string(be.dtype())).value_or(0.0) : 0.0;
}

std::optional<double> RunLog::mfu_at(double tok_per_s) const {
  return peak_ > 0 ? std::optional<double>(mfu(tok_per_s, flops_per_token_, peak_, world_)) : std::nullopt;
}

void RunLog::step(int step, int end, const StepResult& r, double ms) {
  const int T = cfg_.seq;
  const double tok_per_s = static_cast<double>(cfg_.batch) * T / (ms / 1000.0);
  if (step > first_step_ || end == first_step_) {  // the first step includes warm-up costs
    timed_s_ += ms / 1000.0;
    timed_tokens_ += static_cast<long>(cfg_.batch) * T;
  }
  if (rank_ != 0) return;
  StepStats st;
  st.step = step, st.steps = cfg_.steps, st.loss = r.loss, st.lr = r.lr, st.grad_norm = r.grad_norm, st.ms = ms;
  st.tok_per_s = tok_per_s;
  // the ETA from the mean of the steps after the first: the first step's warm-up (allocation, library set-up,
  // kernel loading) would make it several times too long, so that line shows none
  st.eta_s = timed_s_ > 0 ? timed_s_ / std::max(1, step - first_step_) * (end - step) : -1;
  if (r.stop && step == end && end < cfg_.steps) st.eta_s = -1;  // stopped by a signal: no end to estimate
  st.mfu = mfu_at(tok_per_s);
  st.mem_in_use_bytes = be_.memory_in_use_bytes();
  st.peak_memory_bytes = be_.peak_memory_bytes();
  // once rank 0 has a stop signal its notice (stop_signal.h) stays the last line until the stopped line:
  // under mpirun the ranks may be killed before that
  const bool quiet = stop_signal_received() != 0;
  const bool stopped_here = r.stop && step == end;  // the step every rank agreed to stop after: its line ends the notice
  if ((!quiet && (step % cfg_.log_every == 0 || step == end || step == first_step_)) || stopped_here) print_step(st);
  if (step == first_step_) first_ms_ = ms;
  if (!quiet && step == first_step_ + 1 && first_ms_ / 1000.0 > kWarmupNoteSeconds && first_ms_ > 2 * ms)
    std::printf("step %5d/%d | warm-up: step %d took %.1f s, step %d %.1f s (one-time costs of the first step: "
                "memory allocation, library set-up, kernel loading)\n",
                step, cfg_.steps, first_step_, first_ms_ / 1000.0, step, ms / 1000.0);
  metrics_.write(train_record(st));
}

void RunLog::validation(int step, std::optional<double> val_loss, const std::vector<EvalFigure>& evals) {
  if (rank_ != 0) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %5d/%d", step, cfg_.steps);
  std::string line = buf;
  if (val_loss) std::snprintf(buf, sizeof buf, " | val loss %.4f", *val_loss), line += buf;
  for (const EvalFigure& e : evals) {
    if (e.mc)
      std::snprintf(buf, sizeof buf, " | %s acc %.4f acc_norm %.4f acc_token_mean %.4f", e.name.c_str(), e.acc,
                    e.acc_norm, e.acc_token_mean);
    else
      std::snprintf(buf, sizeof buf, " | %s loss %.4f", e.name.c_str(), e.loss);
    line += buf;
  }
  std::printf("%s\n", line.c_str());
  if (val_loss) metrics_.write({{"type", "val"}, {"step", step}, {"val_loss", *val_loss}});
  for (const EvalFigure& e : evals) {
    nlohmann::json r = {{"type", "eval"}, {"step", step}, {"name", e.name}};
    if (e.mc)
      r["items"] = e.items, r["acc"] = e.acc, r["acc_norm"] = e.acc_norm, r["acc_token_mean"] = e.acc_token_mean,
      r["right_logprob"] = e.right_logprob;
    else
      r["loss"] = e.loss;
    metrics_.write(r);
  }
}

void RunLog::summary(RunSummary s) {
  if (rank_ != 0) return;
  if (s.tok_per_s > 0) s.mfu = mfu_at(s.tok_per_s);
  metrics_.write(final_record(s));
  for (const std::string& line : summary_lines(s)) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace xtrain
