// Greedy next tokens (Backend::argmax_rows). Each thread scans its columns in rising order (16-byte packs where
// the rows are 16-byte aligned, then the columns past the last whole pack; else single columns) for the largest
// finite value, keeping the first of equal values, and for the lowest non-finite id; candidates are then combined
// by a total order (larger value, then lower id), which picks the same element in any combining order:
// deterministic, and equal to argmax_code (backend/greedy.h) on the row, the host sampler's greedy rule.
// Training-sized launches take one block per row. A decoding launch (decoding_rows: a batch-1 step's row, whose
// latency is the step's) spreads each row over up to kArgmaxSlices blocks of one load per thread, whose
// candidates the row's last block combines (threadFenceReduction, CUDA samples): ~4.3 us against ~7 us for one
// block scanning a GPT-2 row of 50257 bf16 logits (one H100, bench/results/serving_h100_2026-12.md).
#include <algorithm>
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

// block_best: the block's candidate, in thread 0 (every thread passes its own; blockDim.x a multiple of kWarp, at
// most kThreads). Synchronizes the block.
__device__ Best block_best(Best b) {
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const Best o{__shfl_down_sync(0xffffffffu, b.x, off), __shfl_down_sync(0xffffffffu, b.id, off),
                 __shfl_down_sync(0xffffffffu, b.bad, off)};
    b = combine(b, o);
  }
  __shared__ Best warp_best[kThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) warp_best[warp] = b;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x) / kWarp; ++w) b = combine(b, warp_best[w]);
  return b;
}

// scan_columns: this thread's candidate over the columns [lo, hi) of row l (lo a multiple of the pack size where
// kVec): packs lo / kN + threadIdx.x, + blockDim.x, ... that lie whole below V, then the single columns past them.
template <typename T, bool kVec>
__device__ Best scan_columns(const T* l, int lo, int hi, int V) {
  Best b{0.0f, -1, INT_MAX};
  int tail = lo;  // the first column the single-column loop takes
  if constexpr (kVec) {
    constexpr int kN = Pack<T>::kN;
    const int end = min(hi, V / kN * kN) / kN;  // whole packs below min(hi, V)
#pragma unroll 4
    for (int p = lo / kN + threadIdx.x; p < end; p += blockDim.x) {
      const Pack<T> v = load_pack(l + size_t(p) * kN);
#pragma unroll
      for (int e = 0; e < kN; ++e) scan(b, to_f(v.v[e]), p * kN + e);
    }
    tail = max(lo, end * kN);
  }
  for (int i = tail + threadIdx.x; i < hi; i += blockDim.x) scan(b, to_f(l[i]), i);
  return b;
}

// finish: a row's code into out and its id into tokens (when set)
__device__ void finish(const Best& r, int32_t* out, int32_t* tokens) {
  out[0] = r.bad != INT_MAX ? -1 - r.bad : r.id;
  if (tokens) tokens[0] = r.bad != INT_MAX ? r.bad : r.id;  // a valid id either way
}

// grid (rows), block kThreads. logits of type T (float or bf16, ops.h), rows ld elements apart; kVec: every
// row starts 16-byte aligned (logits aligned, ld a whole number of packs).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    argmax_rows_kernel(int32_t* out, const T* logits, int V, int ld, int32_t* tokens) {
  const Best b = block_best(scan_columns<T, kVec>(logits + size_t(blockIdx.x) * ld, 0, V, V));
  if (threadIdx.x == 0) finish(b, out + blockIdx.x, tokens ? tokens + blockIdx.x : nullptr);
}

// A decoding launch: grid (slices, rows), block kSliceThreads; slice s of a row holds the columns [s * cols,
// (s + 1) * cols) below V (cols a whole number of packs where kVec). state: per row, a counter of the slices done,
// then 3 words (x, id, bad) per slice; the row's last block resets its counter for the next launch.
constexpr int kSliceThreads = 256;
template <typename T, bool kVec>
__global__ void __launch_bounds__(kSliceThreads)
    argmax_slices_kernel(int32_t* out, const T* logits, int V, int ld, int32_t* tokens, unsigned* state, int cols) {
  griddep_begin(true);  // launched programmatically (argmax_rows)
  const int row = blockIdx.y, slice = blockIdx.x, lo = slice * cols;
  unsigned* counter = state + size_t(row) * (1 + 3 * kArgmaxSlices);
  unsigned* cand = counter + 1;  // (slices, 3)
  Best b = block_best(scan_columns<T, kVec>(logits + size_t(row) * ld, lo, min(V, lo + cols), V));
  __shared__ bool last;
  if (threadIdx.x == 0) {
    cand[3 * slice] = __float_as_uint(b.x), cand[3 * slice + 1] = unsigned(b.id), cand[3 * slice + 2] = unsigned(b.bad);
    __threadfence();  // the candidate visible device-wide before the count
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
    if (last) *counter = 0;  // every slice has counted: ready for the next launch (a graph's replay)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  b = Best{0.0f, -1, INT_MAX};
  if (threadIdx.x < gridDim.x)
    b = Best{__uint_as_float(__ldcg(cand + 3 * threadIdx.x)), int(__ldcg(cand + 3 * threadIdx.x + 1)),
             int(__ldcg(cand + 3 * threadIdx.x + 2))};
  b = block_best(b);
  if (threadIdx.x == 0) finish(b, out + row, tokens ? tokens + row : nullptr);
}
}  // namespace

void argmax_rows(const OpContext& ctx, int32_t* out, const void* logits, int rows, int V, int ld, int32_t* tokens) {
  check_argmax_rows_args(rows, V, ld);
  if (rows == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = Pack<T>::kN;
    const bool vec = aligned16(logits) && ld % kN == 0;
    const T* l = static_cast<const T*>(logits);
    if (!decoding_rows(rows)) {
      const auto kernel = vec ? argmax_rows_kernel<T, true> : argmax_rows_kernel<T, false>;
      kernel<<<rows, kThreads, 0, ctx.stream>>>(out, l, V, ld, tokens);
      XT_CUDA_LAUNCH_CHECK();
      return;
    }
    XT_CHECK(ctx.argmax_state != nullptr, "argmax_rows: the OpContext has no argmax state");
    // slices of one load per thread (whole packs), at most kArgmaxSlices
    const int step = vec ? kN : 1, per_block = kSliceThreads * step;
    const int slices = std::min(kArgmaxSlices, (V + per_block - 1) / per_block);
    const int cols = ((V + slices - 1) / slices + step - 1) / step * step;
    const auto kernel = vec ? argmax_slices_kernel<T, true> : argmax_slices_kernel<T, false>;
    launch_kernel(true, ctx.stream, dim3(unsigned((V + cols - 1) / cols), unsigned(rows)), dim3(kSliceThreads), 0,
                  kernel, out, l, V, ld, tokens, ctx.argmax_state, cols);
  });
}

}  // namespace xtrain::cuda
