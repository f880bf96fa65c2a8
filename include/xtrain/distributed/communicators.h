// The communicator that matches a backend: MPI collectives for host memory, NCCL for CUDA memory,
// in-process ones for xtrain_threads' CPU ranks. Above backend and comm/mpi, so only the programs that
// train (and their tests) link MPI and NCCL; the one file that knows whether NCCL was compiled in is
// src/distributed/communicators.cpp.
#pragma once

#include <memory>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>

namespace xtrain {

class MpiContext;
class ThreadWorld;

// make_communicator: the communicator matching the backend ("mpi" for cpu, "nccl" for cuda).
// comm_timeout_s: how long one collective may wait (seconds) before it throws Error naming the rank and
// operation and the job ends (a rank that DIES is ended by mpirun/srun; this covers one that is alive
// but stuck). Collective over all ranks.
std::unique_ptr<Communicator> make_communicator(MpiContext& mpi, Backend& backend, double comm_timeout_s);

// make_thread_rank_communicator: xtrain_threads' counterpart of make_communicator for rank `rank` of
// `world`: NCCL on the CUDA backend (ncclUniqueId over `startup`, host side in-process), the
// in-process communicator (src/comm/thread_world.h) on the CPU backend.
std::unique_ptr<Communicator> make_thread_rank_communicator(ThreadWorld& world, int rank, HostCollectives& startup,
                                                            Backend& backend, double comm_timeout_s);

}  // namespace xtrain
