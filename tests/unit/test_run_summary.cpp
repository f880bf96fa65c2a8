// Run summary: the fields of the `final` metrics record and the printed lines, for a full GPU-like
// run, a CPU run without optional figures, and a resumed run with no step left.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include <xtrain/core/error.h>
#include "train/run_summary.h"

using namespace xtrain;

namespace {

RunSummary gpu_run() {
  RunSummary s;
  s.first_step = 51, s.last_step = 100, s.world_size = 2;
  s.params = 124475904;
  s.tokens_per_step = 16 * 1024;
  s.wall_s = 83.4;
  s.tok_per_s = 395912.4;
  s.mfu = 0.3441;
  s.train_loss = 5.08571;
  s.val_loss = 5.35384, s.val_step = 100;
  s.peak_memory_bytes = 9768ull << 20;
  s.max_param_diff = 0;
  s.ckpt = "runs/a.ckpt";
  s.ckpt_xxh3 = 0x00ab12cd34ef5678ull;
  s.timeline = "runs/a.trace.json", s.timeline_first = 52, s.timeline_last = 54;
  return s;
}

}  // namespace

TEST_CASE("final_record: every field of a GPU run") {
  const nlohmann::json r = final_record(gpu_run());
  CHECK(r["type"] == "final");
  CHECK(r["step"] == 100);
  CHECK(r["first_step"] == 51);
  CHECK(r["world_size"] == 2);
  CHECK(r["tokens_seen"] == 100ull * 16 * 1024);  // from step 1, not only this segment's 50 steps
  CHECK(r["wall_s"].get<double>() == doctest::Approx(83.4));
  CHECK(r["tok_per_s"].get<double>() == doctest::Approx(395912.4));
  CHECK(r["mfu"].get<double>() == doctest::Approx(0.3441));
  CHECK(r["loss"].get<double>() == doctest::Approx(5.08571));
  CHECK(r["val_loss"].get<double>() == doctest::Approx(5.35384));
  CHECK(r["val_step"] == 100);
  CHECK(r["params"] == 124475904);
  CHECK(r["peak_memory_bytes"] == 9768ull << 20);
  CHECK(r["max_param_diff"] == 0.0);
  CHECK(r["ckpt"] == "runs/a.ckpt");
  CHECK(r["ckpt_xxh3"] == "00ab12cd34ef5678");  // 16 hex digits, leading zeros kept
  CHECK(r["timeline"] == "runs/a.trace.json");
  CHECK(r.size() == 17);
}

TEST_CASE("final_record: unknown figures are absent, not zero") {
  RunSummary s;
  s.first_step = 1, s.last_step = 10, s.tokens_per_step = 2048, s.wall_s = 12, s.tok_per_s = 1700;
  s.train_loss = 9.5;
  const nlohmann::json r = final_record(s);
  for (const char* k : {"mfu", "val_loss", "val_step", "params", "peak_memory_bytes", "ckpt", "ckpt_xxh3", "timeline"}) {
    INFO(k);
    CHECK_FALSE(r.contains(k));
  }
  CHECK(r["tokens_seen"] == 20480);
  CHECK(r["loss"] == 9.5);
}

TEST_CASE("summary_lines: a GPU run") {
  const auto lines = summary_lines(gpu_run());
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == "done   | steps 51-100 | world 2 | 1,638,400 tokens seen | wall 1m23s");
  CHECK(lines[1] == "loss   | train 5.0857 (step 100) | val 5.3538 (step 100)");
  CHECK(lines[2] == "speed  | 395,912 tok/s (mean after the first step) | MFU 34.4%");
  // bench/bench_gpu.sh reads "peak device memory: (\d+) MiB" from the log.
  CHECK(lines[3] == "memory | peak device memory: 9768 MiB (rank 0, xtrain's allocator)");
  CHECK(lines[4] == "max parameter difference across 2 ranks: 0.000e+00");
  CHECK(lines[5] == "ckpt   | runs/a.ckpt | xxh3 00ab12cd34ef5678");
  CHECK(lines[6] == "trace  | runs/a.trace.json | steps 52-54 (rank 0's --timeline, Chrome trace format)");
  RunSummary one = gpu_run();
  one.timeline_first = one.timeline_last = 100;  // a 1-step run records its only step
  CHECK(summary_lines(one)[6] == "trace  | runs/a.trace.json | step 100 (rank 0's --timeline, Chrome trace format)");
}

TEST_CASE("summary_lines: a CPU run without validation, checkpoint or MFU") {
  RunSummary s;
  s.first_step = 1, s.last_step = 3, s.tokens_per_step = 2048, s.wall_s = 4.6, s.tok_per_s = 1523.7;
  s.train_loss = 10.25;
  s.max_param_diff = 1.5e-9;
  const auto lines = summary_lines(s);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "done   | steps 1-3 | world 1 | 6,144 tokens seen | wall 0m05s");
  CHECK(lines[1] == "loss   | train 10.2500 (step 3)");
  CHECK(lines[2] == "speed  | 1,524 tok/s (mean after the first step)");
  CHECK(lines[3] == "max parameter difference across 1 rank: 1.500e-09");
}

TEST_CASE("summary: a resumed run with no step left, and inconsistent input") {
  RunSummary s;
  s.first_step = 101, s.last_step = 100, s.tokens_per_step = 10;
  const auto lines = summary_lines(s);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "done   | no step left after step 100 | world 1 | 1,000 tokens seen | wall 0m00s");
  CHECK(final_record(s)["step"] == 100);

  RunSummary bad = s;
  bad.first_step = 0;
  CHECK_THROWS_AS(final_record(bad), Error);
  bad = s;
  bad.last_step = 98;  // ended before it began
  CHECK_THROWS_AS(summary_lines(bad), Error);
  bad = s;
  bad.ckpt_xxh3 = 1;  // a checksum of no file
  CHECK_THROWS_AS(final_record(bad), Error);
  bad = s;
  bad.wall_s = -1;
  CHECK_THROWS_AS(summary_lines(bad), Error);
}
