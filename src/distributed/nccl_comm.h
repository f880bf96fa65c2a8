// The NCCL communicator's entry points (src/distributed/nccl_comm.cpp), for communicators.cpp and the
// NCCL tests. This header includes no CUDA or NCCL header.
#pragma once

#include <memory>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>

namespace xtrain {

class MpiContext;

// make_nccl_communicator: NCCL collectives on the CUDA backend's device memory. Collective over all
// ranks of `startup` (which carries the ncclUniqueId from rank 0 and the one-rank-per-GPU check);
// `host` (this rank's, same world) serves the host-side collectives during training and must bound
// them by comm_timeout_s. Throws Error (on every rank alike) when two ranks are bound to one GPU
// (same host and PCI bus id), or when `backend` is not the CUDA backend. Collectives that do not
// finish within comm_timeout_s seconds abort the communicator and throw Error naming rank and
// operation. Works for ranks that are processes or threads of one process (one GPU each).
std::unique_ptr<Communicator> make_nccl_communicator(HostCollectives& startup, std::unique_ptr<HostCollectives> host,
                                                     Backend& backend, double comm_timeout_s);
// The mpirun form: start-up over MPI_COMM_WORLD, host side the MPI communicator.
std::unique_ptr<Communicator> make_nccl_communicator(MpiContext& mpi, Backend& backend,
                                                     double comm_timeout_s = 300.0);

}  // namespace xtrain
