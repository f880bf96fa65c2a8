// Command-line pieces shared by every front end (xtrain_mpi, xtrain_threads and the tools).
#pragma once

#include <cstdint>
#include <string>

namespace xtrain {

// parse_seed: a --seed value: decimal digits only, 0 .. 2^64-1; UsageError "--seed must be an integer in
// [0, 2^64-1], got '<text>'" otherwise (e.g. "-1", which strtoull would take as 2^64-1).
uint64_t parse_seed(const std::string& text);

}  // namespace xtrain
