// libFuzzer target for the safetensors reader: SafeTensors::parse must end every input with either
// a parsed file or one xtrain::Error, never a crash or an out-of-bounds read (ASan); every entry of
// a file that parses converts to fp32 or throws Error, into a buffer of exactly count() floats, transposed
// too for a 2-D entry (the path model directories take: read() checks the header as parse() does, and
// converts the same way, in parts of at most 16 MiB; test_safetensors.cpp covers the parts).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <xtrain/core/error.h>
#include <xtrain/serve/safetensors.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const xtrain::SafeTensors st = xtrain::SafeTensors::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const xtrain::StEntry& e : st.entries()) {
      try {
        const std::vector<float> v = st.to_f32(e);
        if (v.size() != e.count()) __builtin_trap();
        if (e.shape.size() == 2) {
          std::vector<float> t(e.count());
          st.to_f32_transposed_into(e, t.data());
          const size_t A = size_t(e.shape[0]), B = size_t(e.shape[1]);
          for (size_t a = 0; a < A && !v.empty(); a += A / 2 + 1)  // a few elements: (a, b) lands at b*A + a
            for (size_t b = 0; b < B; b += B / 2 + 1)
              if (std::memcmp(&t[b * A + a], &v[a * B + b], 4) != 0) __builtin_trap();
        }
      } catch (const xtrain::Error&) {
      }
    }
  } catch (const xtrain::Error&) {
  }
  return 0;
}
