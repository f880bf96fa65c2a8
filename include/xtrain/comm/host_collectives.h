// HostCollectives: who this rank is, and the collectives over small arrays in HOST memory that the
// training run needs besides the gradient all-reduce: losses, agreement flags, checksums, the final
// parameter comparison. Every rank makes the same calls in the same order. Written so that any way
// of starting ranks can provide it: MPI processes (MpiContext at start-up, the MPI and NCCL
// communicators during training) or threads of one process (xtrain_threads: ThreadWorld's
// in-process collectives, src/comm/thread_world.h, honouring the same deadline). Deadline: the Communicator (comm.h) bounds every one of
// these calls by --comm-timeout and throws Error naming rank, host and operation when it passes;
// MpiContext's start-up calls are the one blocking exception (mpi_context.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtrain {

class HostCollectives {
 public:
  virtual ~HostCollectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // host: the host name this rank runs on, for messages ("rank R (host): ...").
  virtual std::string host() const = 0;
  // node_id: identity of the node this rank runs on, equal on exactly the ranks that share a node: the
  // lowest world rank of MPI's shared-memory split under mpirun/srun (never the hostname, which
  // containers may repeat), 0 for every rank of one process (xtrain_threads).
  virtual int node_id() const = 0;
  // deadline_s: how long one of these calls may wait for the other ranks before it throws (seconds,
  // --comm-timeout); 0 where none is known.
  virtual double deadline_s() const { return 0.0; }
  // solo: a program's own world of one process, started by no launcher (SoloGroup, comm/solo_group.h:
  // xtrain_eval's corpus loading). agree (comm/agree.h) then lets a failure propagate as thrown, for the
  // program to report like its other errors, instead of printing "rank 0 (host): ..." itself.
  virtual bool solo() const { return false; }

  // all_reduce_sum_host / all_reduce_max_host: x (count) in place, the sum (in double) / the
  // element-wise max over all ranks; every rank ends with identical values.
  virtual void all_reduce_sum_host(double* x, int count) = 0;
  virtual void all_reduce_max_host(double* x, int count) = 0;
  // all_reduce_min_host / all_reduce_max_host: the min / max of one 64-bit value over all ranks.
  virtual uint64_t all_reduce_min_host(uint64_t x) = 0;
  virtual uint64_t all_reduce_max_host(uint64_t x) = 0;
  // broadcast_host: `bytes` bytes at data from root to every rank (any size; implementations chunk).
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  // barrier: returns once every rank has called it (and, on a device backend, after this rank's
  // queued device work has finished).
  virtual void barrier() = 0;
};

}  // namespace xtrain
