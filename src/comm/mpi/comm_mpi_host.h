// MpiHostCollectives: host-memory collectives over MPI_COMM_WORLD, each a non-blocking MPI call
// completed by polling MPI_Test against a deadline of comm_timeout_s (--comm-timeout). Behind every
// collective of the MPI communicator, which under xtrain_mpi also serves the NCCL communicator's
// host-side collectives, so both honour the Communicator's deadline (src/comm/comm.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtrain {

class MpiContext;

class MpiHostCollectives {
 public:
  MpiHostCollectives(const MpiContext& mpi, double comm_timeout_s);
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  const std::string& host() const { return host_; }
  int node_id() const { return node_id_; }
  double timeout_s() const { return timeout_s_; }

  // all_reduce: MPI_Iallreduce(send, recv, count, type, op); send may be MPI_IN_PLACE. `what` names
  // the operation in the timeout message.
  void all_reduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, const char* what);
  void all_reduce_sum(double* x, int count) { all_reduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_SUM, "all-reduce of host values"); }
  void all_reduce_max(double* x, int count) { all_reduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_MAX, "all-reduce (max) of host values"); }
  uint64_t all_reduce_min(uint64_t x);
  uint64_t all_reduce_max(uint64_t x);
  // broadcast: bytes from root, in chunks of at most INT_MAX (MPI counts are int).
  void broadcast(void* data, size_t bytes, int root, const char* what = "broadcast");
  void barrier();
  // wait: completes req by polling MPI_Test (which also drives MPI's progress, as a blocking call
  // would); throws Error once comm_timeout_s has passed. The request is left pending then: the job
  // is about to end through MPI_Abort.
  void wait(MPI_Request& req, const char* what) const;

 private:
  int rank_, world_, node_id_;
  std::string host_;
  double timeout_s_;
};

}  // namespace xtrain
