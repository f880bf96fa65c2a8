// xtrain_threads: data-parallel GPT training with every rank a thread of this one process (one GPU
// each on cuda, device = rank), no launcher and no MPI. Each thread runs the same run_rank as an
// xtrain_mpi process, over the in-process collectives (CPU) or NCCL (CUDA). Exit codes (core/cli.h):
// 0 success, 1 runtime error, 2 usage error, 3 stopped by a signal; a failing rank prints one line
// naming it (docs/launch.md).
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "app/app.h"
#include "app/options.h"
#include "app/thread_launch.h"
#include <xtrain/backend/backend.h>
#include <xtrain/backend/registry.h>
#include <xtrain/distributed/communicators.h>
#include <xtrain/comm/comm.h>
#include "comm/thread_world.h"
#include "core/cli.h"
#include <xtrain/core/error.h>
#include <xtrain/core/log.h>
#include <xtrain/core/stop_signal.h>

namespace {

// kGraceS: after one rank fails, how long the others get to unwind before the process ends anyway
// (a rank inside an NCCL wait notices only at its own --comm-timeout).
constexpr double kGraceS = 5.0;

// world_size: --ranks, or every visible GPU when the run is on cuda. UsageError on the CPU backend
// without --ranks; Error when the run is on cuda and no GPU is visible.
int world_size(const xtrain::RunOptions& o) {
  using xtrain::Device;
  if (o.ranks > 0) return o.ranks;
  const int gpus = xtrain::visible_gpu_count();
  const bool cuda = o.device == Device::cuda || (o.device == Device::automatic && gpus > 0);
  if (!cuda) throw xtrain::UsageError("--ranks is required with the CPU backend");
  if (gpus == 0)
    throw xtrain::Error("--device cuda: no GPU visible (backends compiled in: " + xtrain::compiled_backends() +
                        "); use --device cpu --ranks N");
  return gpus;
}

}  // namespace

int main(int argc, char** argv) {
  xtrain::install_stop_signals();  // first: a stop signal later ends the run with exit 3 (stop_signal.h)
  xtrain::RunOptions opts;
  int world = 0;
  try {
    opts = xtrain::parse_options(argc, argv, xtrain::Launcher::threads);
    if (opts.help || opts.version) {
      std::fputs((opts.help ? opts.help_text : opts.version_text).c_str(), stdout);
      return xtrain::kExitOk;
    }
    world = world_size(opts);
    xtrain::check_world(opts, world);
  } catch (const std::exception& e) {
    // No rank runs yet; the options are every rank's: rank 0's line, as xtrain_mpi prints it
    return xtrain::report_options_failure(e, xtrain::host_name());
  }

  xtrain::ThreadWorld threads(world);
  const auto rank_main = [&](int rank) {
    // Start-up collectives bounded by --comm-timeout, as MpiContext's (long work runs under
    // agree_while_working); the training communicator's too.
    const std::unique_ptr<xtrain::Communicator> startup =
        xtrain::make_thread_communicator(threads, rank, opts.comm_timeout_s);
    const xtrain::RankLaunch launch{*startup, rank, world, [&](xtrain::Backend& be) {
                                      return xtrain::make_thread_rank_communicator(threads, rank, *startup, be,
                                                                                   opts.comm_timeout_s);
                                    }};
    return xtrain::run_rank(opts, launch);
  };
  const xtrain::ThreadRunResult r = xtrain::run_rank_threads(threads, rank_main, kGraceS);
  std::fflush(stdout);
  std::fflush(stderr);
  // A rank still running (stuck outside any collective) must not be destroyed with the process's
  // statics under it: end without unwinding.
  if (r.stragglers > 0) std::_Exit(r.exit_code ? r.exit_code : 1);
  return r.exit_code;
}
