// libFuzzer target for JSON lines (jsonl.cpp), each input read both as a plain .jsonl and as a
// .jsonl.zst: every input ends with its documents or one xtrain::Error, never a crash or an
// out-of-bounds read (ASan). The bound on the decompressed bytes is the reader's own (JsonlBound) at
// a size the fuzzer's memory limit holds, so a small zstd frame of many megabytes is refused, not read.
#include <cstdint>
#include <string>
#include <string_view>

#include <xtrain/core/error.h>
#include "data/jsonl.h"

namespace {
void read(const std::string& name, std::string_view bytes) {
  xtrain::JsonlBound bound;
  bound.bytes = size_t(4) << 20, bound.available = bound.bytes * xtrain::kJsonlMemoryShare;
  size_t last = 0;
  try {
    xtrain::for_each_jsonl_document(name, bytes, "text", [&](const std::string& text, size_t line) {
      if (line <= last || text.size() > bound.bytes) __builtin_trap();  // lines in order, within the bound
      last = line;
    }, bound);
  } catch (const xtrain::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  read("fuzz.jsonl", bytes);
  read("fuzz.jsonl.zst", bytes);
  return 0;
}
