// libFuzzer target for SentencePiece models as xtrain reads them (spm_codec.cpp: the protobuf field
// walk and its checks, then the library's load, the newline probe, encode and decode): every input
// ends with a model or one xtrain::Error; a model that loads gives ids inside its vocabulary.
#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/core/error.h>
#include <xtrain/data/tokenizer.h>
#include "fuzz_input_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = xtrain::fuzz::input_file(data, size, "spm.model");
  try {
    const xtrain::Tokenizer tok = xtrain::Tokenizer::from_sentencepiece(path);
    const std::vector<int32_t> ids = tok.encode("Hello world.\nA second line, 42 \xe2\x96\x81 words.");
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    (void)tok.decode(ids);
  } catch (const xtrain::Error&) {
  }
  return 0;
}
