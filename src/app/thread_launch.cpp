// xtrain_threads' launcher: threads, first-failure reporting, abort, bounded join (thread_launch.h).
#include "app/thread_launch.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cli.h"
#include <xtrain/core/log.h>

namespace xtrain {

namespace {

// Shared between the rank threads and the waiting main thread; owned by shared_ptr so that a
// detached straggler may still touch it after run_rank_threads has returned.
struct RunState {
  std::mutex mu;
  std::condition_variable cv;
  int ended = 0;
  bool failed = false;  // a rank failed (its line printed, the world aborted)
  int fail_code = 0;
  int agreed_code = 0;  // the largest code a rank ended with without a failure of its own
  std::vector<char> done;
};

}  // namespace

ThreadRunResult run_rank_threads(ThreadWorld& world, const std::function<int(int rank)>& fn, double grace_s) {
  const int n = world.world_size();
  auto st = std::make_shared<RunState>();
  st->done.assign(n, 0);
  // fail: the first failure prints its line and wakes every waiting rank; later ones stay silent.
  auto fail = [st, &world](int rank, int code, const std::string& line) {
    {
      std::lock_guard<std::mutex> lk(st->mu);
      if (st->failed) return;
      st->failed = true;
      st->fail_code = code;
    }
    print_rank_line(rank, world.host(), line);
    world.abort();
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([st, fn, fail, r] {
      int code = 0;
      try {
        code = fn(r);
      } catch (const AgreedFailure& e) {
        code = e.exit_code();  // every rank throws it alike; the cause was printed once
      } catch (const PeerAborted&) {
        code = 1;  // woken because another rank failed: that rank reported
      } catch (const std::exception& e) {
        const CliFailure f = cli_failure(e);  // as xtrain_mpi's main: usage error 2, other errors 1
        fail(r, code = f.exit_code, f.message);
      }
      std::lock_guard<std::mutex> lk(st->mu);
      st->agreed_code = std::max(st->agreed_code, code);  // e.g. kExitStopped, returned by every rank
      st->done[r] = 1;
      ++st->ended;
      st->cv.notify_all();
    });
  }
  ThreadRunResult res;
  {
    std::unique_lock<std::mutex> lk(st->mu);
    st->cv.wait(lk, [&] { return st->ended == n || st->failed; });
    if (st->ended < n)
      st->cv.wait_for(lk, std::chrono::duration<double>(grace_s), [&] { return st->ended == n; });
    res.exit_code = st->failed ? st->fail_code : st->agreed_code;
  }
  for (int r = 0; r < n; ++r) {
    bool done;
    {
      std::lock_guard<std::mutex> lk(st->mu);
      done = st->done[r];
    }
    if (done) {
      threads[r].join();
    } else {
      threads[r].detach();
      ++res.stragglers;
    }
  }
  return res;
}

}  // namespace xtrain
