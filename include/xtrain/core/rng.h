// Counter-based random numbers shared by init, batch sampling and dropout. Every draw is a pure
// function of (key, counter), so results do not depend on world size, thread count or device, and
// resuming at step s needs no saved generator state. Mixing function: SplitMix64 finalizer
// (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define XT_HD __host__ __device__ __forceinline__
#else
#define XT_HD inline
#endif

namespace xtrain {

// splitmix64 finalizer: a bijective 64-bit mix with full avalanche.
XT_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// hash_key: combine a key with one more field (order matters). Used to build stream keys such as
// (seed, "dropout", step, sequence, layer).
XT_HD uint64_t hash_key(uint64_t key, uint64_t field) { return mix64(key ^ mix64(field)); }

// uniform01: the counter-th uniform draw of stream `key`, in [0, 1) with 24 random bits (float-exact).
XT_HD float uniform01(uint64_t key, uint64_t counter) {
  return static_cast<float>(mix64(hash_key(key, counter)) >> 40) * (1.0f / 16777216.0f);
}

// uniform_u64: the counter-th raw 64-bit draw of stream `key`.
XT_HD uint64_t uniform_u64(uint64_t key, uint64_t counter) { return mix64(hash_key(key, counter)); }

// normal: the counter-th standard normal draw of stream `key` (Box-Muller on two 53-bit uniforms).
inline double normal(uint64_t key, uint64_t counter) {
  const double two_pi = 6.283185307179586476925286766559;
  uint64_t a = uniform_u64(key, 2 * counter), b = uniform_u64(key, 2 * counter + 1);
  double u1 = (static_cast<double>(a >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
  double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);          // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

// Stream tags, so that different uses of the same seed never share a stream.
enum RngStream : uint64_t { kRngInit = 1, kRngBatch = 2, kRngDropout = 3, kRngVal = 4, kRngSample = 5 };

}  // namespace xtrain
