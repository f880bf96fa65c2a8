// Metrics of a training run: the JSON-lines metrics file (rank 0) and the human-readable step line.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace xtrain {

// MetricsWriter: JSON lines, one object per record, flushed per line (rank 0 only; "" = disabled).
// resume_step 0 starts a new file; a resumed run (resume_step = the checkpoint's step) first drops the
// records after resume_step (and broken lines) from the existing file, then appends, so every step is
// recorded once. Throws Error when the file cannot be opened, rewritten or written.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, int resume_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// print_step: one human-readable line per step (rank 0).
void print_step(int step, int steps, double loss, float lr, double grad_norm, double ms, double tok_per_s,
                double eta_s);

}  // namespace xtrain
