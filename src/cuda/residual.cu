// Residual add (out = a + b) and in-place accumulation (dst += src), elementwise in fp32.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// out may alias a or b: each element is read before it is written by the same thread.
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void add_inplace_kernel(float* dst, const float* src, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}
}  // namespace

void residual_forward(const OpContext& ctx, float* out, const float* a, const float* b, size_t count) {
  if (count == 0) return;
  residual_forward_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(out, a, b, count);
  XT_CUDA_LAUNCH_CHECK();
}

void add_inplace(const OpContext& ctx, float* dst, const float* src, size_t count) {
  if (count == 0) return;
  add_inplace_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, count);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
