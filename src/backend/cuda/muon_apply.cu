// Muon's parameter update (Backend::muon_apply): param = param * decay - lr * update, fp32, over every Muon
// matrix in one launch (MuonTable's chunks), as torch.optim.Muon's param.mul_(1 - lr * weight_decay) then
// param.add_(update, alpha=-adjusted_lr).
#include <cstdint>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
// block b takes chunks b, b + gridDim.x, ...; a chunk's lr is its span's adjusted one, float(double(lr) *
// lr_ratio) as the host computes it (IEEE double multiply, round to nearest float: the same bits)
__global__ void muon_apply_kernel(float* param, const float* update, const MuonChunk* chunks, int num_chunks,
                                  float decay, float lr) {
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const MuonChunk ch = chunks[c];
    const float lr_c = __double2float_rn(double(lr) * ch.lr_ratio);
    float* pc = param + ch.param_at;
    const float* uc = update + ch.update_at;
    for (uint32_t i = threadIdx.x; i < ch.count; i += blockDim.x) {
      const float p = pc[i] * decay;
      pc[i] = p + (-lr_c) * uc[i];
    }
  }
}
}  // namespace

void muon_apply(const OpContext& ctx, MuonTable& table, float* param, const float* update,
                const std::vector<MuonSpan>& spans, float decay, float lr) {
  const int num_chunks = table.chunks_for(ctx, spans);
  if (num_chunks == 0) return;
  muon_apply_kernel<<<blocks_for(size_t(num_chunks), 1), kChunkThreads, 0, ctx.stream>>>(param, update, table.device(),
                                                                                    num_chunks, decay, lr);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
