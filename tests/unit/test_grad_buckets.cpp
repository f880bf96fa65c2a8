// Gradient buckets: the plan covers the flat buffer exactly once in reverse layout order,
// cut at tensor boundaries; BucketedAllReduce starts a bucket only once backward has made all of it
// final; GPT::backward reports final offsets from the end of the buffer down to 0.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/solo_group.h"
#include "fixtures.h"
#include <xtrain/core/error.h>
#include <xtrain/model/model.h>
#include "train/grad_buckets.h"
#include "train/timeline.h"

using namespace xtrain;

namespace {

GPTConfig tiny_config() { return test::tiny_gpt2(/*L=*/3); }  // layers between the first and the last

// RecordingComm: one rank; records what the bucketed all-reduce starts, and when.
class RecordingComm final : public SoloCollectives<Communicator> {
 public:
  std::string name() const override { return "recording"; }
  void all_reduce(float*, size_t, ReduceOp) override {}
  void broadcast(float*, size_t, int) override {}
  void bucketed_start(size_t offset, size_t count, const std::string& what) override {
    started.push_back({offset, count});
    names.push_back(what);
  }
  void bucketed_finish() override { ++finished; }
  void bucketed_join() override { ++joined; }
  void bucketed_wait() override { ++waited; }
  bool records_collectives() const override { return records; }
  std::vector<GradBucket> started;
  std::vector<std::string> names;
  int finished = 0, joined = 0, waited = 0;
  bool records = false;
};

// train_forward: a training forward of 2 sequences of 8 fixed tokens (the gradient hooks' tests' batch)
void train_forward(GPT& model, const GPTConfig& c) {
  std::vector<int32_t> tok(2 * 8), tgt(2 * 8);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i * 7 % c.V), tgt[i] = static_cast<int32_t>(i * 5 % c.V);
  model.forward(tok.data(), tgt.data(), 2, 8, true, 1.0f / 16, nullptr);
}

}  // namespace

TEST_CASE("bucket plan: exact cover, reverse order, tensor boundaries, at least the bucket size") {
  const auto layout = param_layout(tiny_config());
  const size_t total = layout.back().offset + layout.back().count;
  std::set<size_t> starts;
  for (const auto& t : layout) starts.insert(t.offset);
  for (size_t bytes : {size_t(1), size_t(400), size_t(4000), size_t(1) << 30}) {
    const auto b = plan_grad_buckets(layout, bytes);
    REQUIRE(!b.empty());
    size_t end = total;
    for (size_t i = 0; i < b.size(); ++i) {
      CHECK(b[i].offset + b[i].count == end);  // contiguous, from the end of the buffer down
      CHECK(starts.count(b[i].offset) == 1);   // cut at a tensor boundary
      if (i + 1 < b.size()) CHECK(b[i].count * sizeof(float) >= bytes);  // only the last may be smaller
      end = b[i].offset;
    }
    CHECK(end == 0);
  }
  // one tensor each: every tensor that holds elements (a row absent in the family, e.g. gpt2's lm_head under
  // a tied head, has none and starts no bucket of its own)
  const size_t holding = std::count_if(layout.begin(), layout.end(), [](const auto& t) { return t.count > 0; });
  CHECK(holding < layout.size());  // the tiny gpt2 config has such a row: the case below is exercised
  CHECK(plan_grad_buckets(layout, 1).size() == holding);
  const auto one = plan_grad_buckets(layout, 0);
  REQUIRE(one.size() == 1);
  CHECK((one[0].offset == 0 && one[0].count == total));
}

