// Residual add (out = a + b) and in-place accumulation (dst += src), elementwise, fp32 arithmetic on
// activations of type T (float or bf16, ops.h).
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// out may alias a or b: each element is read before it is written by the same thread.
template <typename T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

template <typename T>
__global__ void add_inplace_kernel(T* dst, const T* src, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<T>(to_f(dst[i]) + to_f(src[i]));
}
}  // namespace

void residual_forward(const OpContext& ctx, void* out, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    residual_forward_kernel<T><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), count);
  });
  XT_CUDA_LAUNCH_CHECK();
}

void add_inplace(const OpContext& ctx, void* dst, const void* src, size_t count) {
  if (count == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    add_inplace_kernel<T><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), count);
  });
  XT_CUDA_LAUNCH_CHECK();
}

void add_inplace_f32(const OpContext& ctx, float* dst, const float* src, size_t count) {
  if (count == 0) return;
  add_inplace_kernel<float><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, count);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
