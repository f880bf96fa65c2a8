// StartupWatchdog: a deadline for the MPI calls that have no bounded form, MPI_Init_thread and the
// shared-memory split: a rank stopped or unreachable in them would otherwise hang every other rank
// there, past --comm-timeout, since those calls come before the first bounded collective.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace xtrain {

// startup_deadline_s: the value of the last --comm-timeout on argv ("--comm-timeout S" or
// "--comm-timeout=S") when it is a number in [1, 1e6], else 300 (--comm-timeout's default). Read
// before MPI_Init, ahead of the option parser, which still refuses a bad value later with its message.
double startup_deadline_s(int argc, char** argv);

// StartupWatchdog: armed on construction (before MPI_Init), a thread that, unless disarm() comes
// within deadline_s seconds, prints one line on stderr
//   rank R (host): error: start-up did not finish within S s (MPI_Init_thread / node split); a rank may be stopped or unreachable
// (R from the launcher's environment, "?" when it gives none; host from gethostname) and ends the
// process with exit code 1 (runtime error, core/cli.h), so that the launcher ends the job. The
// thread never calls MPI. disarm() (also the destructor) stops and joins it; never throws.
class StartupWatchdog {
 public:
  explicit StartupWatchdog(double deadline_s);
  ~StartupWatchdog() { disarm(); }
  StartupWatchdog(const StartupWatchdog&) = delete;
  StartupWatchdog& operator=(const StartupWatchdog&) = delete;
  void disarm() noexcept;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace xtrain
