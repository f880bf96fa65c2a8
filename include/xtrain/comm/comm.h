// Communicator: everything the training run (train_rank and all under it) needs from the other
// ranks: identity and host-side collectives (HostCollectives) plus the collectives over buffers in
// the backend's memory (host memory for the CPU backend, device memory for CUDA). Counts are
// elements, never bytes. Implementations: MPI (src/comm/mpi/comm_mpi.cpp, any backend whose memory is host
// memory), NCCL (src/backend/cuda/comm_nccl.cpp) and the in-process one of xtrain_threads (host memory,
// src/comm/comm_threads.cpp). The training run sees only this interface, never how ranks started.
//
// Deadline: EVERY call, device-side or host-side, is bounded by the communicator's comm_timeout_s
// (--comm-timeout): a peer that is alive but stuck makes the call throw Error naming the rank, host
// and operation instead of hanging; the caller adds the step and main ends the job.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <xtrain/comm/host_collectives.h>
#include <xtrain/core/clock.h>

namespace xtrain {

enum class ReduceOp { sum, avg };

class Communicator : public HostCollectives {
 public:
  virtual std::string name() const = 0;  // "mpi", "nccl", "threads"
  // all_reduce: buf (count) in place; avg divides the sum by world_size. Every rank ends with
  // bitwise identical values (one reduction order for all ranks).
  virtual void all_reduce(float* buf, size_t count, ReduceOp op) = 0;
  // broadcast: buf (count) from root to every rank.
  virtual void broadcast(float* buf, size_t count, int root) = 0;

  // Bucketed all-reduce (overlap with the backward pass). bucketed_begin(buf, count, op),
  // then bucketed_start(offset, n, what) for disjoint ranges of buf whose values are final (in any
  // order, the same on every rank), then bucketed_finish(): buf ends as all_reduce(buf, count, op)
  // would leave it when each element's reduction does not depend on the range it is reduced in (the
  // thread communicator always; MPI and NCCL always at world 2, and MPI at world 3 where Open MPI's
  // non-blocking all-reduce reduces along a binomial tree; docs/scaling.md). bucketed_start may
  // return before its collective completes; buf's range must not be written until bucketed_finish.
  // bucketed_progress drives started collectives without blocking. `what` names the bucket in the
  // timeout error. Every element of buf must be covered before bucketed_finish. The defaults run
  // each bucket as a blocking all_reduce (correct, no overlap).
  virtual void bucketed_begin(float* buf, size_t count, ReduceOp op) {
    bucket_buf_ = buf, bucket_count_ = count, bucket_op_ = op;
    if (tracing()) trace_clock().clear();  // the last step's marks were read at its end
  }
  virtual void bucketed_start(size_t offset, size_t count, const std::string& what) {
    const size_t start = tracing() ? trace_clock().mark() : 0;
    all_reduce(bucket_buf_ + offset, count, bucket_op_);
    if (tracing()) trace_->collective(what, trace_clock(), start, trace_clock().mark());
  }
  virtual void bucketed_progress() {}
  // bucketed_finish: buf holds the result (every started bucket has completed) and the backend's
  // stream is ordered after it. Where the communicator records collectives (records_collectives),
  // it is bucketed_join() then bucketed_wait(), which a CUDA graph separates:
  // - bucketed_join: orders the backend's stream after every started bucket's collective, device
  //   side only (no host wait), so that it can be recorded by Backend::capture_graph;
  // - bucketed_wait: waits on the host, under the deadline, for the buckets started since the last
  //   bucketed_begin; after each launch of a recorded step again (its buckets are the recording's).
  virtual void bucketed_finish() {}
  virtual void bucketed_join() {}
  virtual void bucketed_wait() {}
  // records_collectives: true where bucketed_begin / bucketed_start / bucketed_join may run inside
  // Backend::capture_graph, their collectives recorded into the graph and run at each launch (NCCL:
  // its collectives on CUDA graphs). False (the default): host-driven collectives (MPI, in-process).
  virtual bool records_collectives() const { return false; }
  // failed: a collective of this communicator failed (timeout, library error) and it was given up;
  // every later call throws. Lets a caller that catches errors to fall back (a CUDA graph recording
  // that failed) tell a failed communicator, which must end the job, from a failed recording.
  virtual bool failed() const { return false; }
  // set_trace: from now on, while trace->recording(), each bucketed collective is reported to `trace`
  // (nullptr: none) with marks of its start and completion on trace_clock() (--timeline; core/clock.h).
  void set_trace(CollectiveTrace* trace) { trace_ = trace; }

 protected:
  bool tracing() const { return trace_ && trace_->recording(); }
  // trace_clock: the clock of the stream the collectives run on: the host clock, unless overridden
  // (NCCL: CUDA events on its side stream).
  virtual TimelineClock& trace_clock() { return host_clock_; }
  CollectiveTrace* trace_ = nullptr;
  HostClock host_clock_;
  float* bucket_buf_ = nullptr;  // the buffer of the bucketed all-reduce in progress
  size_t bucket_count_ = 0;
  ReduceOp bucket_op_ = ReduceOp::sum;
};

}  // namespace xtrain
