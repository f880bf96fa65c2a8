// libFuzzer target for the checkpoint reader: parse_checkpoint must end every
// input with either a state or one xtrain::Error, never a crash or an out-of-bounds read (ASan).
// Each input is tried twice: as given, and with its last 8 bytes replaced by the XXH3-64 of the rest,
// so that the header fields behind a valid checksum get fuzzed too (random bytes almost never carry
// a matching checksum).
#include <cstdint>
#include <cstring>
#include <string>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/checkpoint/checkpoint.h>

namespace {
void parse(const std::string& bytes) {
  try {
    const xtrain::CheckpointState st = xtrain::parse_checkpoint(bytes, "fuzz");
    // a state that parses is self-consistent: what restore_checkpoint relies on
    if (st.params.size() != st.meta.num_params || st.m.size() != st.params.size() || st.v.size() != st.params.size())
      __builtin_trap();
  } catch (const xtrain::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  parse(bytes);
  if (bytes.size() >= sizeof(uint64_t)) {
    const uint64_t sum = xtrain::xxh3_64(bytes.data(), bytes.size() - sizeof(uint64_t));
    std::memcpy(&bytes[bytes.size() - sizeof(uint64_t)], &sum, sizeof(sum));
    parse(bytes);
  }
  return 0;
}
