// Muon's momentum with Nesterov (Backend::muon_momentum): one elementwise fp32 kernel over every Muon
// matrix in one launch, with torch.lerp's arithmetic, as torch.optim.Muon's buf.lerp_(grad, 1 - momentum)
// and grad.lerp(buf, momentum); and MuonTable, the chunk table it and muon_apply share (as PyTorch's
// multi_tensor_apply: a block per chunk).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr size_t kChunkElems = size_t(kThreads) * 64;  // 64 per thread, as adamw.cu

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

bool same_spans(const std::vector<MuonSpan>& a, const std::vector<MuonSpan>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const MuonSpan& x, const MuonSpan& y) {
           return x.param_at == y.param_at && x.state_at == y.state_at && x.update_at == y.update_at &&
                  x.count == y.count && x.lr_ratio == y.lr_ratio;
         });
}
}  // namespace

MuonTable::~MuonTable() {
  if (alloc_) alloc_->free(table_);
}

int MuonTable::chunks_for(const OpContext& ctx, const std::vector<MuonSpan>& spans) {
  if (table_ && same_spans(spans, spans_)) return num_chunks_;
  std::vector<MuonChunk> chunks;
  for (const MuonSpan& s : spans)
    for (size_t done = 0; done < s.count; done += kChunkElems)
      chunks.push_back({s.param_at + done, s.state_at + done, s.update_at + done,
                        uint32_t(std::min(kChunkElems, s.count - done)), s.lr_ratio});
  XT_CHECK(chunks.size() <= size_t(INT32_MAX), "Muon: " << chunks.size() << " chunks exceed the launch limit");
  // Drop the old table first: a failed allocation below then leaves no table, never a stale one.
  spans_.clear();
  num_chunks_ = 0;
  alloc_ = ctx.alloc;
  alloc_->free(table_);  // stream-ordered reuse: kernels queued before still read it first (allocator.h)
  table_ = nullptr;
  if (!chunks.empty()) {
    table_ = static_cast<MuonChunk*>(alloc_->alloc(chunks.size() * sizeof(MuonChunk), kMuonTableTag));
    XT_CUDA_CHECK(cudaMemcpyAsync(table_, chunks.data(), chunks.size() * sizeof(MuonChunk), cudaMemcpyHostToDevice,
                                  ctx.stream));
    XT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // once per layout; `chunks` goes out of scope
  }
  spans_ = spans;
  num_chunks_ = int(chunks.size());
  return num_chunks_;
}

void muon_momentum(const OpContext& ctx, MuonTable& table, float* buf, float* out, const float* grad,
                   const std::vector<MuonSpan>& spans, float momentum, bool nesterov, float grad_scale) {
  const int num_chunks = table.chunks_for(ctx, spans);
  if (num_chunks == 0) return;
  muon_momentum_kernel<<<blocks_for(size_t(num_chunks), 1), kThreads, 0, ctx.stream>>>(
      buf, out, grad, table.device(), num_chunks, momentum, nesterov, grad_scale);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
