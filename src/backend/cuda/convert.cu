// fp32 -> bf16 copies of GEMM operands for --dtype bf16 (matmul.cu): round to nearest even
// (__float2bfloat16_rn), rows padded to bf16_ld(cols) so each starts 16-byte aligned. And plain
// conversions between bf16 activations and fp32 scratch (attention's GEMM route with bf16).
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

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

namespace {
// A flat copy of `count` elements, src and dst 16-byte aligned: 8 elements per thread (two 16-byte loads, one
// 16-byte store), then the last count % 8 one each by the grid's first threads. Unpadded rows of to_bf16
// (cols % 8 == 0, so bf16_ld(cols) == cols) and prepare_weights' copy.
__global__ void to_bf16_flat8_kernel(__nv_bfloat16* dst, const float* src, size_t count) {
  const size_t count8 = count / 8, first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (size_t i = first; i < count8; i += size_t(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(src)[2 * i], b = reinterpret_cast<const float4*>(src)[2 * i + 1];
    Pack<__nv_bfloat16> o;
    o.v[0] = __float2bfloat16_rn(a.x), o.v[1] = __float2bfloat16_rn(a.y), o.v[2] = __float2bfloat16_rn(a.z);
    o.v[3] = __float2bfloat16_rn(a.w), o.v[4] = __float2bfloat16_rn(b.x), o.v[5] = __float2bfloat16_rn(b.y);
    o.v[6] = __float2bfloat16_rn(b.z), o.v[7] = __float2bfloat16_rn(b.w);
    store_pack(dst + 8 * i, o);
  }
  if (first < count % 8) dst[8 * count8 + first] = __float2bfloat16_rn(src[8 * count8 + first]);
}

void launch_flat8(const OpContext& ctx, __nv_bfloat16* dst, const float* src, size_t count) {
  to_bf16_flat8_kernel<<<blocks_for(count / 8 + 1, kThreads), kThreads, 0, ctx.stream>>>(dst, src, count);
  XT_CUDA_LAUNCH_CHECK();
}
}  // namespace

void to_bf16(const OpContext& ctx, __nv_bfloat16* dst, const float* src, int rows, int cols) {
  const size_t count = size_t(rows) * cols;
  if (count == 0) return;
  if (cols % 8 == 0 && aligned16(dst) && aligned16(src)) {
    launch_flat8(ctx, dst, src, count);
    return;
  }
  to_bf16_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dst, src, rows, cols, bf16_ld(cols));
  XT_CUDA_LAUNCH_CHECK();
}

void to_bf16_flat(const OpContext& ctx, __nv_bfloat16* dst, const float* src, size_t count) {
  if (count == 0) return;
  if (aligned16(dst) && aligned16(src)) launch_flat8(ctx, dst, src, count);
  else from_f32(ctx, dst, src, count, false);  // element by element, the same rounding
}

}  // namespace xtrain::cuda
