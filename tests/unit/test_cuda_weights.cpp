// The bf16 weight mirror (Backend::prepare_weights, CUDA --dtype bf16): the matmuls read prepared weights
// and biases from it and get the bits of their per-call copies; it is read (not the fp32 weights) where
// shape and alignment allow, and falls back per call where they do not; every write and free through the
// backend drops it; it costs 2 bytes per parameter, allocated once. Label gpu; exits 77 (skipped) when the
// CUDA runtime sees no device, before doctest runs (gpu_test_main.cpp).
#include <doctest/doctest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>

using namespace xtrain;

namespace {

using Bytes = std::vector<unsigned char>;

Backend& g16() {
  // the mirror under test: BackendOptions::weight_copy's default, --weight-copy persistent
  static std::unique_ptr<Backend> b = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16});
  REQUIRE(b->weight_copy_bytes() == 2);
  return *b;
}

std::vector<float> rnd(size_t n, uint64_t key) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(2.0 * uniform01(key, i) - 1.0);
  return v;
}
// bf16 activations: the upper halves of random floats (every one a finite bf16 value)
std::vector<uint16_t> rnd_bf16(size_t n, uint64_t key) {
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = float(2.0 * uniform01(key, i) - 1.0);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h[i] = uint16_t(u >> 16);
  }
  return h;
}
template <typename T>
DeviceBuffer<T> up(Backend& be, const std::vector<T>& v) {
  DeviceBuffer<T> d(be, v.size());
  be.copy_to_device(d.get(), v.data(), d.bytes());
  return d;
}
template <typename T>
Bytes bytes_of(Backend& be, const DeviceBuffer<T>& d) {
  Bytes b(d.bytes());
  be.copy_to_host(b.data(), d.get(), b.size());
  return b;
}

// Three layers in one parameter buffer, as a model lays its tensors out (offsets in floats).
// kMirrored (OC=160, IC=96) and its bias at multiples of 128 elements (256 bytes in bf16): read from the
// mirror. kPadded (24, 36): rows not a multiple of 8 (padded in a copy): copied per call. kUnaligned
// (64, 64) and its bias 8 elements past a 256-byte boundary of the mirror: copied per call.
struct Layer {
  int IC, OC;
  size_t w, b;  // offsets of the weight (OC,IC) and the bias (OC)
};
constexpr Layer kMirrored{96, 160, 0, 15360}, kPadded{36, 24, 15616, 16512}, kUnaligned{64, 64, 16648, 20744};
constexpr size_t kCount = 20808;  // after kUnaligned's bias
constexpr int N = 48;

// outputs: every matmul op of one layer, on fixed inputs, from the weights in params (bytes of each output;
// the accumulating gradients start from the same values each time).
Bytes outputs(Backend& be, const float* params, const Layer& l) {
  const size_t nin = size_t(N) * l.IC, nout = size_t(N) * l.OC;
  DeviceBuffer<uint16_t> inp = up(be, rnd_bf16(nin, 1)), dout = up(be, rnd_bf16(nout, 2)), out(be, nout),
                         pre(be, nout), act(be, nout), dinp = up(be, rnd_bf16(nin, 3)), dpre(be, nin),
                         scratch(be, nin), x = up(be, rnd_bf16(nin, 4)), y = up(be, rnd_bf16(nin, 5));
  DeviceBuffer<float> dw = up(be, rnd(size_t(l.OC) * l.IC, 6)), db = up(be, rnd(l.OC, 7));
  const float *w = params + l.w, *b = params + l.b;
  Bytes all;
  auto keep = [&](const auto& buf) {
    const Bytes v = bytes_of(be, buf);
    all.insert(all.end(), v.begin(), v.end());
  };
  be.matmul_forward(out.get(), inp.get(), w, b, N, l.IC, l.OC);  // bias in the epilogue (a bf16 bias copy)
  keep(out);
  be.matmul_forward(out.get(), inp.get(), w, nullptr, N, l.IC, l.OC);  // as the lm_head
  keep(out);
  be.matmul_backward(dinp.get(), dw.get(), db.get(), dout.get(), inp.get(), w, N, l.IC, l.OC);
  keep(dinp), keep(dw), keep(db);
  be.matmul_gelu_forward(pre.get(), act.get(), inp.get(), w, b, N, l.IC, l.OC);
  keep(pre), keep(act);
  be.gelu_matmul_backward(dpre.get(), dw.get(), db.get(), dout.get(), y.get(), x.get(), w, scratch.get(), N, l.IC,
                          l.OC);
  keep(dpre), keep(dw);
  return all;
}

}  // namespace

