// fp32 -> bf16 copies of GEMM operands for --dtype bf16 (matmul.cu): round to nearest even
// (__float2bfloat16_rn), rows padded to bf16_ld(cols) so each starts 16-byte aligned. And plain
// conversions between bf16 activations and fp32 scratch (attention's GEMM route with bf16).
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
template <typename Dst, typename Src>
__global__ void convert_kernel(Dst* dst, const Src* src, size_t count, bool accumulate) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<Dst>(accumulate ? to_f(dst[i]) + to_f(src[i]) : to_f(src[i]));
}
}  // namespace

void to_f32(const OpContext& ctx, float* dst, const __nv_bfloat16* src, size_t count) {
  if (count == 0) return;
  convert_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, count, false);
  XT_CUDA_LAUNCH_CHECK();
}

void from_f32(const OpContext& ctx, __nv_bfloat16* dst, const float* src, size_t count, bool accumulate) {
  if (count == 0) return;
  convert_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, count, accumulate);
  XT_CUDA_LAUNCH_CHECK();
}

void to_bf16(const OpContext& ctx, __nv_bfloat16* dst, const float* src, int rows, int cols) {
  const size_t count = size_t(rows) * cols;
  if (count == 0) return;
  to_bf16_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, rows, cols, bf16_ld(cols));
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
