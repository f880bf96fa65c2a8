// run_rank_threads: xtrain_threads' launcher. One std::thread per rank runs the same function; the
// first rank that fails prints one line naming itself and aborts the ThreadWorld, which wakes every
// rank waiting in a collective (they end with PeerAborted, not reported). Ranks that do not end
// within a grace period (stuck outside any collective) are left behind: the caller must then end
// the process with std::_Exit, never by returning from main.
#pragma once

#include <functional>
#include <string>

#include "comm/thread_world.h"

namespace xtrain {

struct ThreadRunResult {
  int exit_code = 0;  // the first failing rank's code (1 runtime, 2 usage), else the largest code a
                      // rank returned or agreed on (0 success; e.g. 3 when stopped by a signal)
  int stragglers = 0; // ranks still running after the grace period (detached)
};

// run_rank_threads: runs fn(rank) for rank 0..world-1, each on its own thread, and returns once all
// have ended, or grace_s seconds after the first failure. fn returns the rank's exit code; it may
// throw AgreedFailure (already reported: its code), UsageError (code 2), any std::exception (code 1).
ThreadRunResult run_rank_threads(ThreadWorld& world, const std::function<int(int rank)>& fn, double grace_s);

}  // namespace xtrain
