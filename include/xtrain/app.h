// run_training: everything xtrain_mpi does after options and MPI are set up: backend and device,
// tokenizer and data (input checks agreed across ranks before the first training collective),
// placement table, model init with the across-rank identity check, communicator, train_rank.
#pragma once

#include "xtrain/mpi_context.h"
#include "xtrain/options.h"

namespace xtrain {

// Returns the process exit code (0). Throws UsageError, AgreedFailure (already reported) or Error.
int run_training(const RunOptions& opts, MpiContext& mpi);

}  // namespace xtrain
