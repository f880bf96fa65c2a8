// StartupWatchdog and startup_deadline_s (see startup_watchdog.h).
#include "comm/mpi/startup_watchdog.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace xtrain {

double startup_deadline_s(int argc, char** argv) {
  double s = 300;
  const std::string flag = "--comm-timeout";
  for (int i = 1; i < argc; ++i) {
    const char* value = nullptr;
    if (argv[i] == flag && i + 1 < argc) value = argv[i + 1];
    else if (std::strncmp(argv[i], "--comm-timeout=", 15) == 0) value = argv[i] + 15;
    if (!value) continue;
    char* end = nullptr;
    const double v = std::strtod(value, &end);
    s = (end != value && *end == '\0' && v >= 1 && v <= 1e6) ? v : 300;  // the last one counts, as in the parser
  }
  return s;
}

namespace {
// launcher_rank: this process's rank as the launcher's environment gives it (Open MPI, PMIx, PMI, Slurm).
std::string launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v); r && *r) return r;
  return "?";
}
}  // namespace

StartupWatchdog::StartupWatchdog(double deadline_s) {
  // rank and host now, while nothing else runs: the thread then only waits, prints and exits
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "unknown-host");
  char line[512];
  std::snprintf(line, sizeof line,
                "rank %s (%s): error: start-up did not finish within %g s (MPI_Init_thread / node split); a rank may "
                "be stopped or unreachable\n",
                launcher_rank().c_str(), host, deadline_s);
  thread_ = std::thread([this, deadline_s, message = std::string(line)] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(deadline_s), [this] { return done_; })) return;
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(1);  // kExitError: the launcher sees a failed rank and ends the others
  });
}

void StartupWatchdog::disarm() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace xtrain
