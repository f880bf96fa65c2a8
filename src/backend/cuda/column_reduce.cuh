// Deterministic column reductions dst_k (C) += sum over n of f(n, c).v[k], k < K (or =, the first writer of a
// gradient: Grad::assign), for bias and the norms' weight and bias gradients. Two stages with a fixed split of the
// rows into chunks, partial sums in double, so the result does not depend on scheduling (no atomics) and stays close
// to the CPU oracle's double sum. K sums of the same inputs share one pass. A kernel that already reads every row
// can write the per-chunk sums itself and call only the finish stage (row_chunks, column_finish: the norms'
// backwards, launch_norm_backward in row_norm.cuh).
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

// ColumnTerms<K>: what f(n, c) returns, the element's term of each of the K sums.
// ColumnOut<K>: the K destinations (C) fp32 each, in the same order.
template <int K>
struct ColumnTerms {
  float v[K];
};
template <int K>
struct ColumnOut {
  float* dst[K];
};

namespace detail {
constexpr int kColumnThreads = 128;
constexpr int kMaxRowChunks = 256;
constexpr int kFinishLanes = 16;  // row-lanes per column in the finish stage

// grid (ceil(C / threads), chunks): partial (K, chunks, C) = per-chunk column sums. The stage reads
// every input byte once, coalesced (a warp reads 32 consecutive columns of a row), and for C = 768,
// N = 16384 its 1536 blocks fill an H200 in one wave: it runs at memory bandwidth, so more chunks or
// wider loads would not shorten it, while reading fewer bytes does (hence K sums in one pass). The
// unroll lets a thread have several rows' loads in flight; each sum still adds in row order.
template <int K, typename F>
__global__ void column_partial_kernel(double* partial, F f, int N, int C, int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(N, begin + rows_per_chunk);
  double acc[K] = {};
#pragma unroll 4
  for (int n = begin; n < end; ++n) {
    const ColumnTerms<K> t = f(n, c);
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] += double(t.v[k]);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) partial[(size_t(k) * gridDim.y + blockIdx.y) * C + c] = acc[k];
}

// grid (ceil(C / 32), K), block (32, kFinishLanes): output k = blockIdx.y, column c = blockIdx.x * 32 +
// threadIdx.x. Row-lane y sums chunks y, y + kFinishLanes, ... in double (a warp reads 32 consecutive
// columns of a chunk), then lane 0 adds the lanes' sums in lane order: a fixed order, so the same
// bits on every run, and each thread adds chunks / kFinishLanes partials instead of all of them.
// accumulate false: the sum is stored, dst not read (its old value, NaN included, is gone).
template <int K>
__global__ void column_finish_kernel(ColumnOut<K> out, const double* partial, int chunks, int C, bool accumulate) {
  __shared__ double lane_sum[kFinishLanes][kWarp];
  const int c = blockIdx.x * kWarp + threadIdx.x, k = blockIdx.y;
  const double* p = partial + size_t(k) * chunks * C;
  double acc = 0.0;
  if (c < C)
    for (int r = threadIdx.y; r < chunks; r += kFinishLanes) acc += p[size_t(r) * C + c];
  lane_sum[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  double s = 0.0;
#pragma unroll
  for (int y = 0; y < kFinishLanes; ++y) s += lane_sum[y][threadIdx.x];
  float* dst = out.dst[0];
#pragma unroll
  for (int j = 1; j < K; ++j)  // a select, not a dynamic index into the parameter array
    if (j == k) dst = out.dst[j];
  dst[c] = accumulate ? dst[c] + float(s) : float(s);
}
}  // namespace detail

// RowChunks: the fixed split of N rows into chunks of rows_per_chunk consecutive rows (the last one may
// be shorter), at most kMaxRowChunks of them; it depends on N only, so the sums' order does too.
struct RowChunks {
  int rows_per_chunk, chunks;
};
inline RowChunks row_chunks(int N) {
  const int target = N < detail::kMaxRowChunks ? N : detail::kMaxRowChunks;
  const int rows_per_chunk = (N + target - 1) / target;
  return {rows_per_chunk, (N + rows_per_chunk - 1) / rows_per_chunk};
}

// column_finish: out.dst[k] (C) += sum over chunks r of partial (K, chunks, C) [k][r][c] (= when accumulate is
// false), in the finish kernel's fixed order. The second stage of column_reduce_accumulate, and of any kernel
// that writes per-chunk column sums itself (launch_norm_backward). N > 0, C > 0.
template <int K>
void column_finish(const OpContext& ctx, ColumnOut<K> out, const double* partial, int chunks, int C, bool accumulate) {
  const dim3 finish_grid(unsigned((C + kWarp - 1) / kWarp), unsigned(K));
  detail::column_finish_kernel<K><<<finish_grid, dim3(kWarp, detail::kFinishLanes), 0, ctx.stream>>>(
      out, partial, chunks, C, accumulate);
  XT_CUDA_LAUNCH_CHECK();
}

// column_zero: out.dst[k] (C) = 0 for k < K (null ones skipped): an empty sum (N == 0) assigned.
template <int K>
void column_zero(const OpContext& ctx, ColumnOut<K> out, int C) {
  for (int k = 0; k < K; ++k)
    if (out.dst[k] && C > 0) XT_CUDA_CHECK(cudaMemsetAsync(out.dst[k], 0, size_t(C) * sizeof(float), ctx.stream));
}

// column_reduce_accumulate: out.dst[k] (C) += sum_{n < N} f(n, c).v[k] for k < K (= when accumulate is false:
// column_finish); f a __device__ functor (int n, int c) -> ColumnTerms<K>. Scratch: K * min(N, 256) * C doubles
// from ctx.alloc.
template <int K, typename F>
void column_reduce_accumulate(const OpContext& ctx, ColumnOut<K> out, F f, int N, int C, bool accumulate) {
  if (C <= 0) return;
  if (N <= 0) {
    if (!accumulate) column_zero<K>(ctx, out, C);
    return;
  }
  const RowChunks rc = row_chunks(N);
  ScratchBuffer<double> partial(*ctx.alloc, size_t(K) * rc.chunks * C);
  const unsigned bx = unsigned((C + detail::kColumnThreads - 1) / detail::kColumnThreads);
  detail::column_partial_kernel<K><<<dim3(bx, unsigned(rc.chunks)), detail::kColumnThreads, 0, ctx.stream>>>(
      partial.get(), f, N, C, rc.rows_per_chunk);
  XT_CUDA_LAUNCH_CHECK();
  column_finish<K>(ctx, out, partial.get(), rc.chunks, C, accumulate);
}

}  // namespace xtrain::cuda
