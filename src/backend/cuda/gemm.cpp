// Row-major GEMM over cuBLAS (column-major): a row-major (R, K) matrix is a column-major (K, R) one,
// so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with the operands swapped (as in llm.c).
// One helper for every GEMM of the backend, so the fp32 / bf16 choice is made in one place.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

void gemm(const OpContext& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          long long sA, const float* B, int ldb, long long sB, float beta, float* C, int ldc, long long sC,
          int batch) {
  XT_CHECK(M >= 0 && N >= 0 && K > 0 && batch >= 1, "bad gemm shape M=" << M << " N=" << N << " K=" << K);
  if (M == 0 || N == 0) return;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    XT_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda,
                                 &beta, C, CUDA_R_32F, ldc, ctx.gemm_compute, CUBLAS_GEMM_DEFAULT));
  } else {
    XT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, sB, A,
                                               CUDA_R_32F, lda, sA, &beta, C, CUDA_R_32F, ldc, sC, batch,
                                               ctx.gemm_compute, CUBLAS_GEMM_DEFAULT));
  }
}

void gemm_bf16(const OpContext& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const __nv_bfloat16* A,
               int lda, const __nv_bfloat16* B, int ldb, float beta, void* C, cudaDataType_t c_type, int ldc) {
  XT_CHECK(M >= 0 && N >= 0 && K > 0, "bad gemm shape M=" << M << " N=" << N << " K=" << K);
  if (M == 0 || N == 0) return;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  XT_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, opb, opa, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda,
                               &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace xtrain::cuda
