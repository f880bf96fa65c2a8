// Command-line handling shared by the C++ bench programs (bench_cuda_ops, gemm_algos, gemm_fp8): positional
// integer arguments with defaults and bounds, --help anywhere, a one-line usage error (exit 2) otherwise;
// and XT_BENCH_CHECK, their check of a library call's status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

// XT_BENCH_CHECK(prog, call): a CUDA, cuBLAS or cuBLASLt call whose status (0 = success) ends the bench with
// one line "<prog>: <call> failed (<status>) at line N" and exit 1.
#define XT_BENCH_CHECK(prog, x)                                                                \
  do {                                                                                         \
    auto s_ = (x);                                                                             \
    if (int(s_) != 0) {                                                                        \
      std::fprintf(stderr, "%s: %s failed (%d) at line %d\n", prog, #x, int(s_), __LINE__);    \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

namespace xtrain::bench {

// BenchArgs: argv of a program taking at most `max_args` positional arguments. help() prints the usage
// and `what` when -h or --help is among them; check() exits 2 after a one-line error when there are more.
struct BenchArgs {
  int argc;
  char** argv;
  const char* tool;   // the program's name, first in every message
  const char* usage;  // "usage: tool [A=1] ..."
  bool help(const char* what) const {
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") {
        std::printf("%s\n%s\n", usage, what);
        return true;
      }
    return false;
  }
  void check(int max_args) const {
    if (argc - 1 > max_args) fail("too many arguments");
  }
  // integer(i, def, lo, hi): argument i (1-based) as an integer in [lo, hi], def when absent.
  int integer(int i, int def, int lo, int hi) const {
    if (argc <= i) return def;
    char* end = nullptr;
    const long v = std::strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < lo || v > hi) fail("bad argument '" + std::string(argv[i]) + "'");
    return int(v);
  }
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s; %s\n", tool, why.c_str(), usage);
    std::exit(2);
  }
};

}  // namespace xtrain::bench
