// libFuzzer target for the tokenizer.json reader (hf_json.cpp: vocabulary, merges, added tokens,
// normalizers, pre-tokenizers, post-processors) and the pipeline it builds (hf_pipeline.cpp): every
// input ends with a tokenizer or one xtrain::Error, never a crash, a stack overflow or an
// out-of-bounds read (ASan); a tokenizer that loads encodes a few texts to ids inside its vocabulary.
#include <cstdint>
#include <string>

#include <xtrain/core/error.h>
#include "core/json.h"
#include <xtrain/data/tokenizer.h>
#include "fuzz_input_file.h"

namespace {
// texts that reach each kind of step: letters, digits, spaces, newlines, punctuation, a decomposed
// accent (normalizers), the added tokens of the seeds, and bytes that are not UTF-8
const char* const kTexts[] = {"Hello world, it's 2024!\n\n  tabs\tand <|endoftext|> abc<x>cab",
                              "e\xcc\x81t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xff\xfe ab c", ""};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > xtrain::kJsonMaxBytes) return 0;  // read_json_file's own bound
  const std::string path = xtrain::fuzz::input_file(data, size, "tokenizer.json");
  try {
    const xtrain::Tokenizer tok = xtrain::Tokenizer::from_hf_json(path);
    for (const char* text : kTexts)
      for (int32_t id : tok.encode(text))
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
  } catch (const xtrain::Error&) {
  }
  return 0;
}
