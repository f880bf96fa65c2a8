// xtrain_mpi: data-parallel GPT training, one process per device, launched by mpirun or srun.
// main stays thin: MPI first, options, hand over to run_training, and end the whole job on error.
// Exit codes: 0 success, 1 runtime error, 2 usage error.
#include <cstdio>
#include <exception>

#include "xtrain/app.h"
#include "xtrain/error.h"
#include "xtrain/mpi_context.h"
#include "xtrain/options.h"

int main(int argc, char** argv) {
  xtrain::MpiContext mpi(&argc, &argv);  // MPI_Init is the first MPI call
  try {
    xtrain::RunOptions opts = xtrain::parse_options(argc, argv);
    if (opts.help) {
      if (mpi.rank() == 0) std::printf("%s", opts.help_text.c_str());
      return 0;
    }
    return xtrain::run_training(opts, mpi);
  } catch (const xtrain::AgreedFailure& e) {
    return e.exit_code();  // every rank got here; the cause was printed once
  } catch (const xtrain::UsageError& e) {
    // Options are parsed identically on every rank, so every rank exits here: print once.
    if (mpi.rank() == 0) std::fprintf(stderr, "rank 0 (%s): usage error: %s (see --help)\n", mpi.host().c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // A failure on this rank only: report it and end the whole job so no rank waits in a collective.
    std::fprintf(stderr, "rank %d (%s): error: %s\n", mpi.rank(), mpi.host().c_str(), e.what());
    std::fflush(stderr);
    if (mpi.world_size() == 1) return 1;  // nobody to wake up: skip MPI_Abort and its banner
    mpi.abort(1);
  }
}
