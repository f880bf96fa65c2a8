// The in-process collectives of xtrain_threads (src/comm/thread_world.h): a generation barrier
// on one mutex and condition variable, with a deadline and an abort flag, and per-rank pointers
// posted before it. An all-reduce is two barriers: after the first, rank r reduces its chunk of the
// elements (all ranks' inputs, in rank order) into a shared scratch buffer; after the second, every
// rank copies the whole result into its own buffer. The next collective's first barrier is reached
// only when every rank has finished copying, so scratch is never overwritten while being read.
#include "comm/thread_world.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include <xtrain/core/log.h>

namespace xtrain {

namespace {

using Clock = std::chrono::steady_clock;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

}  // namespace

ThreadWorld::ThreadWorld(int world_size)
    : world_(world_size), host_(host_name()), posted_(world_size > 0 ? world_size : 0) {
  XT_CHECK(world_size >= 1, "world size " << world_size << " must be >= 1");
}

void ThreadWorld::abort() {
  std::lock_guard<std::mutex> lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

bool ThreadWorld::aborted() const {
  std::lock_guard<std::mutex> lk(mu_);
  return aborted_;
}

template <typename F>
std::string ThreadWorld::sync(const Call& call, double started_s, F&& on_last) {
  std::unique_lock<std::mutex> lk(mu_);
  auto peer_failed = [&] {
    std::ostringstream os;
    os << "in-process " << call.what << " on rank " << call.rank << ": another rank failed";
    return PeerAborted(os.str());
  };
  if (aborted_) throw peer_failed();
  const uint64_t gen = generation_;
  if (++arrived_ == world_) {
    verdict_ = on_last();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return verdict_;
  }
  const bool bounded = std::isfinite(call.timeout_s);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                           bounded ? std::max(0.0, started_s + call.timeout_s - now_s()) : 0.0));
  while (generation_ == gen) {
    if (aborted_) throw peer_failed();
    if (!bounded) {
      cv_.wait(lk);
    } else if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && generation_ == gen && !aborted_) {
      std::ostringstream os;
      os << "in-process " << call.what << " on rank " << call.rank << " (" << call.host << ") did not finish within "
         << call.timeout_s << " s (--comm-timeout; a peer rank may have failed or be stuck)";
      // This rank leaves a barrier it was counted in: a late peer must not complete it alone.
      aborted_ = true;
      cv_.notify_all();
      throw Error(os.str());
    }
  }
  return verdict_;  // read under the lock: the next verdict needs every rank at the next collective
}

void ThreadWorld::post_and_check(const Call& call, double started_s, const Posted& mine, size_t scratch_bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    posted_[call.rank] = mine;
  }
  // The last rank to arrive compares what every rank called (one verdict, so every rank throws
  // alike) and sizes the scratch buffer while the others wait.
  const std::string mismatch = sync(call, started_s, [&] {
    for (int r = 1; r < world_; ++r) {
      const Posted &a = posted_[0], &p = posted_[r];
      if (std::strcmp(p.what, a.what) != 0 || p.count != a.count || p.root != a.root) {
        std::ostringstream os;
        os << "in-process collectives out of step: rank 0 called " << a.what << " (count " << a.count << ", root "
           << a.root << ") but rank " << r << " called " << p.what << " (count " << p.count << ", root " << p.root << ")";
        return os.str();
      }
    }
    if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);
    return std::string();
  });
  if (!mismatch.empty()) throw Error(mismatch);
}

template <typename T>
void ThreadWorld::all_reduce(const Call& call, T* x, size_t count, Op op, T scale) {
  const double t0 = now_s();
  post_and_check(call, t0, Posted{call.what, count, -1, x}, count * sizeof(T));
  // This rank's chunk, reduced in rank order (the one order every element gets).
  const size_t lo = count * call.rank / world_, hi = count * (call.rank + 1) / world_;
  T* out = reinterpret_cast<T*>(scratch_.data());
  for (size_t i = lo; i < hi; ++i) {
    T acc = static_cast<const T*>(posted_[0].ptr)[i];
    for (int r = 1; r < world_; ++r) {
      const T v = static_cast<const T*>(posted_[r].ptr)[i];
      acc = op == Op::sum ? acc + v : op == Op::max ? std::max(acc, v) : std::min(acc, v);
    }
    out[i] = scale == T(1) ? acc : acc * scale;
  }
  sync(call, t0, [] { return std::string(); });
  std::copy(out, out + count, x);
}

