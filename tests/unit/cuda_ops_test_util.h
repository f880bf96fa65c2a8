// Shared by the CUDA op tests (test_cuda_ops.cpp, test_cuda_ops_llama.cpp): the CPU and GPU backends, tensors
// held by both (Twin, Act: the same seeded values, rounded to bf16 first for a bf16 backend), the comparison
// that prints its figure, and the tolerances every op test shares.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "cpu_ops_test_util.h"

namespace xtrain::test::gpu {

// Same float operations in the same order on both sides (one add or multiply per element, or a
// sequential sum in position order), so the results must be bitwise equal.
constexpr double kExact = 0.0;
// GPU ops accumulate in fp32 (the CPU oracle in double): ~sqrt(K) * 6e-8 relative for sums of K <= 1024
// terms, plus a few ulps from tanhf/expf/rsqrtf: ~1e-6 observed scale. 1e-5 (norm-wise, max|diff| /
// max|ref|) keeps a margin of ~10x, while a wrong index or formula gives O(1).
constexpr double kFp32Rel = 1e-5;
// bf16 activation storage, same (bf16-representable) inputs on both sides, fp32 arithmetic inside the op:
// the only difference is the rounding of each bf16 output to nearest even, at most half an ulp = 2^-8
// relative to the element (8 significant bits), so <= 2^-8 = 3.9e-3 norm-wise, plus the fp32 noise of
// kFp32Rel. 4e-3 allows nothing more: a wrong index, a lost += or a double rounding through a narrower
// type shows up above it.
constexpr double kBf16StoreRel = 4e-3;
// bf16 matmuls (the fp32 weights rounded into bf16 copies) vs the fp32 CPU oracle on the same bf16-rounded
// activations: the weights are rounded to bf16 (at most 2^-8 = 3.9e-3 relative, half an ulp of 8 significant
// bits; sums of K terms of random sign average that down), the products accumulate in fp32, and out / dinp are
// rounded to bf16 once more (<= 2^-8 relative). 1e-2 (norm-wise) bounds that, while a bias over the wrong axis,
// a bias gradient summed over the wrong dimension or one that overwrites instead of accumulating gives O(1).
constexpr double kBf16GemmRel = 1e-2;

struct Backends {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::unique_ptr<Backend> gpu = make_cuda_backend(BackendOptions{Device::cuda, 0, 1});
};
inline Backends& be() {
  static Backends b;
  return b;
}

// Twin: the same values in the CPU backend's and a GPU backend's memory (be().gpu unless given); for
// fp32 tensors (parameters, statistics) and for activations of an fp32 backend.
template <typename T>
struct Twin {
  Backend* gb;
  DeviceBuffer<T> c, g;
  explicit Twin(const std::vector<T>& v, Backend* gpu = nullptr)
      : gb(gpu ? gpu : be().gpu.get()), c(*be().cpu, v.size()), g(*gb, v.size()) {
    be().cpu->copy_to_device(c.get(), v.data(), c.bytes());
    gb->copy_to_device(g.get(), v.data(), g.bytes());
  }
};

inline std::vector<float> down(Backend& b, const DeviceBuffer<float>& d) {
  std::vector<float> v(d.count());
  b.copy_to_host(v.data(), d.get(), d.bytes());
  return v;
}

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_value(bf16_bits(x));
  return v;
}

// Act: one ACTIVATION tensor in the CPU oracle (fp32) and in a GPU backend's activation type (fp32, or
// bf16 with --dtype bf16, Backend::activation_bytes). With a bf16 backend the values are rounded to bf16
// first and the CPU gets the rounded values too, so both sides start from the same numbers and a
// comparison measures the op, not the input rounding.
struct Act {
  Backend* gb;
  bool b16;
  DeviceBuffer<float> c;
  DeviceBuffer<unsigned char> g;
  Act(Backend& gpu, const std::vector<float>& v0)
      : gb(&gpu), b16(gpu.activation_bytes() == 2), c(*be().cpu, v0.size()), g(gpu, v0.size() * gpu.activation_bytes()) {
    const std::vector<float> v = b16 ? round_bf16(v0) : v0;
    be().cpu->copy_to_device(c.get(), v.data(), c.bytes());
    if (b16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_bits(v[i]);
      gb->copy_to_device(g.get(), h.data(), g.bytes());
    } else {
      gb->copy_to_device(g.get(), v.data(), g.bytes());
    }
  }
  float* cp() const { return c.get(); }
  void* gp() const { return g.get(); }
  std::vector<float> gpu_values() const {
    std::vector<float> v(c.count());
    if (!b16) {
      gb->copy_to_host(v.data(), g.get(), g.bytes());
      return v;
    }
    std::vector<uint16_t> h(c.count());
    gb->copy_to_host(h.data(), g.get(), g.bytes());
    for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_value(h[i]);
    return v;
  }
  std::vector<unsigned char> gpu_bytes() const {
    std::vector<unsigned char> v(g.bytes());
    gb->copy_to_host(v.data(), g.get(), g.bytes());
    return v;
  }
};

// g16: a --dtype bf16 CUDA backend (bf16 activations), default attention route.
inline Backend& g16() {
  static std::unique_ptr<Backend> b = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16});
  return *b;
}

// filled: n copies of v (a named function, so `Twin<float> x(filled(n))` is no function declaration).
inline std::vector<float> filled(size_t n, float v = 0.0f) { return std::vector<float>(n, v); }

inline std::vector<float> rnd(size_t n, uint64_t key, double lo = -1.0, double hi = 1.0) {
  return test::to_float(test::random_vec(n, key, lo, hi));
}

// expect_close: GPU result vs CPU result of one buffer, error printed to the log.
inline void expect_close(const std::string& what, const Twin<float>& t, double tol) {
  const double err = rel_err(to_double(down(*t.gb, t.g)), to_double(down(*be().cpu, t.c)));
  MESSAGE(what << ": max|gpu - cpu| / max|cpu| = " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
}
inline void expect_close(const std::string& what, const Act& a, double tol) {
  const double err = rel_err(to_double(a.gpu_values()), to_double(down(*be().cpu, a.c)));
  const std::string label = what + (a.b16 ? " (bf16 storage)" : "");
  MESSAGE(label << ": max|gpu - cpu| / max|cpu| = " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
}

}  // namespace xtrain::test::gpu
