// MPI implementation of Communicator for backends whose memory is host memory (the CPU backend).
// Every collective is the non-blocking MPI call (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) completed
// by polling MPI_Test against a deadline of comm_timeout_s (--comm-timeout): a peer that is alive but
// stuck (stopped, swapping, deadlocked) cannot hang the job, because mpirun/srun end a job only when
// a rank exits. On timeout the call throws Error naming the rank, host and operation; the training
// loop adds the step and main() ends the job (MPI_Abort). A rank that dies is mpirun's to handle.
// The host-side collectives (losses, agreement flags, checksums, the final parameter comparison)
// run the same way (MpiHostCollectives, src/comm/mpi/comm_mpi_host.h).
// Every rank gets bitwise identical results (sum is commutative and Open MPI's reductions apply one
// order per element on all ranks); tests/integration/test_gates.sh checks the parameters agree exactly.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/mpi/comm_mpi.h"
#include <xtrain/comm/mpi/mpi_context.h>
#include "comm/mpi/comm_mpi_host.h"
#include <xtrain/core/error.h>

namespace xtrain {

MpiHostCollectives::MpiHostCollectives(const MpiContext& mpi, double comm_timeout_s)
    : rank_(mpi.rank()), world_(mpi.world_size()), node_id_(mpi.node_id()), host_(mpi.host()), timeout_s_(comm_timeout_s) {
  XT_CHECK(comm_timeout_s > 0, "comm_timeout_s " << comm_timeout_s << " must be positive");
}

void MpiHostCollectives::all_reduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                                    const char* what) {
  MPI_Request req;
  XT_MPI_CHECK(MPI_Iallreduce(send, recv, count, type, op, MPI_COMM_WORLD, &req));
  wait(req, what);
}

uint64_t MpiHostCollectives::all_reduce_min(uint64_t x) {
  all_reduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_MIN, "all-reduce (min) of a host value");
  return x;
}

uint64_t MpiHostCollectives::all_reduce_max(uint64_t x) {
  all_reduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_MAX, "all-reduce (max) of a host value");
  return x;
}

void MpiHostCollectives::broadcast(void* data, size_t bytes, int root, const char* what) {
  for (size_t off = 0; off < bytes; off += INT_MAX) {
    const int n = static_cast<int>(std::min<size_t>(INT_MAX, bytes - off));
    MPI_Request req;
    XT_MPI_CHECK(MPI_Ibcast(static_cast<char*>(data) + off, n, MPI_BYTE, root, MPI_COMM_WORLD, &req));
    wait(req, what);
  }
}

void MpiHostCollectives::barrier() {
  MPI_Request req;
  XT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  wait(req, "barrier");
}

void MpiHostCollectives::wait(MPI_Request& req, const char* what) const {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  int done = 0;
  for (;;) {
    XT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::yield();  // with more ranks than cores, let the rank we wait for run
    if (Clock::now() > deadline) {
      std::ostringstream os;
      os << "MPI " << what << " on rank " << rank_ << " (" << host_ << ") did not finish within " << timeout_s_
         << " s (--comm-timeout; a peer rank may have failed or be stuck)";
      throw Error(os.str());
    }
  }
}

namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MpiContext& mpi, double comm_timeout_s) : host_(mpi, comm_timeout_s) {}
  std::string name() const override { return "mpi"; }
  int rank() const override { return host_.rank(); }
  int world_size() const override { return host_.world_size(); }
  std::string host() const override { return host_.host(); }
  int node_id() const override { return host_.node_id(); }
  double deadline_s() const override { return host_.timeout_s(); }

  void all_reduce(float* buf, size_t count, ReduceOp op) override {
    // From a copy, not MPI_IN_PLACE: Open MPI's non-blocking all-reduce (libnbc) takes its binomial
    // reduce + broadcast for in-place buffers and its bandwidth-bound ring otherwise (a micro-benchmark
    // on a 2-core virtual machine, 2 ranks: 64 MiB in 0.30 s in place, 0.03 s from a copy). One host copy of the
    // gradients, kept between steps. MPI counts are int: chunks of at most INT_MAX elements.
    if (send_.size() < count) send_.resize(count);
    std::copy(buf, buf + count, send_.begin());
    for (size_t off = 0; off < count; off += INT_MAX) {
      const int n = static_cast<int>(std::min<size_t>(INT_MAX, count - off));
      host_.all_reduce(send_.data() + off, buf + off, n, MPI_FLOAT, MPI_SUM, "all-reduce of the gradients");
    }
    if (op == ReduceOp::avg && world_size() > 1) {
      const float inv = 1.0f / static_cast<float>(world_size());
      for (size_t i = 0; i < count; ++i) buf[i] *= inv;
    }
  }

  // Bucketed all-reduce: each bucket's MPI_Iallreduce from its range of the host copy, tested at every
  // bucketed_progress (libnbc advances only inside MPI calls) and waited for, in start order, by
  // bucketed_finish under the deadline; then avg scales the whole buffer as all_reduce does.
  void bucketed_begin(float* buf, size_t count, ReduceOp op) override {
    XT_CHECK(pending_.empty(), "MPI bucketed all-reduce begun with " << pending_.size() << " collectives in flight");
    Communicator::bucketed_begin(buf, count, op);
    if (send_.size() < count) send_.resize(count);  // before any start: in-flight sends point into it
  }
  void bucketed_start(size_t offset, size_t count, const std::string& what) override {
    XT_CHECK(offset + count <= bucket_count_, "bucket [" << offset << ", " << offset + count << ") outside "
                                                         << bucket_count_ << " gradients");
    std::copy(bucket_buf_ + offset, bucket_buf_ + offset + count, send_.begin() + offset);
    for (size_t off = offset; off < offset + count; off += INT_MAX) {
      const int n = static_cast<int>(std::min<size_t>(INT_MAX, offset + count - off));
      pending_.push_back({MPI_REQUEST_NULL, what, tracing() ? trace_clock().mark() : 0});
      XT_MPI_CHECK(MPI_Iallreduce(send_.data() + off, bucket_buf_ + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                  &pending_.back().req));
    }
  }
  void bucketed_progress() override {
    for (Pending& p : pending_) {
      int done = 0;
      if (p.req == MPI_REQUEST_NULL) continue;
      XT_MPI_CHECK(MPI_Test(&p.req, &done, MPI_STATUS_IGNORE));
      if (done && tracing()) trace_->collective(p.what, trace_clock(), p.start, trace_clock().mark());  // seen now
    }
  }
  void bucketed_finish() override {
    for (Pending& p : pending_) {
      if (p.req == MPI_REQUEST_NULL) continue;
      host_.wait(p.req, p.what.c_str());
      if (tracing()) trace_->collective(p.what, trace_clock(), p.start, trace_clock().mark());
    }
    pending_.clear();
    if (bucket_op_ == ReduceOp::avg && world_size() > 1) {
      const float inv = 1.0f / static_cast<float>(world_size());
      for (size_t i = 0; i < bucket_count_; ++i) bucket_buf_[i] *= inv;
    }
  }

  void broadcast(float* buf, size_t count, int root) override { host_.broadcast(buf, count * sizeof(float), root); }
  void barrier() override { host_.barrier(); }
  void all_reduce_sum_host(double* x, int count) override {
    host_.all_reduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_SUM, "all-reduce of the losses");
  }
  void all_reduce_max_host(double* x, int count) override { host_.all_reduce_max(x, count); }
  uint64_t all_reduce_min_host(uint64_t x) override { return host_.all_reduce_min(x); }
  uint64_t all_reduce_max_host(uint64_t x) override { return host_.all_reduce_max(x); }
  void broadcast_host(void* data, size_t bytes, int root) override { host_.broadcast(data, bytes, root); }

 private:
  MpiHostCollectives host_;
  std::vector<float> send_;  // the send buffer of all_reduce and of the bucketed all-reduce
  struct Pending {
    MPI_Request req;
    std::string what;  // names the bucket in the timeout error
    size_t start;      // trace_clock() mark at MPI_Iallreduce (--timeline)
  };
  std::vector<Pending> pending_;  // the bucketed all-reduce's collectives, in start order
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MpiContext& mpi, double comm_timeout_s) {
  return std::make_unique<MpiCommunicator>(mpi, comm_timeout_s);
}

}  // namespace xtrain
