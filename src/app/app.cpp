// run_training: from parsed options to a finished training run (see src/app/app.h).
#include "app/app.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>

#include "app/options.h"
#include <xtrain/backend/backend.h>
#include <xtrain/backend/registry.h>
#include <xtrain/distributed/communicators.h>
#include "comm/agree.h"
#include <xtrain/comm/comm.h>
#include "comm/placement.h"
#include "core/io.h"
#include "core/lock.h"
#include <xtrain/core/log.h>
#include <xtrain/core/stop_signal.h>
#include <xtrain/data/corpus.h>
#include "data/token_cache.h"
#include <xtrain/data/tokenizer.h>
#include <xtrain/model/model.h>
#include <xtrain/score/multiple_choice.h>
#include <xtrain/serve/export.h>
#include <xtrain/checkpoint/checkpoint.h>
#include <xtrain/train/train.h>
#include "train/metrics.h"

namespace xtrain {

namespace {

void print_placement(const std::vector<Placement>& rows) {
  std::printf("%-6s %-24s %-11s %s\n", "rank", "host", "local_rank", "device");
  for (const Placement& p : rows) std::printf("%-6d %-24s %-11d %s\n", p.rank, p.host.c_str(), p.local_rank, p.device.c_str());
}

std::string human(double x) {
  char buf[32];
  if (x >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", x / 1e9);
  else if (x >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", x / 1e6);
  else if (x >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", x / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

// check_input: an input that exists but is not a regular file (a FIFO or device would block the
// open or never end; a directory cannot be read) is refused before anything opens it. A missing
// file is left to the reader, whose message names it.
void check_input(const std::string& path, const char* option) {
  if (!path.empty() && is_non_regular(path))
    XT_FAIL(option << " " << path << ": cannot read: not a regular file (a directory, FIFO or device)");
}

void check_readable_file(const std::string& path, const char* option) {
  std::error_code ec;
  // the OS's reason when there is one (a symlink loop, a name too long), "no such file" otherwise
  if (!std::filesystem::is_regular_file(path, ec))
    XT_FAIL(option << " " << path << ": " << (ec && ec != std::errc::no_such_file_or_directory ? ec.message() : "no such file"));
  if (::access(path.c_str(), R_OK) != 0) XT_FAIL(option << " " << path << ": " << std::strerror(errno));
}

// on_terminal: whether the user watches the run on a terminal: rank 0's stdout, or under mpirun
// (whose ranks write into pipes) mpirun's.
bool on_terminal(int mpirun_pid) {
  if (mpirun_pid <= 0) return ::isatty(STDOUT_FILENO) == 1;
  std::error_code ec;
  const std::string out = std::filesystem::read_symlink("/proc/" + std::to_string(mpirun_pid) + "/fd/1", ec).string();
  return !ec && (out.rfind("/dev/pts/", 0) == 0 || out.rfind("/dev/tty", 0) == 0);
}

// print_stop_hint: on a terminal, how to stop the run with its checkpoint (docs/usage.md, "Signals and
// exit codes"): Ctrl-C reaches a process of its own; under mpirun, SIGUSR1 to mpirun is forwarded
// as is, while Ctrl-C makes mpirun kill the ranks mpirun_kill_after_s later.
void print_stop_hint(const std::string& ckpt, const RankLaunch& launch) {
  if (!on_terminal(launch.mpirun_pid)) return;
  const std::string saves = ckpt.empty() ? "(nothing is saved: no --ckpt)" : "and writes " + ckpt;
  if (launch.mpirun_pid > 0)
    std::printf("stop   | kill -USR1 %d (mpirun) ends the run after the current step %s; Ctrl-C too, if that step and "
                "the write end within the %.0f s before mpirun kills the ranks\n",
                launch.mpirun_pid, saves.c_str(), launch.mpirun_kill_after_s);
  else
    std::printf("stop   | Ctrl-C ends the run after the current step %s\n", saves.c_str());
}

// lock_outputs: rank 0's exclusive lock on "<output>.lock" for each output, beside the file the path
// resolves to (every spelling of it, a symlink or a relative path included, takes the same lock), held for
// the whole run: a second job given the same --ckpt, --metrics or --timeline is refused at start-up in
// one line naming the output and the job that holds it (its pid and host), instead of both writing it
// and one losing. Taken in one order of every job (the directory's device and inode, then the name), so
// of two jobs started at once whose outputs cross (one's --ckpt the other's --metrics) one runs.
std::vector<std::unique_ptr<DirLock>> lock_outputs(const std::vector<OutputFile>& outputs) {
  struct Located {
    const OutputFile* out;
    OutputLocation loc;
    dev_t dev;
    ino_t ino;
  };
  std::vector<Located> all;
  for (const OutputFile& out : outputs) {
    OutputLocation loc = locate_output(out.path, out.opt);
    struct stat st{};
    if (::fstat(loc.dir_fd, &st) != 0) XT_FAIL(out.opt << " " << out.path << ": " << std::strerror(errno));
    all.push_back({&out, std::move(loc), st.st_dev, st.st_ino});
  }
  std::vector<size_t> order(all.size());  // (OutputLocation moves but is not assignable: sort indices)
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t i, size_t j) {
    return std::tie(all[i].dev, all[i].ino, all[i].loc.name) < std::tie(all[j].dev, all[j].ino, all[j].loc.name);
  });
  std::vector<std::unique_ptr<DirLock>> locks;
  for (size_t i : order) {
    const Located& l = all[i];
    locks.push_back(std::make_unique<DirLock>(l.loc.dir_fd, l.loc.name + ".lock", l.loc.path() + ".lock", l.out->opt + " lock",
                                              "xtrain", "another run writing this file", /*max_wait_s=*/0));
  }
  return locks;
}

}  // namespace

int run_training(const RunOptions& o, MpiContext& mpi) {
  mpi.check_launcher();  // before any collective: a mismatched launch has world 1 on every process
  mpi.set_comm_timeout(o.comm_timeout_s);  // every collective from here on is bounded
  check_options_agree(mpi, o);  // before anything else depends on an option
  check_world(o, mpi.world_size());
  const MpirunStop mpirun = mpirun_stop();
  return run_rank(o, RankLaunch{mpi, mpi.local_rank(), mpi.local_size(),
                                [&](Backend& be) { return make_communicator(mpi, be, o.comm_timeout_s); },
                                mpirun.mpirun_pid, mpirun.kill_after_s});
}

int run_rank(const RunOptions& o, const RankLaunch& launch) {
  HostCollectives& mpi = launch.group;  // the start-up collectives (the MPI world under xtrain_mpi)
  const int rank = mpi.rank(), world = mpi.world_size();
  // A stop signal before training ends the job at the next of these meetings (and during long work,
  // OnStopSignal::end_job), with exit 3 and one line, never by the signal itself.
  const char* const before = "before training started";
  end_if_stopped(mpi, before);
  // and at once a line from rank 0's handler, as during a step: mpirun's Ctrl-C may kill the ranks
  // before their next meeting (train_rank replaces it when training starts)
  if (rank == 0)
    set_stop_notice("stop   | ", std::string(" ") + before + ": the job ends at the ranks' next meeting and saves nothing" +
                                     (o.train.resume.empty() ? "" : " (" + o.train.resume + " is kept as it was)"));

  // Output and resume paths are checked before the (possibly long) data loading and training, so
  // an unwritable --ckpt or --metrics is found in seconds, not after the run.
  std::vector<std::string> data_files, val_files;
  std::vector<std::unique_ptr<DirLock>> output_locks;  // rank 0: one per output, until the run ends
  agree(mpi, [&] {
    if (rank == 0) {
      for (const OutputFile& out : run_outputs(o)) check_writable(out.path, out.opt.c_str());
      check_metrics_file(o.train.metrics);  // truncated in place: one with other hard links is refused
    }
    // the directory whatever chose it: the option, $XDG_CACHE_HOME or $HOME (token_cache_dir)
    if (!o.no_cache && !token_cache_dir(o.cache_dir).empty())
      check_cache_dir_owner(token_cache_dir(o.cache_dir), token_cache_dir_origin(o.cache_dir));
    check_input(o.train.resume, "--resume");
    if (!o.train.resume.empty()) {
      check_readable_file(o.train.resume, "--resume");
      check_checkpoint_file(o.train.resume);  // damaged or truncated: refused now, not after the corpus
    }
    data_files = list_data_files(o.data);
    if (!o.val_data.empty()) val_files = list_data_files(o.val_data, "--val-data");
    check_distinct_paths(o, data_files, val_files);
    check_jsonl_field(o, data_files, val_files);
    if (data_files.size() > 1 && !o.tokens_cache.empty())
      throw UsageError("--tokens-cache names the cache of one file; with " + std::to_string(data_files.size()) +
                       " --data files each cache is <file>.tokcache");
    // (an implicit cache path that is not a regular file is a warning of load_tokens, not an error)
    if (!o.no_cache && !o.tokens_cache.empty()) check_input(o.tokens_cache, "--tokens-cache");
    for (const auto& [opt, path] : tokenizer_inputs(o.tokenizer)) check_input(path, opt.c_str());
    // last: only once no lock file can be an input or another output (check_distinct_paths)
    if (rank == 0) output_locks = lock_outputs(run_outputs(o));
  });

  // Backend and device (may fail on one rank only, e.g. a missing GPU).
  std::unique_ptr<Backend> be;
  agree(mpi, [&] {
    BackendOptions bo;
    bo.device = o.device;
    bo.local_rank = launch.local_rank;
    bo.local_size = launch.local_size;
    bo.dtype = o.dtype;  // bf16 on the CPU backend is a usage error (make_backend)
    bo.attention = o.attention;  // likewise any route but auto
    bo.weight_copy = o.weight_copy;  // and per-use (there and with fp32: no copy to make per use)
    be = make_backend(bo);
    // --fp8 where the backend has no FP8 products: refused here, before the data is read
    if (o.train.fp8.any())
      if (const std::string why = be->fp8_unavailable(); !why.empty()) throw UsageError(why);
  });

  // Tokenizer, then the token stream: the node's ranks share tokenizing the files that lack a valid
  // cache, then every rank maps every cache (load_corpus). Long work runs under agree_while_working:
  // the waiting ranks keep meeting (at least once a second) under --comm-timeout.
  // --init-from DIR with no tokenizer option: the directory's tokenizer (model_dir_tokenizer)
  CorpusOptions corpus;
  corpus.tokens_cache = o.tokens_cache, corpus.no_cache = o.no_cache;
  corpus.cache_dir = token_cache_dir(o.cache_dir);
  // the tokenizer's derived tables are kept beside the token caches (data/tokenizer_cache.h), not with
  // --no-cache or next to the data
  // (nor in one that is not a directory: the corpus' one warning says so, "tokenizing in memory")
  const std::string tables_dir = o.no_cache || not_a_directory(corpus.cache_dir) ? "" : corpus.cache_dir;
  const std::string tables_origin = token_cache_dir_origin(o.cache_dir), log_prefix = rank_prefix(rank, mpi.host());
  const std::shared_ptr<const Tokenizer> tok = agree_while_working(mpi, [o, tables_dir, tables_origin, log_prefix] {
    TokenizerFiles files = o.tokenizer;
    files.cache_dir = tables_dir, files.cache_dir_origin = tables_origin, files.log_prefix = log_prefix;
    Tokenizer t = !o.tokenizer.any_given && !o.init_from.empty()
                      ? model_dir_tokenizer(read_model_dir(o.init_from), "--init-from " + o.init_from, files)
                      : load_tokenizer(files);
    return std::shared_ptr<const Tokenizer>(std::make_shared<Tokenizer>(std::move(t)));
  }, OnStopSignal::end_job);
  if (o.cache_dir.empty() && corpus.cache_dir.empty() && !o.no_cache) {  // never the data directory unasked
    print0(rank, "cache  | neither XDG_CACHE_HOME nor HOME is set: no token cache (--cache-dir DIR names one)\n");
    corpus.no_cache = true;
  }
  corpus.format = o.data_format, corpus.jsonl_field = o.jsonl_field;
  TrainConfig cfg = o.train;
  cfg.model.V = tok->vocab_size();
  // --init-from: every rank reads the directory (the final max_param_diff confirms they agree), before
  // the corpus, so a shape mismatch is refused in seconds, not after tokenizing. With --resume the
  // checkpoint's weights win, so a requeued fine-tuning job keeps its command line.
  std::vector<float> init_params;
  if (!o.init_from.empty() && o.train.resume.empty())  // host work that may take long: agree_while_working
    init_params = agree_while_working(mpi, [from = o.init_from, model = cfg.model, tok] {
      const ModelDir dir = load_model_dir(from);
      // the run's tokenizer must be the model's: config.json's fingerprint and the directory's files
      check_model_tokenizer(dir, *tok, "--init-from " + from);
      return fit_to_config(dir, model);
    }, OnStopSignal::end_job);
  TokenStream tokens = load_corpus(mpi, launch.local_rank, launch.local_size, data_files, tok, corpus);
  TokenStream val_tokens;  // --val-data: held-out files instead of the tail of --data
  if (!val_files.empty()) val_tokens = load_corpus(mpi, launch.local_rank, launch.local_size, val_files, tok, corpus);
  TrainData data;
  agree(mpi, [&] {
    data = make_train_data(std::move(tokens), tok->fingerprint(), cfg, val_files.empty() ? nullptr : &val_tokens);
  });
  // the eval sets: every rank reads them (a bad item is one line naming its file, line and field)
  for (const auto& eval : o.evals) {
    const std::string &name = eval.first, &spec = eval.second;  // named: C++17 lambdas cannot capture bindings
    std::vector<std::string> files;
    agree(mpi, [&] { files = list_data_files(spec, "--eval " + name); });
    TokenStream s = load_corpus(mpi, launch.local_rank, launch.local_size, files, tok, corpus);
    agree(mpi, [&] {
      if (s.size() < static_cast<size_t>(cfg.seq) + 1)
        XT_FAIL("--eval " << name << ": " << s.size() << " tokens, less than one window of --seq " << cfg.seq << " + 1");
    });
    data.evals.loss.push_back({name, std::move(s)});
  }
  for (const auto& mc : o.eval_mcs) {
    const std::string &name = mc.first, &file = mc.second;
    agree(mpi, [&] { data.evals.mc.push_back({name, tokenize_mc(read_mc_file(file), *tok, cfg.model, file)}); });
  }
  agree(mpi, [&] { check_same_on_all_ranks(mpi, data.hash, "the token stream of " + o.data); });

  end_if_stopped(mpi, before);
  const std::vector<Placement> placement = gather_placement(mpi, launch.local_rank, be->device_name());
  std::unique_ptr<Communicator> comm;
  agree(mpi, [&] { comm = launch.make_comm(*be); });
  const int recompute = cfg.recompute >= 0 ? cfg.recompute : auto_recompute(cfg.model);  // --recompute auto
  // Up front, not as an allocation failure at step 1: host memory is shared by the node's ranks.
  agree(mpi, [&] {
    check_train_memory(cfg.model, cfg.batch / (world * cfg.grad_accum), cfg.seq, *be,
                       be->kind() == Device::cpu ? launch.local_size : 1, recompute, cfg.logits_chunk_rows, cfg.fp8);
  });
  GPT model(cfg.model, *be, recompute);
  model.set_logits_chunk_rows(cfg.logits_chunk_rows);
  std::pair<size_t, size_t> fp8_taken{0, 0};  // --fp8: the matrices in FP8, of those selected
  if (cfg.fp8.any()) agree(mpi, [&] {
    fp8_taken = model.set_fp8(cfg.fp8);
    if (fp8_taken.first == 0)
      throw UsageError("--fp8 " + fp8_linears_name(cfg.fp8) + ": none of the " + std::to_string(fp8_taken.second) +
                       " selected weights can be multiplied in FP8 (dimensions not multiples of 16 or not 16-byte "
                       "aligned); run without --fp8");
  });
  model.init_params(cfg.seed);
  if (!init_params.empty())
    be->copy_to_device(model.params(), init_params.data(), init_params.size() * sizeof(float));
  if (rank == 0) {
    print_placement(placement);
    const double tok_per_step = static_cast<double>(cfg.batch) * cfg.seq;
    std::string fp8;
    if (cfg.fp8.any()) {
      fp8 = " (fp8: " + fp8_linears_name(cfg.fp8) + ", " + std::to_string(fp8_taken.first) + " matrices";
      if (fp8_taken.first < fp8_taken.second)
        fp8 += " of " + std::to_string(fp8_taken.second) + "; the rest bf16: not multiples of 16 or not 16-byte aligned";
      fp8 += ")";
    }
    std::printf("xtrain | world %d | backend %s | dtype %s%s | comm %s\n", world, be->name().c_str(),
                to_string(be->dtype()), fp8.c_str(), comm->name().c_str());
    // num_params counts wte's padding rows (GPTConfig::Vp), which stay zero; the model's own count does not
    const size_t padding = static_cast<size_t>(cfg.model.Vp() - cfg.model.V) * cfg.model.C;
    std::printf("model  | %s | %s parameters (+%zu in wte's %d zero padding rows)\n", cfg.model.describe().c_str(),
                human(model.num_params() - padding).c_str(), padding, cfg.model.Vp() - cfg.model.V);
    if (!o.init_from.empty() && o.train.resume.empty()) std::printf("init   | weights from %s\n", o.init_from.c_str());
    if (!o.init_from.empty() && !o.tokenizer.any_given)
      std::printf("init   | tokenizer from %s: %s\n", o.init_from.c_str(), tok->describe().c_str());
    if (!o.init_from.empty() && !o.train.resume.empty())  // a requeued fine-tuning job keeps its command line
      std::printf("note   | --init-from %s is not read: the weights come from --resume %s\n", o.init_from.c_str(),
                  o.train.resume.c_str());
    std::printf("data   | %s | %s tokens: %s train, %s val\n", o.data.c_str(), human(data.tokens.size()).c_str(),
                human(data.n_train).c_str(), human(data.tokens.size() - data.n_train).c_str());
    for (const EvalSets::Loss& s : data.evals.loss)
      std::printf("eval   | %s | %s tokens: loss over %zu windows of %d at every --val-every\n", s.name.c_str(),
                  human(s.tokens.size()).c_str(), std::min<size_t>(cfg.val_seqs, (s.tokens.size() - 1) / cfg.seq), cfg.seq);
    for (const EvalSets::Mc& s : data.evals.mc)
      std::printf("eval   | %s | %zu multiple-choice items (%zu choices, up to %d tokens each) at every --val-every\n",
                  s.name.c_str(), s.items.items.size(), s.items.rows(), s.items.T + 1);
    std::printf("batch  | %d sequences x %d tokens = %s tokens/step | %d per rank per micro-step, grad-accum %d\n",
                cfg.batch, cfg.seq, human(tok_per_step).c_str(), cfg.batch / (world * cfg.grad_accum), cfg.grad_accum);
    // linear warmup (lr_at): the last step's rate is lr x steps / warmup; at warmup == steps the run ends at
    // its peak with no decay (wsd refuses both: parse_options, no decay step)
    if (cfg.optim.warmup_steps > cfg.steps)
      std::printf("note   | --warmup %d is longer than the run (%d steps): the learning rate never reaches its peak "
                  "--lr %.2e (%.2e at step %d)\n",
                  cfg.optim.warmup_steps, cfg.steps, cfg.optim.lr,
                  static_cast<double>(cfg.optim.lr) * cfg.steps / cfg.optim.warmup_steps, cfg.steps);
    else if (cfg.optim.warmup_steps == cfg.steps)
      std::printf("note   | --warmup %d is as long as the run (%d steps): the learning rate reaches its peak --lr %.2e "
                  "at the last step and never decays\n",
                  cfg.optim.warmup_steps, cfg.steps, cfg.optim.lr);
    print_stop_hint(cfg.ckpt, launch);
    std::fflush(stdout);
  }
  end_if_stopped(mpi, before);
  const TrainResult r = train_rank(cfg, data, model, *be, *comm);  // rank 0 prints the run summary
  if (r.stopped) {  // a stop signal (stop_signal.h): every rank ended after the same step
    const int sig = stop_signal_received();
    const std::string saved = cfg.ckpt.empty()
                                  ? std::string("nothing saved (no --ckpt)")
                                  : "checkpoint " + cfg.ckpt + " written; resume with: the same command and --resume " + cfg.ckpt;
    print0(rank, "stopped | by %s after step %d: %s (%s\n", sig ? signal_name(sig) : "a signal on another rank",
           r.last_step, saved.c_str(), stop_exit_words(sig));
    return kExitStopped;
  }
  return 0;
}

}  // namespace xtrain
