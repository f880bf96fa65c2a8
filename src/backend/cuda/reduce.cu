// Reductions: sum / sum of squares of a whole buffer (loss totals, gradient norms) in double, and
// plain column sums (bias gradients). Fixed grid and fixed order: deterministic run to run.
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;  // partials per buffer; a fixed number keeps the order fixed

// partial[block] = sum over the block's grid-stride slice of x (or x^2), in double.
__global__ void sum_partial_kernel(double* partial, const float* x, size_t count, bool squares) {
  __shared__ double shared[kWarp];
  double acc = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// result[0] = the sum of partial (n); result[1] = the device error flag (an int, exact in a double) when
// error_flag is given, so one copy brings both to the host.
__global__ void sum_finish_kernel(double* result, const double* partial, int n, const int* error_flag) {
  __shared__ double shared[kWarp];
  double acc = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    result[0] = acc;
    result[1] = error_flag ? double(*error_flag) : 0.0;
  }
}

template <typename T>
struct Identity {
  const T* src;
  int C;
  __device__ ColumnTerms<1> operator()(int n, int c) const { return {{to_f(src[size_t(n) * C + c])}}; }
};
}  // namespace

double sum(const OpContext& ctx, const float* x, size_t count, bool squares, int* device_error) {
  const bool flag = device_error != nullptr && ctx.error_flag != nullptr;
  if (count == 0 && !flag) return 0.0;
  unsigned blocks = count == 0 ? 0 : blocks_for(count, kThreads);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  ScratchBuffer<double> partial(*ctx.alloc, blocks + 2, "sums");  // then the result and the error flag
  if (blocks > 0) {
    sum_partial_kernel<<<blocks, kThreads, 0, ctx.stream>>>(partial.get(), x, count, squares);
    XT_CUDA_LAUNCH_CHECK();
  }
  sum_finish_kernel<<<1, kThreads, 0, ctx.stream>>>(partial.get() + blocks, partial.get(), int(blocks),
                                                    flag ? ctx.error_flag : nullptr);
  XT_CUDA_LAUNCH_CHECK();
  double result[2] = {0.0, 0.0};
  XT_CUDA_CHECK(cudaMemcpyAsync(result, partial.get() + blocks, sizeof(result), cudaMemcpyDeviceToHost,
                                ctx.stream));
  XT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  if (flag) *device_error = static_cast<int>(result[1]);
  return result[0];
}

void column_sum_accumulate(const OpContext& ctx, float* dst, const float* src, int N, int C, bool accumulate) {
  column_reduce_accumulate<1>(ctx, {{dst}}, Identity<float>{src, C}, N, C, accumulate);
}

// column_partial_bf16x2_kernel: the partial stage of the bf16 column sum where C is even and src 4-byte
// aligned: a thread takes 2 adjacent columns (one bf16x2 load per row, a warp reads 128 contiguous bytes),
// sums its chunk's rows in fp32 (at most ceil(N / 256) terms of bf16 values: N = 16384 gives 64) and stores
// the chunk's sums in double, added by column_finish in double as the other sums. One conversion to
// double per chunk instead of per element: the element path's float-to-double conversions (16 per clock per
// SM) and narrow loads made it ~2 TB/s on an H200. grid (ceil(C / 2 / kThreads), chunks).
__global__ void column_partial_bf16x2_kernel(double* partial, const __nv_bfloat162* src, int N, int C,
                                             int rows_per_chunk) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x, pairs = C / 2;
  if (p >= pairs) return;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(N, begin + rows_per_chunk);
  float a0 = 0.0f, a1 = 0.0f;
#pragma unroll 8
  for (int n = begin; n < end; ++n) {
    const float2 v = __bfloat1622float2(src[size_t(n) * pairs + p]);
    a0 += v.x;
    a1 += v.y;
  }
  double* out = partial + size_t(blockIdx.y) * C + size_t(p) * 2;
  out[0] = a0;
  out[1] = a1;
}

void column_sum_accumulate(const OpContext& ctx, float* dst, const __nv_bfloat16* src, int N, int C, bool accumulate) {
  if (N <= 0 || C <= 0 || C % 2 != 0 || reinterpret_cast<uintptr_t>(src) % 4 != 0) {  // the element path (double
    // per element; it also takes the empty sums)
    column_reduce_accumulate<1>(ctx, {{dst}}, Identity<__nv_bfloat16>{src, C}, N, C, accumulate);
    return;
  }
  const RowChunks rc = row_chunks(N);
  ScratchBuffer<double> partial(*ctx.alloc, size_t(rc.chunks) * C, "column sums");
  const unsigned bx = unsigned((C / 2 + kThreads - 1) / kThreads);
  column_partial_bf16x2_kernel<<<dim3(bx, unsigned(rc.chunks)), kThreads, 0, ctx.stream>>>(
      partial.get(), reinterpret_cast<const __nv_bfloat162*>(src), N, C, rc.rows_per_chunk);
  XT_CUDA_LAUNCH_CHECK();
  column_finish<1>(ctx, {{dst}}, partial.get(), rc.chunks, C, accumulate);
}

}  // namespace xtrain::cuda
