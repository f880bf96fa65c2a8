// MpiContext: process bootstrap. MPI_Init first; rank and world size from MPI; node-local rank and
// size from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), which is right under every launcher and
// every mapping (--map-by node, srun --distribution=cyclic). Launcher variables are only a
// cross-check: SLURM_* describe the allocation, not the job, under mpirun-in-sbatch, and
// OMPI_COMM_WORLD_LOCAL_RANK is unset under srun (docs/launch.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/comm/host_collectives.h>

namespace xtrain {

// As HostCollectives, MpiContext serves the start-up checks of the mpirun entry point (before the
// communicator exists). Its collectives are bounded like the Communicator's: each waits at most
// comm_timeout_s (set_comm_timeout; run_training sets --comm-timeout before the first one) and then
// throws Error naming the rank, host and "start-up" operation. Long local work between them (rank 0
// tokenizing a corpus) runs under agree_while_working (agree.h), which keeps meeting the other ranks
// at least once a second, so the deadline never has to cover it. MPI_Init and the shared-memory split in
// the constructor have no bounded form: a StartupWatchdog (startup_watchdog.h) armed before them with the
// --comm-timeout found on argv ends the rank with one line, exit 1, when they take longer.
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
  // node_id: the node's identity from the shared-memory split, never from hostnames (containers and
  // some clusters give several nodes one hostname): the world rank of the node's first rank. Equal
  // on ranks that share memory, different across nodes.
  int node_id() const override { return node_id_; }
  double deadline_s() const override { return timeout_s_; }
  std::string host() const override { return host_; }  // for messages only, not identity

  // check_launcher: throws Error when the environment says the launcher started several tasks
  // (SLURM_NTASKS/SLURM_STEP_NUM_TASKS under srun, OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE...) but MPI
  // sees a world of one — N independent "rank 0 of 1" trainings. Also cross-checks
  // OMPI_COMM_WORLD_LOCAL_RANK against the shared-memory split where it is set.
  void check_launcher() const;

  // set_comm_timeout: the deadline of every later collective, seconds (> 0). Until it is called
  // (options not yet parsed) it is 300 s, the default of --comm-timeout.
  void set_comm_timeout(double seconds) { timeout_s_ = seconds; }
  double comm_timeout_s() const { return timeout_s_; }

  // HostCollectives over MPI_COMM_WORLD, bounded (see above). Collective over all ranks.
  void all_reduce_sum_host(double* x, int count) override;
  void all_reduce_max_host(double* x, int count) override;
  uint64_t all_reduce_min_host(uint64_t x) override;
  uint64_t all_reduce_max_host(uint64_t x) override;
  void broadcast_host(void* data, size_t bytes, int root) override;
  void barrier() override;

  // abort: end the whole job now (MPI_Abort on MPI_COMM_WORLD) with the given exit code.
  [[noreturn]] void abort(int code);

 private:
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_size_ = 1, node_id_ = 0;
  std::string host_;
  bool aborted_ = false;
  double timeout_s_ = 300;
};

// MpirunStop: how Open MPI's mpirun (4.1) ends this rank on Ctrl-C or SIGTERM: SIGCONT at once,
// SIGTERM kill_after_s / 2 later (its odls_base_sigkill_timeout, default 1 s), SIGKILL as long again.
// Measured on Open MPI 4.1.4 (docs/usage.md, "Signals and exit codes"). SIGUSR1 it forwards as is.
struct MpirunStop {
  bool sigcont_stops = false;  // started by mpirun (OMPI_COMM_WORLD_RANK set at exec) without
                               // job-control forwarding (orte_forward_job_control): its SIGCONT only
                               // comes as the start of ending the job
  int mpirun_pid = 0;          // mpirun's pid when it is this process's parent (the ranks of its node)
  double kill_after_s = 0;     // from the SIGCONT to the SIGKILL, seconds
};

// mpirun_stop: the above from the environment (OMPI_* variables, mpirun passes its --mca values on)
// and the parent process; before MPI_Init, no MPI call.
MpirunStop mpirun_stop();

// all_gather_strings: every rank's string, in rank order, on every rank (MPI_Iallgatherv under the
// deadline of mpi.comm_timeout_s()).
std::vector<std::string> all_gather_strings(const MpiContext& mpi, const std::string& mine);

}  // namespace xtrain
