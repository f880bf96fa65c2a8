// Metrics of a training run: the JSON-lines metrics file (rank 0) and the human-readable step line.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <sys/types.h>
#include <string>

#include <nlohmann/json.hpp>

namespace xtrain {

// MetricsWriter: JSON lines, one object per record, flushed per line (rank 0 only; "" = disabled).
// resume_step 0 starts a new file; a resumed run (resume_step = the checkpoint's step) first drops the
// records after resume_step (and broken lines) from the existing file, then appends, so every step is
// recorded once. Throws Error when the file cannot be opened, rewritten or written. A record that
// cannot be written whole (a full disk, a file size limit) is cut off again, so the file ends with
// its last whole record; a new file that holds no record then is removed ("cannot write metrics file
// <path>: <strerror>; removed it, it held no record").
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, int resume_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  int fd_ = -1;
  std::string path_;
  bool fresh_ = false;       // created or truncated by this run (not a resumed run's file)
  off_t whole_bytes_ = 0;    // the file's length after its last whole record
  int dir_fd_ = -1;          // the directory holding it (locate_output) and its name there,
  std::string name_;         // to remove a new file that holds no record
  dev_t dev_ = 0;            // the file, to remove only this one
  ino_t ino_ = 0;
};

// check_metrics_file: throws Error "--metrics <path>: it has other hard links; not truncating the file
// they name" when `path` (resolved as MetricsWriter resolves it) names a file with other hard links,
// which MetricsWriter refuses: a run is refused at start-up, not after its corpus and model are built.
// "" and a missing file pass; other causes are check_writable's (core/io.h).
void check_metrics_file(const std::string& path);

// StepStats: one training step as rank 0 reports it, in the step line and the `train` record.
struct StepStats {
  int step = 0, steps = 0;        // this step (1-based) and --steps
  double loss = 0;                // global mean train loss (nats per token)
  float lr = 0;                   // learning rate of this step
  double grad_norm = 0;           // global gradient norm before clipping
  double ms = 0;                  // wall time of the step (milliseconds)
  double tok_per_s = 0;           // global tokens per second of this step
  double eta_s = 0;               // estimated seconds to the last step of this run; < 0: none (a stopped step)
  std::optional<double> mfu;      // fraction (mfu.h); none on CPUs and on GPUs without a known peak
  size_t mem_in_use_bytes = 0;    // Backend::memory_in_use_bytes() (rank 0); 0 = not tracked (CPU)
  size_t peak_memory_bytes = 0;   // Backend::peak_memory_bytes() (rank 0); 0 = not tracked (CPU)
};

// train_record: the metrics file's `train` record: type "train", step, loss, lr, grad_norm, ms,
// tok_per_s; and where known mfu, mem_in_use_bytes, peak_memory_bytes.
nlohmann::json train_record(const StepStats& s);

// step_line: the human-readable step line, without newline, e.g. (one line)
//   step    10/100 | loss  7.1234 | lr 6.00e-04 | grad norm 1.234 |     41.3 ms |    396012 tok/s | MFU 34.4% |
//   mem 8123/9768 MiB | eta 0m04s
// MFU and "mem <in use>/<peak> MiB" (MiB = 2^20 bytes) only where known; no eta where eta_s < 0.
std::string step_line(const StepStats& s);
// print_step: step_line on stdout, flushed (rank 0).
void print_step(const StepStats& s);

}  // namespace xtrain
