// ThreadWorld: the ranks of xtrain_threads, one std::thread each in one process, and the collectives
// between them over shared host memory (src/comm/comm_threads.cpp). Every rank makes the same calls in
// the same order, as under MPI. Sums use ONE fixed order, rank 0 + rank 1 + ... + rank W-1, element
// by element (the elements split into W chunks, one computed by each rank), so every rank gets
// bitwise identical results. Waits are bounded by a deadline and end early when the world is
// aborted (a rank failed), so no thread is left waiting; a rank whose deadline passes aborts the
// world itself (it leaves a barrier it was counted in).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <xtrain/comm/comm.h>
#include <xtrain/core/error.h>

namespace xtrain {

// Thrown by a collective that was woken because another rank failed (ThreadWorld::abort). Launchers
// report the failing rank's own error, never these.
class PeerAborted : public Error {
 public:
  using Error::Error;
};

class ThreadWorld {
 public:
  // world_size: ranks (>= 1).
  explicit ThreadWorld(int world_size);
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int world_size() const { return world_; }
  // host: this machine's name (every rank runs here), for messages.
  const std::string& host() const { return host_; }
  // abort: every collective waiting now or called later throws PeerAborted. Idempotent.
  void abort();
  bool aborted() const;

  // ---- the collectives, for ThreadCommunicator (a rank's view, make_thread_communicator) ----
  enum class Op { sum, max, min };
  // Deadline of one collective: `timeout_s` seconds from its start; infinite = no deadline.
  struct Call {
    int rank;
    const char* what;  // names the operation in errors ("all-reduce of the gradients")
    double timeout_s;
    const std::string& host;
  };
  // all_reduce: x (count) in place on every rank; op over all ranks in rank order; then x *= scale
  // (scale != 1 only with Op::sum). T = float, double or uint64_t.
  template <typename T>
  void all_reduce(const Call& call, T* x, size_t count, Op op, T scale);
  // broadcast: bytes at data from root to every rank.
  void broadcast(const Call& call, void* data, size_t bytes, int root);
  // barrier: returns once every rank has called it.
  void barrier(const Call& call);

 private:
  struct Posted {  // what each rank called, checked across ranks (a mismatch would corrupt memory)
    const char* what = nullptr;
    size_t count = 0;
    int root = 0;
    void* ptr = nullptr;
  };
  // sync: waits until every rank has arrived; the last arriver first runs on_last (returning a
  // verdict string) under the lock, and every rank returns that verdict. Throws Error on the
  // deadline, PeerAborted on abort.
  template <typename F>
  std::string sync(const Call& call, double started_s, F&& on_last);
  void post_and_check(const Call& call, double started_s, const Posted& mine, size_t scratch_bytes);

  const int world_;
  const std::string host_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string verdict_;             // of the last completed sync
  std::vector<Posted> posted_;     // (world), by rank
  std::vector<unsigned char> scratch_;  // the reduced values, one chunk written by each rank
};

// make_thread_communicator: rank `rank`'s Communicator ("threads") over `world` for a backend whose
// memory is host memory (the CPU backend). Every call is bounded by comm_timeout_s (> 0; infinity
// for none, e.g. start-up); on the deadline it throws Error naming the rank, host and operation.
std::unique_ptr<Communicator> make_thread_communicator(ThreadWorld& world, int rank, double comm_timeout_s);

}  // namespace xtrain
