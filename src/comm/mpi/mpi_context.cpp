// MpiContext: MPI bootstrap, node-local rank from the shared-memory split, launcher cross-checks,
// host-side small collectives and the placement table. See src/comm/mpi/mpi_context.h.
#include <xtrain/comm/mpi/mpi_context.h>

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/mpi/comm_mpi_host.h"
#include "comm/mpi/startup_watchdog.h"
#include <xtrain/core/error.h>

namespace xtrain {

std::string detail::mpi_error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(msg, static_cast<size_t>(len));
}

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == '\0') ? static_cast<int>(x) : fallback;
}
}  // namespace

MpirunStop mpirun_stop() {
  MpirunStop s;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank || !*rank) return s;  // not started by mpirun (srun, a singleton)
  s.sigcont_stops = env_int("OMPI_MCA_orte_forward_job_control", 0) == 0;
  s.kill_after_s = 2.0 * std::max(0, env_int("OMPI_MCA_odls_base_sigkill_timeout", 1));
  const pid_t parent = ::getppid();
  std::ifstream comm("/proc/" + std::to_string(parent) + "/comm");
  std::string name;
  if (comm && std::getline(comm, name) && (name == "mpirun" || name == "mpiexec" || name == "orterun"))
    s.mpirun_pid = static_cast<int>(parent);
  return s;
}

MpiContext::MpiContext(int* argc, char*** argv) {
  // MPI_Init_thread and the split have no bounded form: a watchdog, armed first, ends this rank with
  // one line when they take longer than --comm-timeout (a peer stopped or unreachable in them).
  StartupWatchdog watchdog(startup_deadline_s(*argc, *argv));
  int provided = 0;
  // FUNNELED: only the main thread calls MPI (OpenBLAS/CUDA threads never do).
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes and become xtrain::Error with the MPI message (XT_MPI_CHECK).
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  XT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  XT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  // Node-local rank: ranks sharing memory with us, ordered by world rank. Right under every launcher
  // and mapping, unlike rank % gpus_per_node or SLURM_LOCALID (docs/launch.md).
  MPI_Comm local = MPI_COMM_NULL;
  XT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  XT_MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  XT_MPI_CHECK(MPI_Comm_size(local, &local_size_));
  node_id_ = rank_;  // local rank 0 has the lowest world rank (the split's key): its rank names the node
  XT_MPI_CHECK(MPI_Bcast(&node_id_, 1, MPI_INT, 0, local));
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  XT_MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, len);
  watchdog.disarm();
}

MpiContext::~MpiContext() {
  if (!aborted_) MPI_Finalize();
}

void MpiContext::check_launcher() const {
  // A launcher that started several tasks while MPI sees a world of one means every process trains
  // alone as "rank 0 of 1" (e.g. srun without --mpi=pmix, or a binary built against another MPI).
  // SLURM_NTASKS alone is not enough: inside sbatch/salloc the batch shell has it without srun.
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"};
  if (world_ == 1) {
    for (const char* v : vars) {
      int n = env_int(v, 1);
      if (n > 1) {
        XT_FAIL("the launcher started " << n << " tasks (" << v << "=" << n
                << ") but MPI sees a world of 1, so each process would train alone. Launch with "
                   "`mpirun -np N` from the same Open MPI xtrain was built with, or `srun --mpi=pmix`");
      }
    }
  }
  int ompi_local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
  if (ompi_local >= 0 && ompi_local != local_rank_) {
    XT_FAIL("OMPI_COMM_WORLD_LOCAL_RANK=" << ompi_local << " but the shared-memory split gives local rank "
            << local_rank_ << " on " << host_ << ": the launcher and MPI disagree about placement");
  }
}

// Start-up collectives: non-blocking MPI calls polled against the --comm-timeout deadline, like the
// communicator's (MpiHostCollectives); "start-up" in the timeout message tells them apart.
void MpiContext::all_reduce_sum_host(double* x, int count) {
  MpiHostCollectives(*this, timeout_s_).all_reduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_SUM, "start-up all-reduce");
}
void MpiContext::all_reduce_max_host(double* x, int count) {
  MpiHostCollectives(*this, timeout_s_).all_reduce(MPI_IN_PLACE, x, count, MPI_DOUBLE, MPI_MAX, "start-up all-reduce (max)");
}
uint64_t MpiContext::all_reduce_min_host(uint64_t x) {
  MpiHostCollectives(*this, timeout_s_).all_reduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_MIN, "start-up all-reduce (min)");
  return x;
}
uint64_t MpiContext::all_reduce_max_host(uint64_t x) {
  MpiHostCollectives(*this, timeout_s_).all_reduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_MAX, "start-up all-reduce (max)");
  return x;
}
void MpiContext::broadcast_host(void* data, size_t bytes, int root) {
  MpiHostCollectives(*this, timeout_s_).broadcast(data, bytes, root, "start-up broadcast");
}
void MpiContext::barrier() { MpiHostCollectives(*this, timeout_s_).barrier(); }

std::vector<std::string> all_gather_strings(const MpiContext& mpi, const std::string& mine) {
  const MpiHostCollectives bounded(mpi, mpi.comm_timeout_s());
  int n = mpi.world_size();
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(n), displs(n);
  MPI_Request req;
  XT_MPI_CHECK(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &req));
  bounded.wait(req, "start-up all-gather");
  int total = 0;
  for (int i = 0; i < n; ++i) displs[i] = total, total += lens[i];
  std::string all(total, '\0');
  XT_MPI_CHECK(MPI_Iallgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                               MPI_COMM_WORLD, &req));
  bounded.wait(req, "start-up all-gather");
  std::vector<std::string> out(n);
  for (int i = 0; i < n; ++i) out[i] = all.substr(displs[i], lens[i]);
  return out;
}

void MpiContext::abort(int code) {
  aborted_ = true;
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; keep the compiler and readers sure of that
}

}  // namespace xtrain
