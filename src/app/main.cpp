// xtrain_mpi: data-parallel GPT training, one process per device, launched by mpirun or srun.
// main stays thin: MPI first, options, hand over to run_training, and end the whole job on error.
// Exit codes (core/cli.h): 0 success, 1 runtime error, 2 usage error, 3 stopped by a signal.
#include <cstdio>
#include <exception>
#include <string>

#include "app/app.h"
#include "app/options.h"
#include "comm/agree.h"
#include <xtrain/comm/mpi/mpi_context.h>
#include "core/cli.h"
#include <xtrain/core/error.h>
#include <xtrain/core/log.h>
#include <xtrain/core/stop_signal.h>

int main(int argc, char** argv) {
  // First: a stop signal at any later point ends the job with exit 3 and a line (stop_signal.h)
  xtrain::install_stop_signals(xtrain::mpirun_stop().sigcont_stops);
  xtrain::MpiContext mpi(&argc, &argv);  // MPI_Init is the first MPI call
  try {
    // Parsed under agree: a rank whose own command line is bad (an MPMD launch) ends every rank with
    // one line, instead of leaving the others waiting for it in their first collective.
    xtrain::RunOptions opts;
    xtrain::agree(mpi, [&] {
      try {
        opts = xtrain::parse_options(argc, argv);
      } catch (const xtrain::UsageError& e) {
        throw xtrain::UsageError(std::string(e.what()) + " (see --help)");
      }
    });
    if (mpi.all_reduce_max_host(static_cast<uint64_t>(opts.help)) != 0) {  // --help on any rank
      xtrain::print0(mpi.rank(), "%s", opts.help_text.c_str());
      return xtrain::kExitOk;
    }
    if (mpi.all_reduce_max_host(static_cast<uint64_t>(opts.version)) != 0) {  // --version on any rank
      xtrain::print0(mpi.rank(), "%s", opts.version_text.c_str());
      return xtrain::kExitOk;
    }
    return xtrain::run_training(opts, mpi);
  } catch (const xtrain::AgreedFailure& e) {
    return e.exit_code();  // every rank got here; the cause was printed once
  } catch (const xtrain::UsageError& e) {
    // Options are parsed identically on every rank, so every rank exits here: print once.
    if (mpi.rank() == 0) return xtrain::report_options_failure(e, mpi.host());
    return xtrain::cli_failure(e).exit_code;
  } catch (const std::exception& e) {
    // A failure on this rank only: report it and end the whole job so no rank waits in a collective.
    const xtrain::CliFailure f = xtrain::cli_failure(e);
    xtrain::set_stop_notice("", "");  // the signals of the job's end (MPI_Abort) add no stop line after this one
    xtrain::print_rank_line(mpi.rank(), mpi.host(), f.message);
    if (mpi.world_size() == 1) return f.exit_code;  // nobody to wake up: skip MPI_Abort and its banner
    mpi.abort(f.exit_code);
  }
}
