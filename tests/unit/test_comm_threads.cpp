// The in-process collectives of xtrain_threads (ThreadWorld) and its launcher (run_rank_threads):
// sums in the one fixed rank order, bitwise identical on every rank; max/min/broadcast/barrier;
// the --comm-timeout deadline naming rank and operation; abort waking waiters; mismatched calls
// refused on every rank; a failing rank reported once with a non-zero code and no deadlock; the
// placement table gathered over them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "app/thread_launch.h"
#include "comm/agree.h"
#include "comm/placement.h"
#include "comm/solo_group.h"
#include "comm/thread_world.h"

using namespace xtrain;

namespace {

// on_ranks: fn(rank) on `world` threads; returns each rank's error message ("" = none).
std::vector<std::string> on_ranks(ThreadWorld& world, const std::function<void(int)>& fn) {
  std::vector<std::string> err(world.world_size());
  std::vector<std::thread> ts;
  for (int r = 0; r < world.world_size(); ++r)
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  return err;
}

// Values whose float sum depends on the order: 1e8 + 1 - 1e8 rounds differently per order.
float value(int rank, size_t i) { return (rank % 2 ? -1.0f : 1.0f) * (i % 3 == 0 ? 1e8f : 1.0f) + 0.1f * rank; }

}  // namespace

TEST_CASE("all-reduce: the rank-order sum, bitwise identical on every rank, for every world") {
  for (int w : {1, 2, 3, 4}) {
    ThreadWorld world(w);
    const size_t n = 1001;  // not a multiple of the world: uneven chunks
    std::vector<std::vector<float>> bufs(w, std::vector<float>(n));
    const auto err = on_ranks(world, [&](int r) {
      auto comm = make_thread_communicator(world, r, 10.0);
      for (size_t i = 0; i < n; ++i) bufs[r][i] = value(r, i);
      comm->all_reduce(bufs[r].data(), n, ReduceOp::avg);
    });
    for (int r = 0; r < w; ++r) CHECK(err[r].empty());
    for (size_t i = 0; i < n; ++i) {
      float expect = value(0, i);
      for (int r = 1; r < w; ++r) expect += value(r, i);  // rank 0 + rank 1 + ... in that order
      if (w > 1) expect *= 1.0f / static_cast<float>(w);
      for (int r = 0; r < w; ++r) REQUIRE(std::memcmp(&bufs[r][i], &expect, sizeof(float)) == 0);
    }
  }
}

