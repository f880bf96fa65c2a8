// MpiContext's node identity: node_id comes from the shared-memory split, so the
// ranks of one machine agree on it and it is the world rank of the node's first rank, whatever the
// hostname says. Run with 2 ranks on one machine (ctest test_mpi_context_np2). Exit 0 on success.
#include <cstdio>

#include <xtrain/comm/mpi/mpi_context.h>

int main(int argc, char** argv) {
  xtrain::MpiContext mpi(&argc, &argv);
  int ok = mpi.node_id() == 0 && mpi.local_size() == mpi.world_size() && mpi.local_rank() == mpi.rank();
  bool all_ok = false;
  double sum = ok;
  mpi.all_reduce_sum_host(&sum, 1);
  all_ok = sum == mpi.world_size();
  if (!ok)
    std::fprintf(stderr, "rank %d: node_id %d, local rank %d of %d; want node 0 with every rank local\n", mpi.rank(),
                 mpi.node_id(), mpi.local_rank(), mpi.local_size());
  if (mpi.rank() == 0) std::printf("node ids from the shared-memory split: %s\n", all_ok ? "ok" : "FAIL");
  return all_ok ? 0 : 1;
}
