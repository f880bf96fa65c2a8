// train_rank: the data-parallel training loop (see src/train/train.h). It reads as the steps of a run
// (set-up; per step: step, log, validate, checkpoint; summary) and delegates each: the step to
// StepRunner (step.h), the reports to RunLog (run_log.h), the files to checkpoint.h and timeline.h.
#include <xtrain/train/train.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "comm/agree.h"
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/core/log.h>
#include <xtrain/core/stop_signal.h>
#include "train/checkpointing.h"
#include <xtrain/score/held_out.h>
#include <xtrain/score/multiple_choice.h>
#include "train/memory_report.h"
#include "train/run_log.h"
#include "train/step.h"
#include "train/timeline.h"

namespace xtrain {

namespace {
// params_hash: XXH3-64 of the parameter bytes (for the across-rank identity check).
uint64_t params_hash(GPT& model, Backend& be) {
  std::vector<float> host(model.num_params());
  be.copy_to_host(host.data(), model.params(), host.size() * sizeof(float));
  return xxh3_64(host.data(), host.size() * sizeof(float));
}

// --timeline records this many steps after the first of the run (which carries the warm-up costs).
constexpr int kTimelineSteps = 3;

// RunTimeline: --timeline. Rank 0 records steps first+1 .. first+kTimelineSteps (the first alone in a
// 1-step run) with marks on the backend's compute stream; the communicator reports its collectives to
// the recorder while this lives, and forgets it when it goes, on every path out.
class RunTimeline {
 public:
  RunTimeline(const TrainConfig& cfg, GPT& model, Backend& be, Communicator& comm, int first_step, int end)
      : comm_(comm), first_(end > first_step ? first_step + 1 : first_step) {
    if (comm.rank() == 0 && !cfg.timeline.empty()) {
      clock_ = be.make_timeline_clock();
      timeline_.emplace(model.layout(), *clock_);
    }
    comm.set_trace(recorder());
  }
  ~RunTimeline() { comm_.set_trace(nullptr); }
  RunTimeline(const RunTimeline&) = delete;
  RunTimeline& operator=(const RunTimeline&) = delete;

  StepTimeline* recorder() { return timeline_ ? &*timeline_ : nullptr; }
  void begin(int step) {
    if (timeline_ && step >= first_ && step < first_ + kTimelineSteps) timeline_->begin(step);
  }
  void end() {  // reads the step's marks (CUDA: waits for their events), outside the step's time
    if (timeline_) timeline_->end();
  }
  // write: the Chrome trace file (throws Error when it cannot be written).
  void write(const std::string& path, int rank) {
    if (timeline_) write_file_atomic(path, chrome_trace_json(timeline_->events(), rank), "cannot write --timeline");
  }
  // describe: names the trace and its steps in the summary.
  void describe(const std::string& path, int last_step, RunSummary* s) const {
    if (!timeline_) return;
    s->timeline = path;
    s->timeline_first = first_;
    s->timeline_last = std::min(first_ + kTimelineSteps - 1, last_step);
  }

