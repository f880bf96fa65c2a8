// GELU, tanh approximation (Hendrycks & Gimpel 2016, sec. 2; as in GPT-2), and its derivative, in fp32: the one
// statement of the formulas for every kernel that applies them (gelu.cu's elementwise ops, gemv.cu's epilogue).
//   gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715.
#pragma once

#include <cuda_runtime.h>

namespace xtrain::cuda {

constexpr float kGeluK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
}

// gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2), th = tanh(k (x + a x^3));
// 1 - th^2 instead of 1/cosh^2 so that large |x| cannot overflow.
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float th = tanhf(kGeluK * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
}

}  // namespace xtrain::cuda
