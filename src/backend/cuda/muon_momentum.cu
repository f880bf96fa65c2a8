// Muon's momentum with Nesterov (Backend::muon_momentum): one elementwise fp32 kernel with torch.lerp's
// arithmetic, as torch.optim.Muon's buf.lerp_(grad, 1 - momentum) and grad.lerp(buf, momentum).
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float lerp(float a, float b, float w) {
  return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

__global__ void muon_momentum_kernel(float* buf, float* out, const float* grad, size_t count, float momentum,
                                     bool nesterov, float grad_scale) {
  const float w = 1.0f - momentum;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float b = lerp(buf[i], g, w);
    buf[i] = b;
    out[i] = nesterov ? lerp(g, b, momentum) : b;
  }
}
}  // namespace

void muon_momentum(const OpContext& ctx, float* buf, float* out, const float* grad, size_t count, float momentum,
                   bool nesterov, float grad_scale) {
  if (count == 0) return;
  muon_momentum_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(buf, out, grad, count, momentum,
                                                                                 nesterov, grad_scale);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
