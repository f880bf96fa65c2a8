// Fully connected layers through cuBLAS (gemm.cpp): fp32 storage; math per ctx.gemm_compute — plain
// fp32 for --dtype fp32 (the handle keeps CUBLAS_DEFAULT_MATH, so no TF32 or BF16x9 emulation, see
// cuda_backend.cpp), bf16 tensor-core products with fp32 accumulation for --dtype bf16.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// out (N,OC) += bias (OC) broadcast over rows
__global__ void add_bias_kernel(float* out, const float* bias, size_t count, int OC) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % OC];
}
}  // namespace

void matmul_forward(const OpContext& ctx, float* out, const float* inp, const float* w, const float* bias, int N,
                    int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;
  if (IC == 0) {  // empty sum; do not rely on cuBLAS's handling of k == 0
    XT_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N) * OC * sizeof(float), ctx.stream));
  } else {
    // out (N,OC) = inp (N,IC) w^T
    gemm(ctx, false, true, N, OC, IC, 1.0f, inp, IC, 0, w, IC, 0, 0.0f, out, OC, 0);
  }
  if (bias) {
    const size_t count = size_t(N) * OC;
    add_bias_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(out, bias, count, OC);
    XT_CUDA_LAUNCH_CHECK();
  }
}

void matmul_backward(const OpContext& ctx, float* dinp, float* dw, float* dbias, const float* dout,
                     const float* inp, const float* w, int N, int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;  // every gradient term is an empty sum
  if (IC > 0) {
    gemm(ctx, false, false, N, IC, OC, 1.0f, dout, OC, 0, w, IC, 0, 1.0f, dinp, IC, 0);  // dinp (N,IC) += dout w
    gemm(ctx, true, false, OC, IC, N, 1.0f, dout, OC, 0, inp, IC, 0, 1.0f, dw, IC, 0);   // dw (OC,IC) += dout^T inp
  }
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace xtrain::cuda
