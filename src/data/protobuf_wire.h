// The protobuf wire format, read field by field: what xtrain reads of a SentencePiece model without the
// library (spm_codec.cpp's check of the top-level fields, hf_json_write.cpp's conversion to tokenizer.json).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xtrain::spm {

// Protobuf wire format (developers.google.com/protocol-buffers/docs/encoding): fn(field, wire type,
// varint value, length-delimited or fixed bytes) for each field of one message; false when malformed.
template <class Fn>
bool for_each_field(std::string_view b, const Fn& fn) {
  size_t i = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && i < b.size(); shift += 7) {
      const uint8_t c = uint8_t(b[i++]);
      *v |= uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80)) return true;
    }
    return false;
  };
  while (i < b.size()) {
    uint64_t key = 0, v = 0;
    if (!varint(&key)) return false;
    std::string_view data;
    switch (key & 7) {
      case 0: if (!varint(&v)) return false; break;
      case 1: if (b.size() - i < 8) return false; data = b.substr(i, 8), i += 8; break;
      case 2: if (!varint(&v) || b.size() - i < v) return false; data = b.substr(i, v), i += v; break;
      case 5: if (b.size() - i < 4) return false; data = b.substr(i, 4), i += 4; break;
      default: return false;
    }
    fn(uint32_t(key >> 3), uint32_t(key & 7), v, data);
  }
  return true;
}

}  // namespace xtrain::spm