TEST_CASE("prepared weights give the matmuls the bits of per-call bf16 copies") {
  Backend& g = g16();
  DeviceBuffer<float> params = up(g, rnd(kCount, 10));
  std::vector<Bytes> per_call;
  for (const Layer& l : {kMirrored, kPadded, kUnaligned}) per_call.push_back(outputs(g, params.get(), l));
  g.prepare_weights(params.get(), kCount);
  int k = 0;
  for (const Layer& l : {kMirrored, kPadded, kUnaligned}) {
    CAPTURE(l.IC);
    CHECK(outputs(g, params.get(), l) == per_call[k++]);
  }
}

// A write behind the backend's back (a raw cudaMemcpy) is not seen by a mirrored weight until the next
// prepare_weights: that shows the mirror is what the GEMMs read. Writes through the backend drop it.
TEST_CASE("the mirror is read where it can be, and every write through the backend drops it") {
  Backend& g = g16();
  const std::vector<float> old_w = rnd(kCount, 20), new_w = rnd(kCount, 21);
  DeviceBuffer<float> params = up(g, old_w), fresh = up(g, new_w);
  const Bytes old_a = outputs(g, params.get(), kMirrored), new_a = outputs(g, fresh.get(), kMirrored);
  const Bytes new_b = outputs(g, fresh.get(), kPadded);
  REQUIRE(old_a != new_a);
  auto behind_the_back = [&] {
    g.prepare_weights(params.get(), kCount);
    g.synchronize();
    REQUIRE(cudaMemcpy(params.get(), new_w.data(), params.bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // a pageable copy may return before its DMA ends
  };
  behind_the_back();
  CHECK(outputs(g, params.get(), kMirrored) == old_a);  // the mirror, prepared from the old weights
  CHECK(outputs(g, params.get(), kPadded) == new_b);    // padded rows: converted per call from fp32
  g.prepare_weights(params.get(), kCount);
  CHECK(outputs(g, params.get(), kMirrored) == new_a);

  SUBCASE("copy_to_device") {
    g.copy_to_device(params.get(), old_w.data(), params.bytes());
    g.prepare_weights(params.get(), kCount);
    g.copy_to_device(params.get() + 100, new_w.data() + 100, sizeof(float));  // one element of A's weight
    std::vector<float> one = old_w;
    one[100] = new_w[100];
    DeviceBuffer<float> expect = up(g, one);
    CHECK(outputs(g, params.get(), kMirrored) == outputs(g, expect.get(), kMirrored));
  }
  SUBCASE("zero") {
    behind_the_back();
    g.zero(params.get() + kCount - 1, sizeof(float));  // the last element, outside layer A
    std::vector<float> z = new_w;
    z[kCount - 1] = 0.0f;
    DeviceBuffer<float> expect = up(g, z);
    CHECK(outputs(g, params.get(), kMirrored) == outputs(g, expect.get(), kMirrored));
  }
  SUBCASE("adamw_update") {
    behind_the_back();
    DeviceBuffer<float> grad = up(g, rnd(kCount, 22)), m(g, kCount), v(g, kCount);
    g.zero(m.get(), m.bytes()), g.zero(v.get(), v.bytes());
    g.adamw_update(params.get(), grad.get(), m.get(), v.get(), {{kUnaligned.w, 64, true}}, 1e-2f, 0.9f, 0.95f, 1e-8f,
                   0.1f, 1.0f, 1);  // one tensor, not layer A's
    CHECK(outputs(g, params.get(), kMirrored) == new_a);
  }
}

// The mirror belongs to its source: freeing the parameters frees it, and a buffer handed out later at the same
// address (the caching allocator reuses blocks) is read for what it holds, never through the old mirror.
TEST_CASE("freeing the parameters frees their mirror, also when the address comes back") {
  Backend& g = g16();
  // a size no other block of these tests has, so the allocator can only hand the same block out again
  const size_t n = (size_t(1) << 21) + 7;
  const std::vector<float> w1 = rnd(n, 40), w2 = rnd(n, 41);
  DeviceBuffer<float> params = up(g, w2);
  const Bytes e2 = outputs(g, params.get(), kMirrored);
  const float* addr = params.get();
  params.reset();
  params = up(g, w1);
  REQUIRE(params.get() == addr);
  g.prepare_weights(params.get(), n);
  const Bytes e1 = outputs(g, params.get(), kMirrored);
  REQUIRE(e1 != e2);
  g.zero(params.get(), sizeof(float));  // a write drops the mirror's validity (as AdamW's does), not its block
  // the mirror's block goes with it: both the parameters (4 bytes each) and the mirror (2) are released
  // (a mirror held before this test may have been released by prepare_weights already, so compare the
  // bytes freed by this reset, not the count before the test)
  const size_t in_use = cuda_alloc_stats(g).bytes_in_use;
  params.reset();
  CHECK(in_use - cuda_alloc_stats(g).bytes_in_use >= n * (sizeof(float) + 2));
  params = up(g, w2);
  CHECK(params.get() == addr);
  CHECK(outputs(g, params.get(), kMirrored) == e2);  // not e1, the mirror of the freed buffer
}

TEST_CASE("the mirror costs 2 bytes per parameter, allocated once; fp32 keeps none") {
  Backend& g = g16();
  CHECK(g.weight_copy_bytes() == 2);
  const size_t in_use = cuda_alloc_stats(g).bytes_in_use;
  DeviceBuffer<float> params = up(g, rnd(kCount, 30));
  const CudaAllocStats before = cuda_alloc_stats(g);
  g.prepare_weights(params.get(), kCount);
  const CudaAllocStats first = cuda_alloc_stats(g);
  CHECK(first.bytes_in_use - before.bytes_in_use >= kCount * 2);
  CHECK(first.bytes_in_use - before.bytes_in_use <= 2 * (kCount * 2 + 511));  // a cached block may be up to 2x
  for (int i = 0; i < 3; ++i) g.prepare_weights(params.get(), kCount);
  const CudaAllocStats later = cuda_alloc_stats(g);
  CHECK(later.bytes_in_use == first.bytes_in_use);
  CHECK(later.cuda_malloc_calls == first.cuda_malloc_calls);
  params.reset();
  CHECK(cuda_alloc_stats(g).bytes_in_use == in_use);

  std::unique_ptr<Backend> f32 = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::fp32});
  CHECK(f32->weight_copy_bytes() == 0);
  DeviceBuffer<float> p32 = up(*f32, rnd(kCount, 31));
  const size_t in_use32 = cuda_alloc_stats(*f32).bytes_in_use;
  f32->prepare_weights(p32.get(), kCount);
  CHECK(cuda_alloc_stats(*f32).bytes_in_use == in_use32);

  // the up-front memory estimate counts it: 4 fp32 buffers (params, grads, m, v) + 2 bytes with bf16
  const GPTConfig cfg;
  const TrainMemory m16 = estimate_train_memory(cfg, 1, 8, g), m32 = estimate_train_memory(cfg, 1, 8, *f32);
  CHECK(m16.weights == 18.0 * m16.num_params);
  CHECK(m32.weights == 16.0 * m32.num_params);
}