TEST_CASE("backward reports final gradients from the end of the buffer, and buckets start only then") {
  const GPTConfig c = tiny_config();
  auto be = make_cpu_backend();
  GPT model(c, *be);
  model.init_params(7);
  RecordingComm comm;
  BucketedAllReduce buckets(comm, plan_grad_buckets(model.layout(), 1000));
  REQUIRE(buckets.num_buckets() > 3);
  std::vector<size_t> offsets;
  std::vector<size_t> started_at_call;  // buckets started when each hook call returned
  train_forward(model, c);
  buckets.begin(model.grads(), model.num_params(), ReduceOp::avg);
  model.set_grad_ready_hook([&](size_t off) {
    offsets.push_back(off);
    buckets.ready(off);
    started_at_call.push_back(comm.started.size());
    for (const auto& s : comm.started) CHECK(s.offset >= off);  // never a bucket with gradients to come
  });
  model.backward();
  model.set_grad_ready_hook(nullptr);
  // lnf, each layer from the last, then the embeddings: L + 2 calls, decreasing, the last 0
  REQUIRE(offsets.size() == static_cast<size_t>(c.L) + 2);
  for (size_t i = 1; i < offsets.size(); ++i) CHECK(offsets[i] < offsets[i - 1]);
  CHECK(offsets.back() == 0);
  CHECK(started_at_call[started_at_call.size() - 2] > 0);  // buckets did start before the embeddings
  CHECK(comm.finished == 0);
  buckets.finish();
  CHECK(comm.finished == 1);
  CHECK(comm.started.size() == buckets.num_buckets());  // all started exactly once, in plan order
  CHECK(comm.names.front().find("gradient bucket 1 of ") != std::string::npos);
}

TEST_CASE("--timeline's backward spans name the block each hook call finished, for gpt2 and llama") {
  // the head's backward runs in the forward: after the loss only lnf's backward precedes the layers; llama
  // has no wpe (zero elements at h0's offset), so h0's span is h0's
  for (const GPTConfig& c : {tiny_config(), test::tiny_llama(0, 3), test::tiny_llama(1, 3)}) {
    auto be = make_cpu_backend();
    GPT model(c, *be);
    model.init_params(7);
    HostClock clock;
    StepTimeline timeline(model.layout(), clock);
    timeline.begin(1);
    train_forward(model, c);
    timeline.phase("forward");
    model.set_grad_ready_hook([&](size_t off) { timeline.grads_ready(off); });
    model.backward();
    model.set_grad_ready_hook(nullptr);
    timeline.end();
    std::string names;
    for (const TraceEvent& e : timeline.events()) names += (names.empty() ? "" : ", ") + e.name;
    CHECK(names == "forward, backward lnf, backward h2, backward h1, backward h0, backward embeddings");
  }
}

TEST_CASE("a recorded step: join starts the buckets left and joins; wait only after join; cancel reopens") {
  const auto layout = param_layout(tiny_config());
  const size_t total = layout.back().offset + layout.back().count;
  std::vector<float> grads(total);
  RecordingComm comm;
  BucketedAllReduce buckets(comm, plan_grad_buckets(layout, 1000));
  buckets.begin(grads.data(), total, ReduceOp::avg);
  CHECK_THROWS_WITH_AS(buckets.join(), doctest::Contains("cannot be recorded; use finish()"), Error);
  comm.records = true;
  CHECK_THROWS_WITH_AS(buckets.wait(), doctest::Contains("wait before join"), Error);
  buckets.join();
  CHECK(comm.started.size() == buckets.num_buckets());  // every bucket started, none waited for on the host
  CHECK((comm.joined == 1 && comm.waited == 0 && comm.finished == 0));
  buckets.wait();
  buckets.wait();  // after each launch of the recording
  CHECK((comm.joined == 1 && comm.waited == 2));
  buckets.begin(grads.data(), total, ReduceOp::avg);  // a recording abandoned part-way ...
  CHECK_THROWS_WITH_AS(buckets.begin(grads.data(), total, ReduceOp::avg), doctest::Contains("not finished"), Error);
  buckets.cancel();
  buckets.begin(grads.data(), total, ReduceOp::avg);  // ... leaves the next step free to begin
  buckets.finish();
  CHECK(comm.finished == 1);
}
