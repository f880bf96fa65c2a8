// MpiContext: process bootstrap. MPI_Init first; rank and world size from MPI; node-local rank and
// size from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), which is right under every launcher and
// every mapping (--map-by node, srun --distribution=cyclic). Launcher variables are only a
// cross-check: SLURM_* describe the allocation, not the job, under mpirun-in-sbatch, and
// OMPI_COMM_WORLD_LOCAL_RANK is unset under srun (docs/launch.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xtrain/host_collectives.h"

namespace xtrain {

// As HostCollectives, MpiContext serves the start-up checks of the mpirun entry point (before the
// communicator exists): its collectives are plain blocking MPI calls, NOT bounded by --comm-timeout
// (start-up may legitimately wait long, e.g. for rank 0 tokenizing a corpus). The training run gets
// the Communicator instead, whose every call is bounded.
class MpiContext final : public HostCollectives {
 public:
  // Calls MPI_Init (or MPI_Init_thread(FUNNELED)); MPI errors return codes (MPI_ERRORS_RETURN) so
  // that they become xtrain::Error with the MPI message.
  MpiContext(int* argc, char*** argv);
  ~MpiContext();  // MPI_Finalize unless abort() was called
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  std::string host() const override { return host_; }

  // check_launcher: throws Error when the environment says the launcher started several tasks
  // (SLURM_NTASKS/SLURM_STEP_NUM_TASKS under srun, OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE...) but MPI
  // sees a world of one — N independent "rank 0 of 1" trainings. Also cross-checks
  // OMPI_COMM_WORLD_LOCAL_RANK against the shared-memory split where it is set.
  void check_launcher() const;

  // HostCollectives over MPI_COMM_WORLD, blocking (see above). Collective over all ranks.
  void all_reduce_sum_host(double* x, int count) override;
  void all_reduce_max_host(double* x, int count) override;
  uint64_t all_reduce_min_host(uint64_t x) override;
  uint64_t all_reduce_max_host(uint64_t x) override;
  void broadcast_host(void* data, size_t bytes, int root) override;
  void barrier() override;

  // abort: end the whole job now (MPI_Abort on MPI_COMM_WORLD) with the given exit code.
  [[noreturn]] void abort(int code);

 private:
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool aborted_ = false;
};

// gather_strings: every rank's string, in rank order, on every rank (MPI_Allgatherv).
std::vector<std::string> all_gather_strings(const MpiContext& mpi, const std::string& mine);

}  // namespace xtrain
