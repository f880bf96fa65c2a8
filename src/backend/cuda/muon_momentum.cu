// Muon's momentum with Nesterov (Backend::muon_momentum): one elementwise fp32 kernel over every Muon
// matrix in one launch, with torch.lerp's arithmetic, as torch.optim.Muon's buf.lerp_(grad, 1 - momentum)
// and grad.lerp(buf, momentum): a block per chunk of MuonTable (chunk_table.h), the table muon_apply shares.
#include <cstdint>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
__device__ __forceinline__ float lerp(float a, float b, float w) {
  return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}

// block b takes chunks b, b + gridDim.x, ...
__global__ void muon_momentum_kernel(float* buf, float* out, const float* grad, const MuonChunk* chunks,
                                     int num_chunks, float momentum, bool nesterov, float grad_scale) {
  const float w = 1.0f - momentum;
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const MuonChunk ch = chunks[c];
    float* bc = buf + ch.state_at;
    float* oc = out + ch.update_at;
    const float* gc = grad + ch.param_at;
    for (uint32_t i = threadIdx.x; i < ch.count; i += blockDim.x) {
      const float g = gc[i] * grad_scale;
      const float b = lerp(bc[i], g, w);
      bc[i] = b;
      oc[i] = nesterov ? lerp(g, b, momentum) : b;
    }
  }
}
}  // namespace

void muon_momentum(const OpContext& ctx, MuonTable& table, float* buf, float* out, const float* grad,
                   const std::vector<MuonSpan>& spans, float momentum, bool nesterov, float grad_scale) {
  const int num_chunks = table.chunks_for(ctx, spans);
  if (num_chunks == 0) return;
  muon_momentum_kernel<<<blocks_for(size_t(num_chunks), 1), kChunkThreads, 0, ctx.stream>>>(
      buf, out, grad, table.device(), num_chunks, momentum, nesterov, grad_scale);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
