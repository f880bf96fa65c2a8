// Fused softmax cross-entropy: losses and dlogits in one kernel, one block per row. dlogits may
// alias logits: every thread reads the row (max, sum) before the block synchronizes, and then
// writes only the elements it alone reads again. A target outside [0, V) sets the device error
// flag (thrown by the backend at its next synchronizing call) and that row's loss is NaN.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 512;

// grid (N); no __restrict__: dlogits may alias logits.
__global__ void cross_entropy_kernel(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                     float dloss, int V, int* error_flag) {
  __shared__ float red[kWarp];
  const size_t row = blockIdx.x;
  const float* l = logits + row * V;
  const int32_t target = targets[row];
  if (target < 0 || target >= V) {  // uniform over the block: no thread reaches a barrier
    if (threadIdx.x == 0) {
      atomicCAS(error_flag, kDeviceOk, kBadTarget);
      losses[row] = NAN;
    }
    return;
  }
  const float target_logit = l[target];  // read before any thread may overwrite the row
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, l[i]);
  mx = block_max(mx, red);
  float s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(l[i] - mx);
  s = block_sum(s, red);  // its barriers order every read above before the writes below
  const float log_s = logf(s);
  if (threadIdx.x == 0) losses[row] = log_s + mx - target_logit;
  if (dlogits) {
    float* d = dlogits + row * V;
    const float inv_s = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
      const float prob = expf(l[i] - mx) * inv_s;
      d[i] = (prob - (i == target ? 1.0f : 0.0f)) * dloss;
    }
  }
}
}  // namespace

void cross_entropy_forward_backward(const OpContext& ctx, float* losses, float* dlogits, const float* logits,
                                    const int32_t* targets, float dloss, int N, int V) {
  XT_CHECK(N >= 0 && V > 0, "bad cross-entropy shape N=" << N << " V=" << V);
  if (N == 0) return;
  cross_entropy_kernel<<<N, kThreads, 0, ctx.stream>>>(losses, dlogits, logits, targets, dloss, V, ctx.error_flag);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
