// The one format of xtrain's per-rank messages, "rank R (host): <message>" on stderr, and printing
// on rank 0 only (the step lines, the banner, results).
#pragma once

#include <cstdio>
#include <string>

namespace xtrain {

// rank_prefix: "rank R (host): ", e.g. for warnings built elsewhere.
std::string rank_prefix(int rank, const std::string& host);

// print_rank_line: rank_prefix + message + newline on stderr, written at once and flushed (ranks
// share the terminal; a line must not interleave with another rank's).
void print_rank_line(int rank, const std::string& host, const std::string& message);

// host_name: this machine's name (gethostname), "unknown-host" when it has none: the host of rank_prefix.
std::string host_name();

// print0: printf to log_stream() on rank 0 only (other ranks print nothing), flushed.
void print0(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// log_stream: where print0's lines and progress lines (ProgressOptions' default, progress.h) go: stdout,
// the trainer's log, unless the program chose another stream with set_log_stream. A program whose
// stdout is its result (xtrain_eval's table) sets stderr first thing, so that what the code it shares
// with the trainer prints ("tokenize ...", "cache  | ...") stays off its result. Set it before any
// thread prints (it is read unsynchronized).
std::FILE* log_stream();
void set_log_stream(std::FILE* out);

}  // namespace xtrain
