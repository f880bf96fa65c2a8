// Greedy next tokens (Backend::argmax_rows): one block per row of logits. Each thread scans its columns in
// rising order (16-byte packs p = threadIdx.x, + blockDim.x, ... where the rows are 16-byte aligned, then the
// columns past the last whole pack; else single columns) for the largest finite value, keeping the first of
// equal values, and for the lowest non-finite id; the block then combines the threads' candidates by a total order (larger value,
// then lower id), which picks the same element in any combining order: deterministic, and equal to
// argmax_code (backend/greedy.h) on the row, the host sampler's greedy rule.
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 1024;  // a GPT-2 row (50257 columns) is ~50 loads per thread

// Best: a candidate of one thread or group: the largest finite logit x at the lowest id (id -1: none seen)
// and the lowest id of a non-finite logit (INT_MAX: none seen).
struct Best {
  float x;
  int id, bad;
};

__device__ __forceinline__ Best combine(const Best& a, const Best& b) {
  Best r = a;
  if (b.id >= 0 && (a.id < 0 || b.x > a.x || (b.x == a.x && b.id < a.id))) r.x = b.x, r.id = b.id;
  r.bad = min(a.bad, b.bad);
  return r;
}

// scan: column i with logit x, seen after every lower column of this thread (so the first non-finite one is
// the lowest, and strictly larger keeps the first of equal values)
__device__ __forceinline__ void scan(Best& b, float x, int i) {
  if (!isfinite(x)) b.bad = min(b.bad, i);
  else if (b.id < 0 || x > b.x) b.x = x, b.id = i;
}

// grid (rows), block kThreads. logits of type T (float or bf16, ops.h), rows ld elements apart; kVec: every
// row starts 16-byte aligned (logits aligned, ld a whole number of packs).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(int32_t* out, const T* logits, int V, int ld, int32_t* tokens, bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (argmax_rows)
  const T* l = logits + size_t(blockIdx.x) * ld;
  Best b{0.0f, -1, INT_MAX};
  int tail = 0;  // the first column the single-column loop takes
  if constexpr (kVec) {
    constexpr int kN = Pack<T>::kN;
    const int packs = V / kN;
#pragma unroll 4
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T> v = load_pack(l + size_t(p) * kN);
#pragma unroll
      for (int e = 0; e < kN; ++e) scan(b, to_f(v.v[e]), p * kN + e);
    }
    tail = packs * kN;
  }
  for (int i = tail + threadIdx.x; i < V; i += blockDim.x) scan(b, to_f(l[i]), i);
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.x, off), __shfl_down_sync(0xffffffffu, b.id, off),
                 __shfl_down_sync(0xffffffffu, b.bad, off)};
    b = combine(b, o);
  }
  __shared__ Best warp_best[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    Best r = warp_best[0];
    for (int w = 1; w < int(blockDim.x) / kWarp; ++w) r = combine(r, warp_best[w]);
    out[blockIdx.x] = r.bad != INT_MAX ? -1 - r.bad : r.id;
    if (tokens) tokens[blockIdx.x] = r.bad != INT_MAX ? r.bad : r.id;  // a valid id either way
  }
}
}  // namespace

void argmax_rows(const OpContext& ctx, int32_t* out, const void* logits, int rows, int V, int ld, int32_t* tokens) {
  check_argmax_rows_args(rows, V, ld);
  if (rows == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    const auto kernel = aligned16(logits) && ld % Pack<T>::kN == 0 ? argmax_rows_kernel<T, true>
                                                                   : argmax_rows_kernel<T, false>;
    launch_kernel(decoding_rows(rows), ctx.stream, dim3(rows), dim3(kThreads), 0, kernel, out,
                  static_cast<const T*>(logits), V, ld, tokens, decoding_rows(rows));
  });
}

}  // namespace xtrain::cuda
