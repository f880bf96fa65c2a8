// gemm_lt_batched: a strided-batched GEMM through cuBLASLt with its output D apart from the input C
// (gemm_lt.cpp), for Newton-Schulz's D = alpha A B + beta C steps, which cublasGemmStridedBatchedEx can only
// run in place (C = D, so C would need a copy first).
#pragma once

#include <cublasLt.h>

#include "backend/cuda/ops.h"

namespace xtrain::cuda {

// LtBatchedGemm: COLUMN-MAJOR, as cublasGemmStridedBatchedEx: for each of `batch` matrices i,
// D_i (m, n) = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i * stride_x (elements), C and D sharing ldc and
// stride_c. Operands, C and D of `type`; fp32 scalars; math `compute`.
struct LtBatchedGemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha;
  const void* A;
  int lda;
  long long stride_a;
  const void* B;
  int ldb;
  long long stride_b;
  float beta;
  const void* C;
  void* D;
  int ldc;
  long long stride_c;
  int batch;
  cudaDataType_t type;
  cublasComputeType_t compute;
};
// Returns false, doing nothing, when cuBLASLt offers no algorithm for the case or XTRAIN_CUDA_LT=off (the
// caller then takes its cuBLAS route); throws Error on any other cuBLASLt failure.
bool gemm_lt_batched(const OpContext& ctx, const LtBatchedGemm& g);

}  // namespace xtrain::cuda
