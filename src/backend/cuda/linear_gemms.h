// The three row-major GEMMs of a linear layer, out (N,OC) = inp (N,IC) w^T with w (OC,IC), in the operand
// convention of gemm / gemm_bf16 / LtGemm (ops.h: C (M,N) = op(A) (M,K) op(B) (K,N), A and B as stored):
// the one statement of their layouts, read by matmul.cu and by bench/gemm_fp8.cu.
#pragma once

namespace xtrain::cuda {

// LinearGemm: transposes and sizes of one product; A, B and their row strides are named with each.
struct LinearGemm {
  bool ta, tb;
  int M, N, K;
};
// forward: out (N,OC) = inp (N,IC) w^T. A = inp (row stride IC), B = w (row stride IC).
constexpr LinearGemm linear_forward(int N, int IC, int OC) { return {false, true, N, OC, IC}; }
// dinp (N,IC) = dout (N,OC) w. A = dout (row stride OC), B = w (row stride IC).
constexpr LinearGemm linear_dinp(int N, int IC, int OC) { return {false, false, N, IC, OC}; }
// dw (OC,IC) += dout^T inp. A = dout (row stride OC), B = inp (row stride IC).
constexpr LinearGemm linear_dw(int N, int IC, int OC) { return {true, false, OC, IC, N}; }

}  // namespace xtrain::cuda
