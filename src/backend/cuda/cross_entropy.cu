// Fused softmax cross-entropy: losses and dlogits in one kernel, one block per row of Vp (padded
// vocabulary) columns, of which the first V take part; the padded dlogits columns are set to 0.
// When dlogits is wanted and the row's V elements fit in shared memory twice per SM, the row is read
// from memory once and its gradient written once (GPT-2 bf16: a 100 KB row), instead of the row being
// read twice: bf16 rows go to shared memory with their max, then each exponential is computed once, kept
// there as fp16 (scaled, see kExpScale) and summed, then the gradient comes from the kept exponentials;
// fp32 rows (small vocabularies only) are kept as they are and take the two passes below from shared
// memory. Otherwise two passes over memory: max and sum of exponentials together (online softmax,
// Milakov & Gimelshein 2018), then the gradient. dlogits may alias logits: every thread reads the row (max, sum) before the block
// synchronizes, and then writes only the elements it alone reads again (or reads shared memory). A
// target outside [0, V) sets the device error flag (thrown by the backend at its next synchronizing
// call) and that row's loss is NaN.
#include <map>
#include <mutex>
#include <tuple>

#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // packs a thread loads in the first pass before using them

// The per-element exponentials use the hardware's exp2 (__expf = ex2.approx(x log2 e), CUDA C++
// Programming Guide, "Intrinsic Functions": max error 2 + floor(|1.173 x|) ulp; arguments here are <= 0,
// and for the probabilities that matter, above about -20): the libm expf's range reduction made the
// kernel issue-bound rather than memory-bound (~24 instructions per element for the two passes).
// online softmax state of this thread: running max and sum of exp(x - max)
__device__ __forceinline__ void online_add(float& mx, float& s, float x) {
  if (x > mx) {
    s = s * __expf(mx - x) + 1.0f;  // first element: 0 * exp(-inf) + 1 (ex2.approx(-inf) = +0)
    mx = x;
  } else {
    s += __expf(x - mx);
  }
}

// kExpScale: the on-chip bf16 path keeps exp(x - max) in (0, 1] as fp16 of exp(x - max) * 2^15 (at most
// 32768, below fp16's 65504; a power of two, so scaling and unscaling are exact). fp16 is normal from
// 2^-14, so every exponential from 2^-29 up keeps fp16's unit roundoff of 2^-11, an eighth of the bf16
// unit roundoff (2^-8) the gradient is stored with; below 2^-29 the absolute error is at most 2^-40 (half
// of the subnormal spacing 2^-24, unscaled), and below about 2^-40 the exponential becomes 0. The row's sum
// (the loss) is taken from the fp32 exponentials before rounding. tests/unit/test_cuda_ops.cpp checks every
// gradient element against the bounds that follow.
constexpr float kExpScale = 32768.0f, kExpUnscale = 1.0f / 32768.0f;

// read_row: every element of the row l (V columns, the first VP of them as whole packs) once, passed to
// f as a float; kStore: also copied to `cache` (shared memory). A thread takes packs threadIdx.x,
// + blockDim.x, ... in that order, kUnroll of them loaded before the first is used, so that several loads
// per thread are in flight; then the element tail [kN*VP, V).
template <bool kStore, typename T, typename F>
__device__ __forceinline__ void read_row(const T* l, T* cache, int V, int VP, F&& f) {
  constexpr int kN = Pack<T>::kN;
  for (int i0 = threadIdx.x; i0 < VP; i0 += kUnroll * blockDim.x) {
    Pack<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * int(blockDim.x) < VP) x[u] = load_pack(l + size_t(i0 + u * blockDim.x) * kN);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i >= VP) break;
      if constexpr (kStore) store_pack(cache + size_t(i) * kN, x[u]);
#pragma unroll
      for (int k = 0; k < kN; ++k) f(to_f(x[u].v[k]));
    }
  }
  for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x) {
    const T x = l[i];
    if constexpr (kStore) cache[i] = x;
    f(to_f(x));
  }
}