 private:
  Communicator& comm_;
  int first_;                                  // the first step recorded
  std::unique_ptr<TimelineClock> clock_;       // marks on the backend's compute stream
  std::optional<StepTimeline> timeline_;
};

// fail_non_finite: rank 0 says which figure of `step` is not finite and what became of the checkpoint;
// every rank throws AgreedFailure (the figures are all-reduced: all ranks see them).
[[noreturn]] void fail_non_finite(const TrainConfig& cfg, Communicator& comm, const StepResult& r, int step,
                                  const std::string& ckpt_written) {
  set_stop_notice("", "");  // the job ends on this failure: no stop line after it (as agree)
  if (comm.rank() == 0) {
    std::ostringstream os;
    os << "non-finite " << (std::isfinite(r.loss) ? "gradient norm" : "loss") << " ("
       << (std::isfinite(r.loss) ? r.grad_norm : r.loss) << ") at step " << step << "; stopping"
       << (cfg.ckpt.empty()                                   ? ""
           : !ckpt_written.empty() || cfg.resume == cfg.ckpt ? "; the last good checkpoint " + cfg.ckpt + " is kept"
                                                              : "; no checkpoint was written");
    print_rank_line(0, comm.host(), os.str());
  }
  throw AgreedFailure(1);
}

// validation_due / checkpoint_due: every --val-every / --ckpt-every steps and at the run's last step.
// Something is held out exactly when make_train_data kept a validation part (--val-fraction > 0 or
// --val-data, with --val-every > 0).
// The eval sets (data.evals) are scored at the same steps, also when nothing is held out.
bool validation_due(const TrainConfig& cfg, const TrainData& data, int step, int end) {
  return cfg.val_every > 0 && (data.tokens.size() > data.n_train || !data.evals.empty()) &&
         (step % cfg.val_every == 0 || step == end);
}
bool checkpoint_due(const TrainConfig& cfg, int step, int end) {
  return !cfg.ckpt.empty() && (step == end || (cfg.ckpt_every > 0 && step % cfg.ckpt_every == 0));
}

// validate: the validation loss at `step` (when something is held out) and the eval sets' figures
// (collective), into res and the log.
void validate(const TrainConfig& cfg, const TrainData& data, GPT& model, Communicator& comm, int micro_local,
              int step, RunLog& log, TrainResult& res) {
  std::optional<double> vl;
  if (data.tokens.size() > data.n_train) vl = validation_loss(cfg, data, model, comm, micro_local);
  res.evals.clear();
  for (const EvalSets::Loss& s : data.evals.loss) {
    EvalFigure f;
    f.name = s.name;
    f.loss = held_out_loss(model, s.tokens, cfg.seq, cfg.val_seqs, cfg.eval_batch, &comm);
    res.evals.push_back(f);
  }
  for (const EvalSets::Mc& s : data.evals.mc) {
    // rank 0 names its share of a long file's items as it goes (every rank has about as many)
    const McResult r = score_mc(model, s.items, cfg.eval_batch, &comm,
                                comm.rank() == 0 ? mc_progress_line(s.name + " (rank 0's share)", stdout)
                                                 : std::function<void(const McProgress&)>());
    EvalFigure f;
    f.name = s.name, f.mc = true, f.items = r.items;
    f.acc = r.acc, f.acc_norm = r.acc_norm, f.acc_token_mean = r.acc_token_mean, f.right_logprob = r.right_logprob;
    res.evals.push_back(f);
  }
  if (vl) res.val_loss = vl;
  res.val_step = step;
  log.validation(step, vl, res.evals);
}

// summary_of: the run summary of `res` (rank 0's view), without MFU and timeline (RunLog, RunTimeline).
RunSummary summary_of(const TrainConfig& cfg, const TrainResult& res, GPT& model, Backend& be, int world,
                      const std::string& ckpt_written, double wall_s) {
  RunSummary s;
  s.first_step = res.first_step, s.last_step = res.last_step, s.world_size = world, s.params = model.num_params();
  s.tokens_per_step = static_cast<uint64_t>(cfg.batch) * cfg.seq;
  s.wall_s = wall_s;
  s.tok_per_s = res.tok_per_s;
  if (!res.losses.empty()) s.train_loss = res.losses.back();
  s.val_loss = res.val_loss, s.val_step = res.val_step;
  s.peak_memory_bytes = be.peak_memory_bytes();
  s.max_param_diff = res.max_param_diff;
  s.ckpt = ckpt_written, s.ckpt_xxh3 = ckpt_written.empty() ? 0 : res.ckpt_xxh3;
  return s;
}
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

namespace {

// stop_notice: the line rank 0's stop-signal handler writes at once during `step` (after "stop   | SIGINT"):
// what the run will do, and what is saved if a launcher kills the ranks before (mpirun's Ctrl-C).
std::string stop_notice(const TrainConfig& cfg, int step, int ckpt_step) {
  // the ranks agree on a stop in a step's collectives: a signal after this step's comes to the next one
  std::string s = " during step " + std::to_string(step) + ": the run ends after it (or after step " +
                  std::to_string(step + 1) + " when the signal came after this step's all-reduce)";
  if (cfg.ckpt.empty()) return s + "; nothing is saved (no --ckpt)";
  s += " and writes " + cfg.ckpt + "; no 'stopped |' line after this one means the ranks were killed first: ";
  if (ckpt_step > 0) return s + cfg.ckpt + " holds step " + std::to_string(ckpt_step);
  return s + "this run saved nothing";
}

// start_notice: the line for a stop signal between the start of train_rank (the --resume load included)
// and the first step's notice; the ranks agree on the stop in step start+1's collectives, as in a step.
std::string start_notice(const TrainConfig& cfg) {
  std::string s = " before the first step" + (cfg.resume.empty() ? std::string() : " (restoring " + cfg.resume + ")") +
                  ": the run ends after its first step";
  if (cfg.ckpt.empty()) return s + "; nothing is saved (no --ckpt)";
  s += " and writes " + cfg.ckpt + "; no 'stopped |' line after this one means the ranks were killed first: ";
  return s + cfg.ckpt + (cfg.resume == cfg.ckpt ? " is kept as it was" : " is not written by this run");
}

}  // namespace

TrainResult train_rank(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
                       const StepCallback& on_step) {
  const auto t_start = std::chrono::steady_clock::now();
  const int world = comm.world_size(), rank = comm.rank();
  Optimizer opt(be, comm, model, cfg.optim);
  int start = 0;
  // a stop signal from here to the first step (a large --resume takes seconds to read and copy): the
  // line at once, as in a step, since mpirun's Ctrl-C may kill the ranks before they reach a step
  if (rank == 0) set_stop_notice("stop   | ", start_notice(cfg));
  // Input checks agreed across ranks before the first training collective (agree.h).
  if (!cfg.resume.empty()) agree(comm, [&] { start = restore_checkpoint(cfg, data, model, opt, be, comm); });
  const uint64_t h = params_hash(model, be);
  agree(comm, [&] { check_same_on_all_ranks(comm, h, "initial parameters"); });

  TrainResult res;
  res.first_step = start + 1;
  res.last_step = start;  // a run with no step left (resumed at --steps) ends where it started
  RunLog log(cfg, model, be, world, rank, res.first_step);
  std::string ckpt_written;  // rank 0: the last checkpoint this run wrote
  int ckpt_step = cfg.resume == cfg.ckpt ? start : 0;  // the step --ckpt holds on disk, 0 unknown
  int end = cfg.stop_after > 0 ? std::min(cfg.steps, start + cfg.stop_after) : cfg.steps;
  RunTimeline timeline(cfg, model, be, comm, res.first_step, end);
  StepRunner runner(cfg, data, model, be, comm, opt, timeline.recorder());

  int step = start;
  try {  // a failure inside a step (e.g. a collective that timed out) names the step
    for (step = start + 1; step <= end; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      if (rank == 0) set_stop_notice("stop   | ", stop_notice(cfg, step, ckpt_step));
      timeline.begin(step);
      const StepResult r = runner.step(step);
      if (r.stop && step < end) end = step, res.stopped = true;  // the stop signal's step becomes the last
      if (!r.finite) fail_non_finite(cfg, comm, r, step, ckpt_written);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      timeline.end();
      res.losses.push_back(r.loss);
      res.last_step = step;
      log.step(step, end, r, ms);
      if (checkpoint_due(cfg, step, end)) {  // before validation: a stop signal's grace goes to the save
        res.ckpt_xxh3 = write_checkpoint(cfg, data, model, opt, be, comm, step);
        if (rank == 0) ckpt_written = cfg.ckpt, ckpt_step = step;
      }
      // a run stopped by a signal skips its last validation: under mpirun the ranks may be killed soon
      if (!res.stopped && validation_due(cfg, data, step, end))
        validate(cfg, data, model, comm, runner.micro_local(), step, log, res);
      if (on_step) {
        StepReport rep;
        rep.step = step, rep.last_step = end, rep.loss = r.loss, rep.grad_norm = r.grad_norm, rep.lr = r.lr, rep.step_ms = ms;
        if (res.val_step == step) rep.val_loss = res.val_loss;
        on_step(rep);
      }
    }
  } catch (const AgreedFailure&) {
    throw;
  } catch (const Error& e) {
    XT_FAIL("step " << step << ": " << e.what());
  }

  set_stop_notice("", "");  // a signal from here on no longer stops anything: the run is ending
  timeline.write(cfg.timeline, rank);
  if (cfg.memory_report && rank == 0 && res.last_step > start) {
    std::fputs(format_memory_report(memory_report(model, opt, be)).c_str(), stdout);
    std::fflush(stdout);
  }
  res.tok_per_s = log.tok_per_s();
  res.max_param_diff = max_param_diff(model, be, comm);
  if (rank == 0) {
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    RunSummary s = summary_of(cfg, res, model, be, world, ckpt_written, wall_s);
    timeline.describe(cfg.timeline, res.last_step, &s);
    log.summary(s);
  }
  return res;
}

}  // namespace xtrain
