// Progress: a status line for long start-up work (tokenizing a corpus, reading or writing a large
// checkpoint): bytes done of the total, MB/s and ETA, at most one line every few seconds, on rank 0.
// On a terminal one line is rewritten in place (\r); elsewhere (a log file, a pipe) each report is its
// own line, so logs stay readable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace xtrain {

// minutes_seconds: a duration as "16m30s" (seconds rounded; minutes not capped at 60), the form of
// every ETA and wall time xtrain prints. Negative durations print as 0m00s.
std::string minutes_seconds(double seconds);

// kLongWorkBytes: the size from which reading or writing a file (checkpoints, exports) is worth a
// progress line (~100 MB, a second or more on a local disk).
constexpr uint64_t kLongWorkBytes = 100'000'000;

// stream_is_terminal: `out` is a terminal a person watches: isatty(), except in processes started by
// Open MPI's mpirun, whose stdout is always a pseudo-terminal of mpirun's (even when mpirun's own
// output goes to a file), so a log would fill with \r lines; those get plain lines.
bool stream_is_terminal(std::FILE* out);

struct ProgressOptions {
  std::FILE* out = nullptr;  // nullptr: log_stream() (log.h), stdout unless the program chose stderr
  double interval_s = 5.0;  // the least time between two progress lines (seconds)
  // Work of fewer bytes prints nothing, not even the final line (e.g. kLongWorkBytes for checkpoints).
  uint64_t min_total_bytes = 0;
  // Terminal mode: 1 = rewrite one line with \r, 0 = one line per report, -1 = stream_is_terminal(out).
  int terminal = -1;
  // Monotonic clock in seconds; empty = std::chrono::steady_clock. Tests inject their own.
  std::function<double()> clock;
};

// long_work_options: the options of file progress (checkpoints, exports): min_total_bytes =
// kLongWorkBytes, the rest default.
ProgressOptions long_work_options();

// Progress over `total_bytes` bytes of work named `what` (e.g. "tokenize data/brown.txt"). Prints only
// when rank == 0 and total_bytes >= min_total_bytes. Lines (MB = 1e6 bytes):
//   <what> | 12.3 / 100.0 MB (12%) | 4.1 MB/s | eta 0m21s
// and, from finish(), the total:
//   <what> | 100.0 MB in 24.4 s | 4.1 MB/s
// No line appears before interval_s has passed, so work that ends sooner prints only the final line.
// Throws Error when `done` decreases or exceeds the total. Not thread-safe.
class Progress {
 public:
  Progress(std::string what, uint64_t total_bytes, int rank, ProgressOptions opt = {});
  // A line left open on a terminal (work abandoned by an exception) is ended, so the error that
  // follows starts on its own line.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // update: `done` bytes of the total are finished (cumulative, not an increment).
  void update(uint64_t done);
  // finish: the work is complete (done = total); prints the final line once. Later calls do nothing.
  void finish();

 private:
  double now() const;
  void emit(const std::string& line, bool final);

  std::string what_;
  uint64_t total_ = 0, done_ = 0;
  bool print_ = false, terminal_ = false, finished_ = false;
  ProgressOptions opt_;
  double start_s_ = 0, last_s_ = 0;
  size_t last_len_ = 0;  // length of the line on screen (terminal mode), to blank its tail
};

}  // namespace xtrain
