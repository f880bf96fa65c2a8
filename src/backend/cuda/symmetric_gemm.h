// Symmetric bf16 products batched over a group of matrices, computing only the blocks on and above the
// diagonal (symmetric_gemm.cu): D_b = alpha Y_b Y_b^T + beta C_b. Newton-Schulz's A = X X^T and
// B = b A + c A A (A symmetric, so A A = A A^T) are both of this form: with r split into p blocks of h rows,
// the p (p + 1) / 2 upper blocks take (p + 1) / (2 p) of the full product's multiply-adds (2/3 at p = 3).
#pragma once

#include <cuda_bf16.h>

#include <initializer_list>

#include "backend/cuda/allocator.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

// symmetric_blocks: the number of blocks p to split r rows into for SymmetricProducts: the largest p' <=
// requested with r = p' h, h a multiple of 8 (every block 16-byte aligned in bf16) and h >= kMinSymmetricBlock
// (below that the mirror's launch costs more than the products it saves); 1 (the full product) when none.
constexpr int kMinSymmetricBlock = 64;
int symmetric_blocks(int r, int requested);
// symmetric_products_lt: whether SymmetricProducts' block GEMMs of `batch` matrices of r rows in p blocks,
// inner dimension k, take cuBLASLt's pointer arrays (else the copy and cublasGemmBatchedEx in place), for
// 256-byte aligned matrices and beta != 0; asks the heuristic, runs nothing (benchmarks report the route).
bool symmetric_products_lt(const OpContext& ctx, int batch, int r, int p, int k);

// SymmetricProduct: for b < batch, D_b (r, r) = alpha Y_b Y_b^T + beta C_b, row-major bf16: Y_b = Y + b
// stride_y is (r, k) with ld k, C_b = C + b r r and D_b = D + b r r (ld r); C_b symmetric (its upper blocks
// are read), or null with beta 0. D_b apart from Y_b and C_b.
struct SymmetricProduct {
  const __nv_bfloat16* Y;
  int k;
  long long stride_y;
  const __nv_bfloat16* C;
  __nv_bfloat16* D;
};

// SymmetricProducts: up to kMaxProducts products over `batch` matrices of r rows split into p blocks
// (p = symmetric_blocks(r, ...) > 1), their block pointers built on the device once (one launch) at
// construction, so each run() is two launches, or three where cuBLASLt offers no pointer-array algorithm:
// - the upper blocks (i <= j) of every matrix as ONE batched GEMM of batch p (p + 1) / 2 (h, h, k) products
//   (through cuBLASLt, D apart from C; else C's upper blocks copied into D and cublasGemmBatchedEx in place),
//   so a group's blocks share one launch and fill the GPU as the full product's would;
// - a tile kernel writing each lower block as the transpose of its mirror upper block.
// Every block is the same (h, h, k) problem with no sum across blocks or matrices, so a matrix's bits depend
// on its own values and on the algorithm cuBLAS picks for the launch's batch count (as with the full
// strided-batched products), not on the other matrices. Scratch from ctx.alloc until destruction; throws
// Error on a cuBLAS failure.
class SymmetricProducts {
 public:
  static constexpr int kMaxProducts = 4;
  SymmetricProducts(const OpContext& ctx, int batch, int r, int p, std::initializer_list<SymmetricProduct> products);
  // run: product i (in construction order) with these scalars, queued on ctx.stream.
  void run(int i, float alpha, float beta) const;

 private:
  const OpContext& ctx_;
  int batch_, r_, p_, h_, per_;  // per_: upper blocks over the batch, batch p (p + 1) / 2
  SymmetricProduct products_[kMaxProducts];
  uint32_t align_[kMaxProducts];  // bytes every block pointer of the product is aligned to
  int count_;
  ScratchBuffer<const void*> ptrs_;  // (count_, 4, per_): A, B, C, D pointers of each product's block GEMMs
};

}  // namespace xtrain::cuda
