// The host side of weight uploads (xtrain/backend/weight_upload.h): the element conversions of a
// weights file's dtypes, the tiled transpose, and the CPU backend's upload that uses them.
#include <xtrain/backend/weight_upload.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace xtrain {

namespace {
// IEEE 754 binary16 -> binary32, exact (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// element: element i of a tensor of dtype w at p, as fp32 (exact for each of the three)
inline float element(const char* p, size_t i, WireDType w) {
  float f;
  if (w == WireDType::f32) {
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  if (w == WireDType::f16) return half_to_float(h);
  const uint32_t bits = uint32_t(h) << 16;  // bfloat16 is the top half of a binary32
  std::memcpy(&f, &bits, 4);
  return f;
}

// HostWeightUpload: one buffer; each part converted at once into host parameter memory
class HostWeightUpload final : public WeightUpload {
 public:
  explicit HostWeightUpload(size_t capacity) : buf_(capacity) {}
  size_t capacity_bytes() const override { return buf_.size(); }
  char* buffer() override { return buf_.data(); }
  void write(const WeightPart& part) override { convert_weight_part(buf_.data(), part); }
  void finish() override {}

 private:
  std::vector<char> buf_;
};
}  // namespace

void convert_weight_part(const char* p, const WeightPart& part) {
  const size_t i0 = part.i0, i1 = part.i1, A = part.A, B = part.B;
  const WireDType w = part.wire;
  float* dst = part.dst;
  if (i0 >= i1) return;
  if (!part.transpose) {
    if (w == WireDType::f32) std::memcpy(dst + i0, p, (i1 - i0) * 4);
    else
      for (size_t i = i0; i < i1; ++i) dst[i] = element(p, i - i0, w);
    return;
  }
  // In tiles of kTile x kTile elements: both the rows read and the rows written stay in cache.
  constexpr size_t kTile = 64;
  const size_t a_begin = i0 / B, a_end = (i1 - 1) / B + 1;
  for (size_t a0 = a_begin; a0 < a_end; a0 += kTile)
    for (size_t b0 = 0; b0 < B; b0 += kTile) {
      const size_t a1 = std::min(a_end, a0 + kTile), b1 = std::min(B, b0 + kTile);
      for (size_t a = a0; a < a1; ++a) {
        const size_t lo = std::max(b0, i0 > a * B ? i0 - a * B : 0), hi = std::min(b1, i1 - a * B);  // a*B < i1
        for (size_t b = lo; b < hi; ++b) dst[b * A + a] = element(p, a * B + b - i0, w);
      }
    }
}

std::unique_ptr<WeightUpload> make_host_weight_upload(size_t capacity_bytes) {
  return std::make_unique<HostWeightUpload>(capacity_bytes);
}

}  // namespace xtrain
