// Fully connected layers through cuBLAS SGEMM (fp32 in, fp32 compute: the handle keeps
// CUBLAS_DEFAULT_MATH, so neither TF32 nor BF16x9 emulation is used, see cuda_backend.cpp).
// cuBLAS is column-major: a row-major (R, K) matrix is a column-major (K, R) one, so every product
// below is written for the transposed, column-major view (as in llm.c).
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
    // out^T (OC,N) = w_cm^T (OC,IC) * inp_cm (IC,N); w_cm is w seen column-major (IC,OC).
    const float one = 1.0f, zero = 0.0f;
    XT_CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC, inp, IC, &zero, out,
                                OC));
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
  const float one = 1.0f;
  if (IC > 0) {
    // dinp^T (IC,N) += w_cm (IC,OC) * dout_cm (OC,N)
    XT_CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, IC, dout, OC, &one, dinp,
                                IC));
    // dw^T (IC,OC) += inp_cm (IC,N) * dout_cm^T (N,OC)
    XT_CUBLAS_CHECK(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, IC, dout, OC, &one, dw,
                                IC));
  }
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace xtrain::cuda
