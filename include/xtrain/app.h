// run_training: everything xtrain_mpi does after options and MPI are set up: backend and device,
// tokenizer and data (input checks agreed across ranks before the first training collective),
// placement table, model init with the across-rank identity check, communicator, train_rank.
#pragma once

#include "xtrain/mpi_context.h"
#include "xtrain/options.h"

namespace xtrain {

// Returns the process exit code (0). Throws UsageError, AgreedFailure (already reported) or Error.
int run_training(const RunOptions& opts, MpiContext& mpi);

// agree: runs fn on every rank, then agrees with one collective whether any rank failed. If so, the
// lowest failing rank prints "rank R (host): <message>" and every rank throws AgreedFailure with
// exit code 2 for a UsageError, else 1 — so bad input ends every rank promptly, with one line,
// and no rank is left waiting in a later collective.
template <typename Fn>
void agree(MpiContext& mpi, Fn&& fn);

}  // namespace xtrain

#include "xtrain/app_agree.h"
