// GELU, tanh approximation (Hendrycks & Gimpel 2016, sec. 2; as in GPT-2), elementwise, fp32 arithmetic
// on activations of type T (float or bf16, ops.h):
//   gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kGeluK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;
constexpr int kThreads = 256;

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = to_f(inp[i]);
    out[i] = from_f<T>(0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x))));
  }
}

// gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2), th = tanh(k (x + a x^3));
// 1 - th^2 instead of 1/cosh^2 so that large |x| cannot overflow.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = to_f(inp[i]);
    const float th = tanhf(kGeluK * (x + kGeluA * x * x * x));
    const float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    dinp[i] = from_f<T>(to_f(dinp[i]) + d * to_f(dout[i]));
  }
}
}  // namespace

void gelu_forward(const OpContext& ctx, void* out, const void* inp, size_t count) {
  if (count == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(out), static_cast<const T*>(inp), count);
  });
  XT_CUDA_LAUNCH_CHECK();
}

void gelu_backward(const OpContext& ctx, void* dinp, const void* inp, const void* dout, size_t count) {
  if (count == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), count);
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
