// Muon's parameter update (Backend::muon_apply): param = param * decay - lr * update, fp32, as
// torch.optim.Muon's param.mul_(1 - lr * weight_decay) then param.add_(update, alpha=-adjusted_lr).
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void muon_apply_kernel(float* param, const float* update, size_t count, float decay, float lr) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const float p = param[i] * decay;
    param[i] = p + (-lr) * update[i];
  }
}
}  // namespace

void muon_apply(const OpContext& ctx, float* param, const float* update, size_t count, float decay, float lr) {
  if (count == 0) return;
  muon_apply_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(param, update, count, decay, lr);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
