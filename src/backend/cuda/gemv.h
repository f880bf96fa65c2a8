// The few-row matmul route's switch (gemv.cu, dispatched in matmul.cu). No CUDA header: the tests and
// bench_cuda_ops read the threshold from here.
#pragma once

namespace xtrain::cuda {

// kGemvMaxRows: matmul_forward and matmul_gelu_forward with N <= this many rows (decoding: N = the batch) take
// gemv_forward, which reads each weight once per call for all rows and computes a row's bits independently of
// the other rows; larger N (training, prefill) takes cuBLAS(Lt). The only switch between the two routes;
// `bench_cuda_ops B reps bf16` prints both at N = 1, 4, 16 (the "decode." rows) to choose it from. On one H200
// (bf16, GPT-2 124M's four layer products): N = 1 14.8 us per layer against cuBLASLt's 20.0; N = 4 27.3
// against 19.6, N = 16 87.3 against 20.0 (docs/serving.md). So batch-1 decoding only.
constexpr int kGemvMaxRows = 1;

// MatmulRoute: which route cuda::matmul_forward / matmul_gelu_forward take. automatic: by kGemvMaxRows;
// gemm (cuBLAS(Lt)) and gemv force one, for bench_cuda_ops's side-by-side timing at the same N.
enum class MatmulRoute { automatic, gemm, gemv };

}  // namespace xtrain::cuda
