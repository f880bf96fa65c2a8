// The registry: the one file (backend/registry.cpp) that knows which backends were compiled in. It
// makes the backend a run asks for and the communicator that matches it (MPI collectives for host
// memory, NCCL for CUDA memory, in-process ones for xtrain_threads' CPU ranks).
#pragma once

#include <memory>
#include <string>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/comm.h>

namespace xtrain {

class MpiContext;
class ThreadWorld;

// make_backend: creates the backend for opts.device. automatic picks cuda when compiled in and a GPU
// is visible, else cpu. Throws UsageError for a device not compiled in and for bf16 on the CPU
// backend; Error when the device cannot be used (e.g. more ranks on
// the node than visible GPUs).
std::unique_ptr<Backend> make_backend(const BackendOptions& opts);

// visible_gpu_count: GPUs the CUDA runtime sees (0 in a build without CUDA, or without GPU/driver).
int visible_gpu_count();

// compiled_backends: e.g. "cpu" or "cpu, cuda" (for --help and the start banner).
std::string compiled_backends();

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
