// run_rank: everything one rank does after its launcher has started it, the same under every launch
// model: backend and device, tokenizer and data (input checks agreed across ranks before the first
// training collective), placement table, model init with the across-rank identity check,
// communicator, train_rank. run_training: xtrain_mpi's entry (launcher checks, then run_rank);
// xtrain_threads calls run_rank on each of its rank threads (src/app/threads_main.cpp).
#pragma once

#include <functional>
#include <memory>

#include "app/options.h"
#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>
#include <xtrain/comm/mpi/mpi_context.h>

namespace xtrain {

// RankLaunch: what a launcher gives run_rank.
struct RankLaunch {
  // start-up collectives (input agreement, placement, NCCL id), bounded by --comm-timeout; long local
  // work (rank 0 tokenizing a corpus) runs under agree_while_working (agree.h).
  HostCollectives& group;
  int local_rank = 0, local_size = 1;  // on this node (the backend binds device local_rank)
  // make_comm: the training communicator for this rank's backend (collective over all ranks).
  std::function<std::unique_ptr<Communicator>(Backend&)> make_comm;
  // Open MPI's mpirun as this rank's parent (its pid, 0 otherwise) and the seconds from Ctrl-C to its
  // SIGKILL of the ranks (mpi_context.h, MpirunStop): rank 0's start-up line on how to stop.
  int mpirun_pid = 0;
  double mpirun_kill_after_s = 0;
};

// run_rank: returns the rank's exit code (0; kExitStopped after a stop signal). Throws UsageError, AgreedFailure (already reported) or
// Error. The caller has checked the world size against the options (check_world).
int run_rank(const RunOptions& opts, const RankLaunch& launch);

// run_training: check_launcher, --comm-timeout for MPI's start-up collectives, check_options_agree,
// check_world, then run_rank with the MPI/NCCL communicator.
int run_training(const RunOptions& opts, MpiContext& mpi);

}  // namespace xtrain
