// AdamW (Loshchilov & Hutter 2019, Alg. 2) with bias correction and decoupled weight decay scaled
// by lr (as PyTorch AdamW), one fused elementwise kernel in fp32 over every tensor of the parameter
// buffer in one launch: a chunk table (as PyTorch's multi_tensor_apply) gives each block its ranges and
// their weight decay (AdamWTable, chunk_table.h). Bias corrections are computed once on the host in double.
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
// One element's update (the expression of the single-tensor kernel this replaces: the same bits).
struct AdamWStep {
  float lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2;
  __device__ __forceinline__ void operator()(float& p, float grad, float& m, float& v) const {
    const float g = grad * grad_scale;
    const float mi = beta1 * m + (1.0f - beta1) * g;
    const float vi = beta2 * v + (1.0f - beta2) * g * g;
    m = mi;
    v = vi;
    p = p - lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p);
  }
};

// Block b takes chunks b, b + gridDim.x, ...; weight decay is the chunk's. With vec (the four buffers
// 16-byte aligned) a chunk whose begin and count are multiples of 4 moves in 16-byte vectors, any other
// element by element; the arithmetic per element is the same either way.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, const AdamWChunk* chunks,
                             int num_chunks, float lr, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, float bc1, float bc2, bool vec) {
  for (int c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const AdamWChunk ch = chunks[c];
    const AdamWStep step{lr, beta1, beta2, eps, ch.decay ? weight_decay : 0.0f, grad_scale, bc1, bc2};
    if (vec && ch.begin % 4 == 0 && ch.count % 4 == 0) {
      const size_t b4 = ch.begin / 4, end4 = b4 + ch.count / 4;
      for (size_t i = b4 + threadIdx.x; i < end4; i += blockDim.x) {
        float4 pv = reinterpret_cast<float4*>(param)[i], mv = reinterpret_cast<float4*>(m)[i];
        float4 vv = reinterpret_cast<float4*>(v)[i];
        const float4 gv = reinterpret_cast<const float4*>(grad)[i];
        step(pv.x, gv.x, mv.x, vv.x), step(pv.y, gv.y, mv.y, vv.y);
        step(pv.z, gv.z, mv.z, vv.z), step(pv.w, gv.w, mv.w, vv.w);
        reinterpret_cast<float4*>(param)[i] = pv, reinterpret_cast<float4*>(m)[i] = mv;
        reinterpret_cast<float4*>(v)[i] = vv;
      }
    } else {
      for (size_t i = ch.begin + threadIdx.x; i < ch.begin + ch.count; i += blockDim.x)
        step(param[i], grad[i], m[i], v[i]);
    }
  }
}
}  // namespace

void adamw_update(const OpContext& ctx, AdamWTable& table, float* param, const float* grad, float* m, float* v,
                  const std::vector<ParamSpan>& spans, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int t) {
  check_adamw_args(spans, t);
  const int num_chunks = table.chunks_for(ctx, spans);
  if (num_chunks == 0) return;
  const float bc1 = float(1.0 - std::pow(double(beta1), t));
  const float bc2 = float(1.0 - std::pow(double(beta2), t));
  adamw_kernel<<<blocks_for(size_t(num_chunks), 1), kChunkThreads, 0, ctx.stream>>>(
      param, grad, m, v, table.device(), num_chunks, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2,
      aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v));
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
