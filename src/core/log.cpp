// Per-rank messages and rank-0 printing (see src/core/log.h).
#include <xtrain/core/log.h>

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace xtrain {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || !buf[0]) return "unknown-host";
  return buf;
}

std::string rank_prefix(int rank, const std::string& host) {
  return "rank " + std::to_string(rank) + " (" + host + "): ";
}

void print_rank_line(int rank, const std::string& host, const std::string& message) {
  const std::string line = rank_prefix(rank, host) + message + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

namespace {
std::FILE* g_log_stream = nullptr;  // nullptr: stdout (set_log_stream)
}  // namespace

std::FILE* log_stream() { return g_log_stream ? g_log_stream : stdout; }

void set_log_stream(std::FILE* out) { g_log_stream = out; }

void print0(int rank, const char* fmt, ...) {
  if (rank != 0) return;
  std::FILE* out = log_stream();
  va_list args;
  va_start(args, fmt);
  std::vfprintf(out, fmt, args);
  va_end(args);
  std::fflush(out);
}

}  // namespace xtrain
