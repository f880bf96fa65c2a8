// MPI implementation of Communicator for backends whose memory is host memory (the CPU backend).
#include <mpi.h>

#include <climits>

#include "xtrain/comm.h"
#include "xtrain/error.h"
#include "xtrain/mpi_context.h"

namespace xtrain {

namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MpiContext& mpi) : mpi_(mpi) {}
  std::string name() const override { return "mpi"; }
  int rank() const override { return mpi_.rank(); }
  int world_size() const override { return mpi_.world_size(); }

  void all_reduce(float* buf, size_t count, ReduceOp op) override {
    // MPI counts are int: reduce in chunks of at most INT_MAX elements.
    for (size_t off = 0; off < count; off += INT_MAX) {
      int n = static_cast<int>(std::min<size_t>(INT_MAX, count - off));
      XT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
    if (op == ReduceOp::avg && world_size() > 1) {
      const float inv = 1.0f / static_cast<float>(world_size());
      for (size_t i = 0; i < count; ++i) buf[i] *= inv;
    }
  }

  void broadcast(float* buf, size_t count, int root) override {
    for (size_t off = 0; off < count; off += INT_MAX) {
      int n = static_cast<int>(std::min<size_t>(INT_MAX, count - off));
      XT_MPI_CHECK(MPI_Bcast(buf + off, n, MPI_FLOAT, root, MPI_COMM_WORLD));
    }
  }

  void barrier() override { mpi_.barrier(); }

  void all_reduce_sum_host(double* x, int count) override { mpi_.all_reduce_sum(x, count); }

 private:
  MpiContext& mpi_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MpiContext& mpi) {
  return std::make_unique<MpiCommunicator>(mpi);
}

}  // namespace xtrain