// grid (N); no __restrict__: dlogits may alias logits. logits, dlogits: activations of type T (float
// or bf16, ops.h), fp32 arithmetic. kVec: rows are 16-byte aligned (Vp a multiple of the pack size and
// aligned bases), so the first V/kN*kN columns move as 16-byte packs (4 float or 8 bf16: fewer, wider
// memory transactions), the rest element by element. kOnChip: the dynamic shared memory holds
// on_chip_bytes<T>(V) (dlogits non-null): for bf16 the row, then its fp16 exponentials in its place (read
// and written as 16-byte packs); for fp32 the row, filled by the first pass and read by the second.
template <typename T, bool kVec, bool kOnChip>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets, float dloss, int V,
                         int Vp, int* error_flag) {
  constexpr int kN = Pack<T>::kN;
  extern __shared__ uint4 row_cache[];  // uint4: 16-byte aligned for the packs
  T* cache = reinterpret_cast<T*>(row_cache);
  __shared__ float red[kWarp];
  const size_t row = blockIdx.x;
  const T* l = logits + row * Vp;
  const int32_t target = targets[row];
  if (target < 0 || target >= V) {  // uniform over the block: no thread reaches a barrier
    if (threadIdx.x == 0) {
      atomicCAS(error_flag, kDeviceOk, kBadTarget);
      losses[row] = NAN;
    }
    return;
  }
  const float target_logit = to_f(l[target]);  // read before any thread may overwrite the row
  const int VP = kVec ? V / kN : 0;  // whole packs; then the element tail [kN*VP, V)
  if constexpr (kOnChip && sizeof(T) == 2) {
    static_assert(sizeof(__half) == sizeof(T) && Pack<T>::kN == 8, "fp16 exponentials replace a bf16 row in place");
    __half* e_row = reinterpret_cast<__half*>(row_cache);
    float tmx = -INFINITY;  // 1: the row to shared memory, and its max (no exponential yet)
    read_row<true>(l, cache, V, VP, [&](float x) { tmx = fmaxf(tmx, x); });
    const float mx = block_max(tmx, red);  // its barriers order the row's shared-memory writes before the reads
    float ts = 0.0f;  // 2: each exponential once, summed, and kept scaled as fp16 in place of its logit
    for (int i = threadIdx.x; i < VP; i += blockDim.x) {  // a thread rewrites only the packs it reads
      const Pack<T> x = load_pack(cache + size_t(i) * kN);
      Vec<__half, kN> e;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const float ek = __expf(to_f(x.v[k]) - mx);
        ts += ek;
        e.v[k] = __float2half_rn(ek * kExpScale);
      }
      store_vec<__half, kN>(e_row + size_t(i) * kN, e);
    }
    for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x) {
      const float ei = __expf(to_f(cache[i]) - mx);
      ts += ei;
      e_row[i] = __float2half_rn(ei * kExpScale);
    }
    const float s = block_sum(ts, red);  // at least 1 (the max's own term); orders the writes before step 3
    if (threadIdx.x == 0) losses[row] = logf(s) + mx - target_logit;
    T* d = dlogits + row * Vp;  // 3: the gradient from the kept exponentials
    const float p_scale = kExpUnscale / s;
    for (int i = threadIdx.x; i < VP; i += blockDim.x) {
      const Vec<__half, kN> e = load_vec<__half, kN>(e_row + size_t(i) * kN);
      Pack<T> g;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const int j = i * kN + k;
        g.v[k] = from_f<T>((__half2float(e.v[k]) * p_scale - (j == target ? 1.0f : 0.0f)) * dloss);
      }
      store_pack(d + size_t(i) * kN, g);
    }
    for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x)
      d[i] = from_f<T>((__half2float(e_row[i]) * p_scale - (i == target ? 1.0f : 0.0f)) * dloss);
    for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) d[i] = from_f<T>(0.0f);
    return;
  }
  float tmx = -INFINITY, ts = 0.0f;
  read_row<kOnChip>(l, cache, V, VP, [&](float x) { online_add(tmx, ts, x); });
  const float mx = block_max(tmx, red);
  float s = tmx == -INFINITY ? 0.0f : ts * expf(tmx - mx);  // a thread with no element adds 0
  s = block_sum(s, red);  // its barriers order every read (and cache write) above before the writes below
  const float log_s = logf(s);
  if (threadIdx.x == 0) losses[row] = log_s + mx - target_logit;
  if (dlogits) {
    T* d = dlogits + row * Vp;
    const T* x_row = kOnChip ? cache : l;  // the same values, from shared memory or again from memory
    const float inv_s = 1.0f / s;
    auto grad = [&](float x, int i) { return (__expf(x - mx) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss; };
    for (int i = threadIdx.x; i < VP; i += blockDim.x) {
      const Pack<T> x = load_pack(x_row + size_t(i) * kN);
      Pack<T> g;
#pragma unroll
      for (int k = 0; k < kN; ++k) g.v[k] = from_f<T>(grad(to_f(x.v[k]), i * kN + k));
      store_pack(d + size_t(i) * kN, g);
    }
    for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x) d[i] = from_f<T>(grad(to_f(x_row[i]), i));
    for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) d[i] = from_f<T>(0.0f);
  }
}

