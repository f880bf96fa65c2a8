// libFuzzer target for the token files users bring (token_shard.cpp): llm.c shards (a 1024-byte
// header, then uint16 or uint32 ids) and nanoGPT's headerless uint16 files. Every input ends with a
// stream of ids inside the vocabulary or one xtrain::Error, never a crash or a read past the mapping.
#include <cstdint>
#include <string>

#include <xtrain/core/error.h>
#include "data/token_shard.h"
#include "fuzz_input_file.h"

namespace {
constexpr int kVocab = 50257;  // GPT-2's: uint16 shards hold ids up to 65535, so the check matters

void check(const xtrain::TokenStream& s) {
  for (int32_t id : s.to_vector())
    if (id < 0 || id >= kVocab) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = xtrain::fuzz::input_file(data, size, "shard.bin");
  try {
    check(xtrain::open_llmc_shard(path, kVocab));
  } catch (const xtrain::Error&) {
  }
  try {
    check(xtrain::open_nanogpt_bin(path, kVocab));
  } catch (const xtrain::Error&) {
  }
  return 0;
}
