// The step line and the `train` metrics record from one StepStats: MFU and device memory appear where
// known (GPUs) and are absent, not zero, where not (CPU).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <xtrain/core/error.h>

#include "train/metrics.h"

using namespace xtrain;

namespace {

StepStats cpu_step() {
  StepStats s;
  s.step = 10, s.steps = 100, s.loss = 7.12341, s.lr = 6e-4f, s.grad_norm = 1.2345, s.ms = 41.26;
  s.tok_per_s = 397100.4, s.eta_s = 3.6;
  return s;
}

}  // namespace

TEST_CASE("step line and train record on a CPU: no MFU, no memory") {
  const StepStats s = cpu_step();
  CHECK(step_line(s) ==
        "step    10/100 | loss  7.1234 | lr 6.00e-04 | grad norm 1.234 |     41.3 ms |    397100 tok/s | eta 0m04s");
  const nlohmann::json r = train_record(s);
  CHECK(r["type"] == "train");
  CHECK(r["step"] == 10);
  CHECK(r["loss"].get<double>() == doctest::Approx(7.12341));
  CHECK(r["lr"].get<double>() == doctest::Approx(6e-4));
  CHECK(r["grad_norm"].get<double>() == doctest::Approx(1.2345));
  CHECK(r["ms"].get<double>() == doctest::Approx(41.26));
  CHECK(r["tok_per_s"].get<double>() == doctest::Approx(397100.4));
  CHECK(r.size() == 7);
}

TEST_CASE("step line and train record on a GPU: MFU in percent, memory in MiB and bytes") {
  StepStats s = cpu_step();
  s.mfu = 0.34449;
  s.mem_in_use_bytes = 8123ull << 20;
  s.peak_memory_bytes = (9768ull << 20) + 1000;  // MiB rounded to the nearest
  CHECK(step_line(s) == "step    10/100 | loss  7.1234 | lr 6.00e-04 | grad norm 1.234 |     41.3 ms |    397100 tok/s"
                        " | MFU 34.4% | mem 8123/9768 MiB | eta 0m04s");
  const nlohmann::json r = train_record(s);
  CHECK(r["mfu"].get<double>() == doctest::Approx(0.34449));  // a fraction, not percent
  CHECK(r["mem_in_use_bytes"] == 8123ull << 20);
  CHECK(r["peak_memory_bytes"] == (9768ull << 20) + 1000);
  CHECK(r.size() == 10);
}

TEST_CASE("MetricsWriter never truncates a file with other hard links (it would empty the file they name)") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("xtrain_metrics_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string other = (dir / "precious.txt").string(), metrics = (dir / "m.jsonl").string();
  { std::ofstream(other) << "precious"; }
  fs::create_hard_link(other, metrics);
  CHECK_THROWS_WITH_AS(MetricsWriter(metrics, 0), doctest::Contains("other hard links"), Error);
  CHECK(fs::file_size(other) == 8);
  fs::remove(metrics);
  { MetricsWriter w(metrics, 0); w.write({{"step", 1}}); }  // a file of its own: written
  CHECK(fs::file_size(metrics) > 0);
  fs::remove_all(dir);
}