// on_chip_bytes: shared memory for a row's first V activations, whole 16-byte packs.
template <typename T>
size_t on_chip_bytes(int V) {
  return (size_t(V) * sizeof(T) + 15) / 16 * 16;
}

// fits_twice_per_sm: `kernel` may take `bytes` of dynamic shared memory (opting in above the default
// 48 KiB on the current device) and two of its blocks fit on one SM: while one block waits at its
// reductions, the other keeps loading. With room for only one block per SM the SM's memory traffic
// would stop at every reduction, so such rows (fp32 GPT-2: 201 KB of an H200's 228 KB) take the
// two-pass path.
// The answer is kept per (device, kernel, bytes), so the occupancy is asked once, not at every step. The
// kernel's dynamic shared memory limit only ever grows (to the largest row that fits), so a launch
// answered yes earlier stays allowed after a smaller row's query; all of it under a lock, so threads
// sharing a device never race on the attribute.
template <typename Kernel>
bool fits_twice_per_sm(Kernel kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t>, bool> known;
  static std::map<std::pair<int, const void*>, size_t> limit;  // the attribute as set per device, kernel
  int device = 0;
  XT_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const void* k = reinterpret_cast<const void*>(kernel);
  const auto key = std::make_tuple(device, k, bytes);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int optin = 0;
  XT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int blocks = 0;
  if (bytes <= size_t(optin)) {
    size_t& set = limit[{device, k}];
    if (bytes > set) {
      XT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
      set = bytes;
    }
    XT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, bytes));
  }
  return known[key] = blocks >= 2;
}

template <typename T, bool kVec>
void launch(const OpContext& ctx, float* losses, T* dlogits, const T* logits, const int32_t* targets, float dloss,
            int N, int V, int Vp) {
  const size_t bytes = on_chip_bytes<T>(V);
  if (dlogits && fits_twice_per_sm(cross_entropy_kernel<T, kVec, true>, bytes))
    cross_entropy_kernel<T, kVec, true><<<N, kThreads, bytes, ctx.stream>>>(losses, dlogits, logits, targets, dloss,
                                                                             V, Vp, ctx.error_flag);
  else
    cross_entropy_kernel<T, kVec, false><<<N, kThreads, 0, ctx.stream>>>(losses, dlogits, logits, targets, dloss, V,
                                                                          Vp, ctx.error_flag);
  XT_CUDA_LAUNCH_CHECK();
}
}  // namespace

void cross_entropy_forward_backward(const OpContext& ctx, float* losses, void* dlogits, const void* logits,
                                    const int32_t* targets, float dloss, int N, int V, int Vp) {
  XT_CHECK(N >= 0 && V > 0 && Vp >= V, "bad cross-entropy shape N=" << N << " V=" << V << " Vp=" << Vp);
  if (N == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dl = static_cast<T*>(dlogits);
    const T* lg = static_cast<const T*>(logits);
    const bool vec = Vp % Pack<T>::kN == 0 && aligned16(logits) && aligned16(dlogits);  // dlogits may be null
    if (vec)
      launch<T, true>(ctx, losses, dl, lg, targets, dloss, N, V, Vp);
    else
      launch<T, false>(ctx, losses, dl, lg, targets, dloss, N, V, Vp);
  });
}

}  // namespace xtrain::cuda
