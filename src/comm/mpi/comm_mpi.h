// The MPI communicator: collectives over host memory through MPI (src/comm/mpi/comm_mpi.cpp).
#pragma once

#include <memory>

#include <xtrain/comm/comm.h>

namespace xtrain {

class MpiContext;

// make_mpi_communicator: MPI collectives on host memory over MPI_COMM_WORLD (non-blocking calls polled
// against the comm_timeout_s deadline, src/comm/comm_mpi.cpp).
std::unique_ptr<Communicator> make_mpi_communicator(MpiContext& mpi, double comm_timeout_s);

}  // namespace xtrain
