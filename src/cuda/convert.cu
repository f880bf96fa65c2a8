// fp32 -> bf16 copies of GEMM operands for --dtype bf16 (matmul.cu): round to nearest even
// (__float2bfloat16_rn), rows padded to bf16_ld(cols) so each starts 16-byte aligned.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void to_bf16_kernel(__nv_bfloat16* dst, const float* src, int rows, int cols, int ld) {
  const size_t count = size_t(rows) * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i % cols;
    dst[r * ld + c] = __float2bfloat16_rn(src[i]);
  }
}
}  // namespace

void to_bf16(const OpContext& ctx, __nv_bfloat16* dst, const float* src, int rows, int cols) {
  const size_t count = size_t(rows) * cols;
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, rows, cols, bf16_ld(cols));
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