template void ThreadWorld::all_reduce<float>(const Call&, float*, size_t, Op, float);
template void ThreadWorld::all_reduce<double>(const Call&, double*, size_t, Op, double);
template void ThreadWorld::all_reduce<uint64_t>(const Call&, uint64_t*, size_t, Op, uint64_t);

void ThreadWorld::broadcast(const Call& call, void* data, size_t bytes, int root) {
  const double t0 = now_s();
  XT_CHECK(root >= 0 && root < world_, "broadcast root " << root << " outside world " << world_);
  post_and_check(call, t0, Posted{call.what, bytes, root, data}, 0);
  if (call.rank != root && bytes) std::memcpy(data, posted_[root].ptr, bytes);
  sync(call, t0, [] { return std::string(); });  // the root's buffer stays untouched until every rank has copied it
}

void ThreadWorld::barrier(const Call& call) {
  const double t0 = now_s();
  post_and_check(call, t0, Posted{call.what, 0, -1, nullptr}, 0);
}

namespace {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadWorld& world, int rank, double timeout_s)
      : world_(world), rank_(rank), timeout_s_(timeout_s) {
    XT_CHECK(rank >= 0 && rank < world.world_size(), "rank " << rank << " outside world " << world.world_size());
    XT_CHECK(timeout_s > 0, "comm_timeout_s " << timeout_s << " must be positive");
  }
  std::string name() const override { return "threads"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_.world_size(); }
  std::string host() const override { return world_.host(); }
  int node_id() const override { return 0; }  // one process: one node
  double deadline_s() const override { return std::isfinite(timeout_s_) ? timeout_s_ : 0.0; }

  void all_reduce(float* buf, size_t count, ReduceOp op) override {
    const float scale = op == ReduceOp::avg && world_size() > 1 ? 1.0f / static_cast<float>(world_size()) : 1.0f;
    world_.all_reduce<float>(call("all-reduce of the gradients"), buf, count, ThreadWorld::Op::sum, scale);
  }
  // bucketed_start: each bucket as a blocking in-process all-reduce (elements reduced in rank order,
  // as in all_reduce, so the result is the same bitwise); no overlap, the bucket named on a timeout.
  void bucketed_start(size_t offset, size_t count, const std::string& what) override {
    const float scale = bucket_op_ == ReduceOp::avg && world_size() > 1 ? 1.0f / static_cast<float>(world_size()) : 1.0f;
    const size_t start = tracing() ? trace_clock().mark() : 0;
    world_.all_reduce<float>(call(what.c_str()), bucket_buf_ + offset, count, ThreadWorld::Op::sum, scale);
    if (tracing()) trace_->collective(what, trace_clock(), start, trace_clock().mark());
  }
  void broadcast(float* buf, size_t count, int root) override {
    world_.broadcast(call("broadcast"), buf, count * sizeof(float), root);
  }
  void all_reduce_sum_host(double* x, int count) override {
    world_.all_reduce<double>(call("all-reduce of host values"), x, count, ThreadWorld::Op::sum, 1.0);
  }
  void all_reduce_max_host(double* x, int count) override {
    world_.all_reduce<double>(call("all-reduce (max) of host values"), x, count, ThreadWorld::Op::max, 1.0);
  }
  uint64_t all_reduce_min_host(uint64_t x) override {
    world_.all_reduce<uint64_t>(call("all-reduce (min) of a host value"), &x, 1, ThreadWorld::Op::min, 1);
    return x;
  }
  uint64_t all_reduce_max_host(uint64_t x) override {
    world_.all_reduce<uint64_t>(call("all-reduce (max) of a host value"), &x, 1, ThreadWorld::Op::max, 1);
    return x;
  }
  void broadcast_host(void* data, size_t bytes, int root) override { world_.broadcast(call("broadcast"), data, bytes, root); }
  void barrier() override { world_.barrier(call("barrier")); }

 private:
  ThreadWorld::Call call(const char* what) const { return ThreadWorld::Call{rank_, what, timeout_s_, world_.host()}; }

  ThreadWorld& world_;
  const int rank_;
  const double timeout_s_;
};

}  // namespace

std::unique_ptr<Communicator> make_thread_communicator(ThreadWorld& world, int rank, double comm_timeout_s) {
  return std::make_unique<ThreadCommunicator>(world, rank, comm_timeout_s);
}

}  // namespace xtrain
