// AdamW (Loshchilov & Hutter 2019, Alg. 2) with bias correction and decoupled weight decay scaled
// by lr (as PyTorch AdamW), one fused elementwise kernel in fp32. Bias corrections are computed
// once on the host in double.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t count, float lr,
                             float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                             float bc1, float bc2) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float p = param[i];
    param[i] = p - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + weight_decay * p);
  }
}
}  // namespace

void adamw_update(const OpContext& ctx, float* param, const float* grad, float* m, float* v, size_t count,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  XT_CHECK(t >= 1, "AdamW step " << t << " must be >= 1");
  if (count == 0) return;
  const float bc1 = float(1.0 - std::pow(double(beta1), t));
  const float bc2 = float(1.0 - std::pow(double(beta2), t));
  adamw_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(
      param, grad, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
