// train_rank's step callback (StepCallback, <xtrain/train/train.h>): called once per step on every rank
// with the figures the run returns, validation losses at the validation steps; the same losses bit for
// bit as a run without it; an exception from it ends the run naming the step.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_world.h"
#include "fixtures.h"
#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include <xtrain/train/train.h>

using namespace xtrain;

namespace {

TrainConfig tiny_run() {
  TrainConfig cfg;
  cfg.model = test::model_config(64, 16, 16, 2, 4, 2, 4, 32);
  cfg.seq = 16, cfg.batch = 4, cfg.steps = 5, cfg.val_every = 2, cfg.val_seqs = 4, cfg.log_every = 5;
  cfg.bucket_mb = 0;
  return cfg;
}

// Run: what one rank of a run saw.
struct Run {
  TrainResult result;
  std::vector<StepReport> reports;
};

// train_world: a run of `world` thread ranks on the CPU backend over a fixed token stream; with_callback
// false passes no callback.
std::vector<Run> train_world(int world, bool with_callback) {
  const TrainConfig cfg = tiny_run();
  std::vector<int32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7 + i / 13) % cfg.model.V);
  const TrainData data = make_train_data(TokenStream(ids), 0, cfg);
  ThreadWorld tw(world);
  std::vector<Run> runs(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        BackendOptions bo;
        bo.device = Device::cpu;
        std::unique_ptr<Backend> be = make_backend(bo);
        std::unique_ptr<Communicator> comm = make_thread_communicator(tw, r, 30.0);
        GPT model(cfg.model, *be);
        model.init_params(cfg.seed);
        StepCallback cb;
        if (with_callback) cb = [&runs, r](const StepReport& s) { runs[r].reports.push_back(s); };
        runs[r].result = train_rank(cfg, data, model, *be, *comm, cb);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        tw.abort();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) REQUIRE_MESSAGE(errors[r].empty(), "rank " << r << ": " << errors[r]);
  return runs;
}

}  // namespace

TEST_CASE("the step callback sees every step's figures on every rank; the run is unchanged") {
  const std::vector<Run> plain = train_world(2, false);
  const std::vector<Run> seen = train_world(2, true);
  const TrainConfig cfg = tiny_run();
  for (int r = 0; r < 2; ++r) {
    const Run& run = seen[r];
    CHECK(run.result.losses == plain[r].result.losses);  // bit for bit: the callback changes nothing
    REQUIRE(run.reports.size() == size_t(cfg.steps));
    for (int i = 0; i < cfg.steps; ++i) {
      const StepReport& s = run.reports[i];
      CHECK(s.step == i + 1);
      CHECK(s.last_step == cfg.steps);
      CHECK(s.loss == run.result.losses[i]);
      CHECK(s.lr > 0);
      CHECK(s.grad_norm > 0);
      CHECK(s.step_ms >= 0);
      // validation at every --val-every step and at the last one: 2, 4, 5
      CHECK(s.val_loss.has_value() == (s.step % cfg.val_every == 0 || s.step == cfg.steps));
      // the same figures on both ranks (all-reduced)
      CHECK(s.loss == seen[0].reports[i].loss);
      CHECK(s.grad_norm == seen[0].reports[i].grad_norm);
      CHECK(s.val_loss == seen[0].reports[i].val_loss);
    }
    REQUIRE(run.result.val_loss.has_value());
    CHECK(run.reports.back().val_loss == run.result.val_loss);
  }
}

TEST_CASE("an exception from the step callback ends the run, naming the step") {
  const TrainConfig cfg = tiny_run();
  std::vector<int32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % cfg.model.V);
  const TrainData data = make_train_data(TokenStream(ids), 0, cfg);
  ThreadWorld tw(1);
  BackendOptions bo;
  bo.device = Device::cpu;
  std::unique_ptr<Backend> be = make_backend(bo);
  std::unique_ptr<Communicator> comm = make_thread_communicator(tw, 0, 30.0);
  GPT model(cfg.model, *be);
  model.init_params(cfg.seed);
  int calls = 0;
  const StepCallback stop_at_3 = [&calls](const StepReport& s) {
    ++calls;
    if (s.step == 3) throw Error("enough");
  };
  CHECK_THROWS_WITH_AS(train_rank(cfg, data, model, *be, *comm, stop_at_3), "step 3: enough", Error);
  CHECK(calls == 3);
}