TEST_CASE("host collectives: sum, max, min, broadcast, barrier") {
  ThreadWorld world(3);
  std::vector<double> sums(3), maxes(3);
  std::vector<uint64_t> mins(3), umaxes(3);
  std::vector<std::string> got(3);
  const auto err = on_ranks(world, [&](int r) {
    auto comm = make_thread_communicator(world, r, 10.0);
    double x = r + 1.5, m = 10.0 * r;
    comm->all_reduce_sum_host(&x, 1);
    comm->all_reduce_max_host(&m, 1);
    sums[r] = x, maxes[r] = m;
    mins[r] = comm->all_reduce_min_host(100 + r);
    umaxes[r] = comm->all_reduce_max_host(100 + r);
    std::string s = r == 2 ? "from rank two" : std::string(13, '?');
    comm->broadcast_host(s.data(), s.size(), 2);
    comm->barrier();
    got[r] = s;
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(err[r].empty());
    CHECK(sums[r] == 1.5 + 2.5 + 3.5);
    CHECK(maxes[r] == 20.0);
    CHECK(mins[r] == 100);
    CHECK(umaxes[r] == 102);
    CHECK(got[r] == "from rank two");
  }
}

TEST_CASE("a rank that never comes: the others throw after the deadline, naming rank and operation") {
  ThreadWorld world(2);
  const auto t0 = std::chrono::steady_clock::now();
  const auto err = on_ranks(world, [&](int r) {
    auto comm = make_thread_communicator(world, r, 0.5);
    if (r == 0) {
      float x = 1;
      comm->all_reduce(&x, 1, ReduceOp::sum);
    }
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(err[0].find("all-reduce of the gradients on rank 0") != std::string::npos);
  CHECK(err[0].find("did not finish within 0.5 s (--comm-timeout") != std::string::npos);
  CHECK(err[1].empty());
  CHECK(s >= 0.5);
  CHECK(s < 5.0);
  // The world is aborted: a late rank must not complete the abandoned collective alone.
  CHECK(world.aborted());
  float y = 1;
  CHECK_THROWS_AS(make_thread_communicator(world, 1, 0.5)->all_reduce(&y, 1, ReduceOp::sum), PeerAborted);
}

TEST_CASE("ranks calling different collectives are refused on every rank") {
  ThreadWorld world(2);
  const auto err = on_ranks(world, [&](int r) {
    auto comm = make_thread_communicator(world, r, 10.0);
    float x[2] = {1, 2};
    if (r == 0) comm->all_reduce(x, 2, ReduceOp::sum);
    else comm->broadcast(x, 2, 0);
  });
  for (int r = 0; r < 2; ++r) CHECK(err[r].find("out of step") != std::string::npos);
}

TEST_CASE("run_rank_threads: one failing rank ends every rank, reported once, code 1") {
  ThreadWorld world(4);
  std::atomic<int> woken{0};
  const auto t0 = std::chrono::steady_clock::now();
  const ThreadRunResult r = run_rank_threads(
      world,
      [&](int rank) {
        // No deadline: only the abort can wake the waiting ranks.
        auto comm = make_thread_communicator(world, rank, std::numeric_limits<double>::infinity());
        if (rank == 2) throw Error("disk full");
        try {
          comm->barrier();
        } catch (const PeerAborted&) {
          ++woken;
          throw;
        }
        return 0;
      },
      5.0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code == 1);
  CHECK(r.stragglers == 0);
  CHECK(woken == 3);
  CHECK(s < 2.0);
}

TEST_CASE("run_rank_threads: a usage error is code 2; all ranks agreeing is their code; success is 0") {
  {
    ThreadWorld world(2);
    CHECK(run_rank_threads(world, [](int rank) -> int {
            if (rank == 1) throw UsageError("bad");
            return 0;
          }, 1.0).exit_code == 2);
  }
  {
    ThreadWorld world(2);
    CHECK(run_rank_threads(world, [](int) -> int { throw AgreedFailure(2); }, 1.0).exit_code == 2);
  }
  {
    ThreadWorld world(3);
    CHECK(run_rank_threads(world, [](int) { return 0; }, 1.0).exit_code == 0);
  }
}

TEST_CASE("run_rank_threads: a rank stuck outside any collective is left behind after the grace period") {
  ThreadWorld world(2);
  static std::atomic<bool> release{false};  // static: the detached thread may outlive this test
  const ThreadRunResult r = run_rank_threads(
      world,
      [&](int rank) {
        if (rank == 1) {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return 0;
        }
        throw Error("rank 0 gives up");
      },
      0.2);
  CHECK(r.exit_code == 1);
  CHECK(r.stragglers == 1);
  release = true;
}

TEST_CASE("gather_placement over the in-process collectives: every rank's row, in rank order, on every rank") {
  ThreadWorld world(3);
  std::vector<std::vector<Placement>> got(3);
  const auto err = on_ranks(world, [&](int r) {
    auto comm = make_thread_communicator(world, r, 10.0);
    got[r] = gather_placement(*comm, r, r == 1 ? std::string("") : "dev " + std::to_string(10 * r) + " (bus)");
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(err[r].empty());
    REQUIRE(got[r].size() == 3);
    for (int q = 0; q < 3; ++q) {
      CHECK(got[r][q].rank == q);
      CHECK(got[r][q].local_rank == q);
      CHECK(got[r][q].host == world.host());
      CHECK(got[r][q].device == (q == 1 ? std::string("") : "dev " + std::to_string(10 * q) + " (bus)"));
    }
  }
}

TEST_CASE("agree over a SoloGroup: a failure propagates as thrown (its kind and message), nothing to agree on") {
  SoloGroup one;
  CHECK(one.world_size() == 1);
  CHECK(one.solo());
  int ran = 0;
  agree(one, [&] { ++ran; });
  CHECK(ran == 1);
  // not AgreedFailure (whose message was printed as "rank 0 (host): ..."): the program reports these itself
  CHECK_THROWS_WITH_AS(agree(one, [] { throw UsageError("--loss x: bad"); }), "--loss x: bad", UsageError);
  CHECK_THROWS_WITH_AS(agree(one, [] { throw Error("x.jsonl:2: not JSON"); }), "x.jsonl:2: not JSON", Error);
  CHECK(agree_while_working(one, [] { return 7; }) == 7);
  CHECK_THROWS_WITH_AS(agree_while_working(one, []() -> int { throw UsageError("late"); }), "late", UsageError);
  // a thread world of one rank still agrees (the trainer at world 1): AgreedFailure, code 2 for a usage error
  ThreadWorld world(1);
  const auto comm = make_thread_communicator(world, 0, 10.0);
  CHECK_FALSE(comm->solo());
  try {
    agree(*comm, [] { throw UsageError("bad"); });
    FAIL("agree did not throw");
  } catch (const AgreedFailure& e) {
    CHECK(e.exit_code() == 2);
  }
}
