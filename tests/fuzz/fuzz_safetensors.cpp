// libFuzzer target for the safetensors reader: SafeTensors::parse must end every input with either
// a parsed file or one xtrain::Error, never a crash or an out-of-bounds read (ASan); every entry of
// a file that parses converts to fp32 or throws Error.
#include <cstdint>
#include <string>

#include <xtrain/core/error.h>
#include <xtrain/serve/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const xtrain::SafeTensors st = xtrain::SafeTensors::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const xtrain::StEntry& e : st.entries()) {
      try {
        if (st.to_f32(e).size() != e.count()) __builtin_trap();
      } catch (const xtrain::Error&) {
      }
    }
  } catch (const xtrain::Error&) {
  }
  return 0;
}
