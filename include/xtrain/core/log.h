// The one format of xtrain's per-rank messages, "rank R (host): <message>" on stderr, and printing
// on rank 0 only (the step lines, the banner, results).
#pragma once

#include <string>

namespace xtrain {

// rank_prefix: "rank R (host): ", e.g. for warnings built elsewhere.
std::string rank_prefix(int rank, const std::string& host);

// print_rank_line: rank_prefix + message + newline on stderr, written at once and flushed (ranks
// share the terminal; a line must not interleave with another rank's).
void print_rank_line(int rank, const std::string& host, const std::string& message);

// host_name: this machine's name (gethostname), "unknown-host" when it has none: the host of rank_prefix.
std::string host_name();

// print0: printf to stdout on rank 0 only (other ranks print nothing), flushed.
void print0(int rank, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace xtrain
