// The one file that knows whether the NCCL communicator was compiled in. XTRAIN_HAVE_CUDA is defined
// for this file only, by cmake/cuda.cmake.
#include <xtrain/distributed/communicators.h>

#include <memory>

#include "comm/mpi/comm_mpi.h"
#include "comm/thread_world.h"
#include <xtrain/comm/mpi/mpi_context.h>
#include <xtrain/core/error.h>
#ifdef XTRAIN_HAVE_CUDA
#include "distributed/nccl_comm.h"
#endif

namespace xtrain {

std::unique_ptr<Communicator> make_communicator(MpiContext& mpi, Backend& backend, double comm_timeout_s) {
  // Picked by the backend's typed kind: NCCL on device memory, MPI on host memory.
#ifdef XTRAIN_HAVE_CUDA
  if (backend.kind() == Device::cuda) return make_nccl_communicator(mpi, backend, comm_timeout_s);
#endif
  XT_CHECK(backend.kind() == Device::cpu, "no communicator for backend " << backend.name());
  return make_mpi_communicator(mpi, comm_timeout_s);
}


std::unique_ptr<Communicator> make_thread_rank_communicator(ThreadWorld& world, int rank, HostCollectives& startup,
                                                            Backend& backend, double comm_timeout_s) {
  // The same choice as make_communicator: NCCL on device memory (its host side in-process), the
  // in-process communicator on host memory.
#ifdef XTRAIN_HAVE_CUDA
  if (backend.kind() == Device::cuda)
    return make_nccl_communicator(startup, make_thread_communicator(world, rank, comm_timeout_s), backend,
                                  comm_timeout_s);
#endif
  (void)startup;
  XT_CHECK(backend.kind() == Device::cpu, "no communicator for backend " << backend.name());
  return make_thread_communicator(world, rank, comm_timeout_s);
}

}  // namespace xtrain
