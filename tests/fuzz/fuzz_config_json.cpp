// libFuzzer target for a model directory's config.json (serve/model_dir.cpp read_model_config: GPT-2
// and Llama fields, sizes, the tokenizer fingerprint): every input ends with a configuration or one
// xtrain::Error; a configuration that is read passes GPTConfig::validate (the model can be built).
#include <cstdint>
#include <string>

#include <xtrain/core/error.h>
#include "core/json.h"
#include "fuzz_input_file.h"
#include <xtrain/model/model.h>
#include <xtrain/serve/export.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > xtrain::kJsonMaxBytes) return 0;  // read_json_file's own bound
  xtrain::fuzz::input_file(data, size, "config.json");
  try {
    uint64_t fingerprint = 0;
    const xtrain::GPTConfig c = xtrain::read_model_config(xtrain::fuzz::input_dir(), nullptr, &fingerprint);
    try {
      c.validate();
    } catch (const xtrain::Error&) {
      __builtin_trap();
    }
  } catch (const xtrain::Error&) {
  }
  return 0;
}
