// agree: input checks whose outcome every rank learns with one collective, so bad input ends every
// rank promptly with one line and no rank is left waiting in a later collective.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <xtrain/comm/host_collectives.h>
#include <xtrain/core/error.h>
#include <xtrain/core/log.h>
#include <xtrain/core/stop_signal.h>

namespace xtrain {

// agree: runs fn on every rank, then agrees with one collective whether any rank failed. If so, the
// lowest failing rank prints "rank R (host): <message>" and every rank throws AgreedFailure with
// exit code 2 for a UsageError, else 1; the stop notice is cleared first (set_stop_notice: the job
// ends on this failure, and the signals of mpirun's teardown after a rank exits must not print a stop
// line after it). group: the MpiContext at start-up, the Communicator (whose
// collectives are bounded by --comm-timeout) during training. A solo group (HostCollectives::solo)
// has no one to agree with: fn's exception propagates as thrown, unprinted.
template <typename Fn>
void agree(HostCollectives& group, Fn&& fn) {
  if (group.solo()) {
    fn();
    return;
  }
  std::string msg;
  int code = 0;
  try {
    fn();
  } catch (const AgreedFailure&) {
    throw;
  } catch (const UsageError& e) {
    msg = e.what(), code = 2;
  } catch (const std::exception& e) {
    msg = e.what(), code = 1;
  }
  // max of (world - rank) picks the lowest failing rank; max of code prefers usage errors.
  double flags[2] = {code ? static_cast<double>(group.world_size() - group.rank()) : 0.0, static_cast<double>(code)};
  group.all_reduce_max_host(flags, 2);
  if (flags[0] > 0) {
    set_stop_notice("", "");  // before any rank can exit: the failure's line stays the last line
    const int first = group.world_size() - static_cast<int>(flags[0]);
    if (group.rank() == first) {
      print_rank_line(group.rank(), group.host(), (code == 2 ? "usage error: " : "") + msg);
    }
    throw AgreedFailure(static_cast<int>(flags[1]));
  }
}

// end_if_stopped: collective: whether a stop signal (stop_signal.h) reached any rank. If so rank 0
// prints "stopped | by <signal> <when>: nothing saved (exit 3)" and every rank throws
// AgreedFailure(kExitStopped). For start-up, before training; the training loop stops after a step.
inline void end_if_stopped(HostCollectives& group, const char* when) {
  double stop = stop_signal_received() != 0 ? 1 : 0;
  group.all_reduce_max_host(&stop, 1);
  if (stop == 0) return;
  const int sig = stop_signal_received();
  print0(group.rank(), "stopped | by %s %s: nothing saved (%s\n", sig ? signal_name(sig) : "a signal on another rank",
         when, stop_exit_words(sig));
  throw AgreedFailure(kExitStopped);
}

// OnStopSignal: what agree_while_working does when a stop signal reaches a rank while it waits:
// keep_working (work that must end: a checkpoint) or end_job (start-up work: end_if_stopped at the
// next meeting, leaving the worker to the process's end).
enum class OnStopSignal { keep_working, end_job };

// agree_in_steps: agree for local work that must run on this thread (copies from a device: the
// backend's thread) and may take long, in steps: every rank calls step() until it returns true
// (done), meeting the other ranks after each call (a max all-reduce of "still working", bounded by the
// group's deadline), so a step must take well under the deadline (a rank with nothing to do returns
// true at once). Then, as agree, every rank learns whether any step threw.
template <typename Step>
void agree_in_steps(HostCollectives& group, Step step) {
  bool done = false;
  std::exception_ptr error;
  for (;;) {
    if (!done && !error) {
      try {
        done = step();
      } catch (...) {
        error = std::current_exception();
      }
    }
    double busy = done || error ? 0 : 1;
    group.all_reduce_max_host(&busy, 1);
    if (busy == 0) break;
  }
  agree(group, [&] {
    if (error) std::rethrow_exception(error);
  });
}

// agree_while_working: agree for local work that may take long (reading and tokenizing a corpus) and
// returns fn's result. fn runs on a worker thread while this thread meets the other ranks once a second,
// or every quarter of the group's deadline where that is shorter (a max all-reduce of "still working",
// bounded by the deadline: a rank done early waits at most one period for the others) until every rank is
// done, or one rank's fn has failed (the others then stop waiting for theirs); then, as agree, every rank
// learns whether any fn threw. So a rank stopped or stuck in collectives is noticed within --comm-timeout
// however long the others' work takes, and no deadline has to cover the work itself. fn must not call
// collectives, and it must own what it uses (capture by value): if a collective times out, this throws
// while the worker may still run (detached; the job is ending). With OnStopSignal::end_job a stop
// signal on any rank ends the wait the same way, through end_if_stopped.
template <typename Fn>
auto agree_while_working(HostCollectives& group, Fn fn, OnStopSignal on_stop = OnStopSignal::keep_working)
    -> decltype(fn()) {
  using T = decltype(fn());
  struct State {
    std::mutex m;
    std::condition_variable cv;
    std::optional<T> value;
    std::exception_ptr error;
    bool done = false;
  };
  auto st = std::make_shared<State>();
  std::thread([st, fn = std::move(fn)]() mutable {
    std::optional<T> v;
    std::exception_ptr e;
    try {
      v.emplace(fn());
    } catch (...) {
      e = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(st->m);
    st->value = std::move(v), st->error = e, st->done = true;
    st->cv.notify_all();
  }).detach();
  const double deadline = group.deadline_s();
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(deadline > 0 ? std::min(1.0, deadline / 4) : 1.0));
  for (;;) {  // meet at once (a rank that arrives late was busy before the call), then once a period
    double flags[3];  // {still working, failed, stopped}: a failure or a stop ends the wait of every rank
    {
      const std::lock_guard<std::mutex> lock(st->m);
      flags[0] = st->done ? 0 : 1, flags[1] = st->error ? 1 : 0;
    }
    flags[2] = on_stop == OnStopSignal::end_job && stop_signal_received() != 0 ? 1 : 0;
    group.all_reduce_max_host(flags, 3);
    if (flags[2] > 0) end_if_stopped(group, "before training started");
    if (flags[0] == 0 || flags[1] > 0) break;
    std::unique_lock<std::mutex> lock(st->m);
    st->cv.wait_for(lock, period, [&] { return st->done; });
  }
  agree(group, [&] {  // throws on every rank when any rank's fn failed, even where fn still runs
    const std::lock_guard<std::mutex> lock(st->m);
    if (st->error) std::rethrow_exception(st->error);
  });
  return std::move(*st->value);
}

}  // namespace xtrain
