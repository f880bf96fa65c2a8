// Deterministic column reductions dst (C) += sum over n of f(n, c), for bias and layernorm weight
// gradients. Two stages with a fixed split of the rows into chunks, partial sums in double, so the
// result does not depend on scheduling (no atomics) and stays close to the CPU oracle's double sum.
#pragma once

#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace detail {
constexpr int kColumnThreads = 128;
constexpr int kMaxRowChunks = 256;

// grid (ceil(C / threads), chunks): partial (chunks, C) = per-chunk column sums.
template <typename F>
__global__ void column_partial_kernel(double* partial, F f, int N, int C, int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(N, begin + rows_per_chunk);
  double acc = 0.0;
  for (int n = begin; n < end; ++n) acc += double(f(n, c));
  partial[size_t(blockIdx.y) * C + c] = acc;
}

// Templated only so that the header may define it in every .cu that includes it.
template <typename Acc>
__global__ void column_finish_kernel(float* dst, const Acc* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  Acc acc = 0;
  for (int r = 0; r < chunks; ++r) acc += partial[size_t(r) * C + c];
  dst[c] += float(acc);
}
}  // namespace detail

// column_reduce_accumulate: dst (C) += sum_{n < N} f(n, c); f a __device__ functor (float).
template <typename F>
void column_reduce_accumulate(const OpContext& ctx, float* dst, F f, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const int chunks = N < detail::kMaxRowChunks ? N : detail::kMaxRowChunks;
  const int rows_per_chunk = (N + chunks - 1) / chunks;
  const int used_chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
  ScratchBuffer<double> partial(*ctx.alloc, size_t(used_chunks) * C);
  const unsigned bx = unsigned((C + detail::kColumnThreads - 1) / detail::kColumnThreads);
  detail::column_partial_kernel<<<dim3(bx, unsigned(used_chunks)), detail::kColumnThreads, 0, ctx.stream>>>(
      partial.get(), f, N, C, rows_per_chunk);
  XT_CUDA_LAUNCH_CHECK();
  detail::column_finish_kernel<<<bx, detail::kColumnThreads, 0, ctx.stream>>>(dst, partial.get(), used_chunks, C);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
