// GELU, tanh approximation (Hendrycks & Gimpel 2016, sec. 2; as in GPT-2), elementwise in fp32:
//   gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kGeluK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;
constexpr int kThreads = 256;

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
  }
}

// gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2), th = tanh(k (x + a x^3));
// 1 - th^2 instead of 1/cosh^2 so that large |x| cannot overflow.
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float th = tanhf(kGeluK * (x + kGeluA * x * x * x));
    const float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    dinp[i] += d * dout[i];
  }
}
}  // namespace

void gelu_forward(const OpContext& ctx, float* out, const float* inp, size_t count) {
  if (count == 0) return;
  gelu_forward_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(out, inp, count);
  XT_CUDA_LAUNCH_CHECK();
}

void gelu_backward(const OpContext& ctx, float* dinp, const float* inp, const float* dout, size_t count) {
  if (count == 0) return;
  gelu_backward_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dinp, inp, dout, count);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
