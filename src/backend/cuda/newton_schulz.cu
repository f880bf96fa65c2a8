// Newton-Schulz orthogonalization of a batch of matrices (Backend::newton_schulz; torch.optim.Muon's
// _zeropower_via_newtonschulz), in bf16 on tensor cores as PyTorch runs it: each matrix rounded to bf16
// (transposed when tall, so the Gram matrix is the smaller one) and divided by its Frobenius norm, then per
// step three cuBLAS strided-batched GEMMs over the whole batch with fp32 accumulation and bf16 results:
// A = X X^T, B = b A + c A A, X = a X + B X. PyTorch rounds b A and c (A A) apart before adding them;
// here the GEMM's epilogue adds them in fp32 and rounds once (within bf16 rounding of PyTorch's result).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// src_index: where element (p, q) of the (r, c) working matrix X lies in the stored (rows, cols) matrix:
// X is the matrix itself, or its transpose when tall
__device__ __forceinline__ size_t src_index(size_t p, size_t q, int cols, bool tall) {
  return tall ? q * cols + p : p * cols + q;
}

// The Frobenius norm of each matrix in two passes: norm_partial_kernel spreads each matrix over
// norm_parts(n) blocks (grid (parts, batch), so a batch of a few large matrices still fills the GPU), each
// writing the fp32 sum of its chunk's squares to partials (batch, parts); norm_finish_kernel adds a
// matrix's partials in a fixed order. No float atomics: the same bits on every run and on every rank, and
// the split depends on the matrix size only (not on the batch, which differs by rank), so a matrix's norm
// does not depend on which rank orthogonalizes it. The summation order differs from a single block's
// (fp32 rounding, far below the bf16 roundings the results go through).
constexpr size_t kNormChunk = size_t(kThreads) * 64;  // elements per block, 64 per thread
constexpr size_t kMaxNormParts = 1024;

// norm_chunk: elements per block for an n-element matrix, a multiple of 4 (whole float4s per chunk).
size_t norm_chunk(size_t n) {
  const size_t parts = std::min(kMaxNormParts, std::max<size_t>(1, (n + kNormChunk - 1) / kNormChunk));
  return ((n + parts - 1) / parts + 3) / 4 * 4;
}

__device__ __forceinline__ float bf16_square(float x) {
  const float v = __bfloat162float(__float2bfloat16_rn(x));
  return v * v;
}

// norm_partial_kernel: partials[b, p] = sum over chunk p of matrix b of bf16(x)^2, fp32; kVec: float4 loads
// (x 16-byte aligned, n a multiple of 4)
template <bool kVec>
__global__ void norm_partial_kernel(const float* x, size_t n, size_t chunk, float* partials) {
  __shared__ float shared[kWarp];
  const float* xb = x + blockIdx.y * n;
  const size_t begin = blockIdx.x * chunk, end = begin + chunk < n ? begin + chunk : n;
  float s = 0.0f;
  if constexpr (kVec) {
    for (size_t i = begin + 4 * size_t(threadIdx.x); i < end; i += 4 * size_t(blockDim.x)) {
      const float4 v = *reinterpret_cast<const float4*>(xb + i);
      s += bf16_square(v.x) + bf16_square(v.y) + bf16_square(v.z) + bf16_square(v.w);
    }
  } else {
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) s += bf16_square(xb[i]);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) partials[blockIdx.y * size_t(gridDim.x) + blockIdx.x] = s;
}

// norm_finish_kernel: one warp per matrix b -> norms[b] = bf16(max(bf16(sqrt(sum_p partials[b, p])),
// bf16(eps))), as torch's ortho_grad.norm().clamp(min=eps) on the bf16 matrix (fp32 accumulation); lane l
// adds partials l, l + 32, ... in order, then the fixed butterfly of warp_sum
__global__ void norm_finish_kernel(const float* partials, int parts, int batch, float eps, float* norms) {
  const int b = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (b >= batch) return;  // whole warps leave together (b is uniform over a warp)
  float s = 0.0f;
  for (int p = lane; p < parts; p += kWarp) s += partials[size_t(b) * parts + p];
  s = warp_sum(s);
  if (lane == 0) {
    const float norm = __bfloat162float(__float2bfloat16_rn(sqrtf(s)));
    norms[b] = fmaxf(norm, __bfloat162float(__float2bfloat16_rn(eps)));
  }
}

// load_kernel: X_b (r, c) bf16 = bf16(bf16(x_b) / norms[b]), transposed when tall; blockIdx.y = b
__global__ void load_kernel(const float* x, __nv_bfloat16* X, const float* norms, int r, int c, int cols, bool tall) {
  const size_t n = size_t(r) * c, b = blockIdx.y;
  const float norm = norms[b];
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = __bfloat162float(__float2bfloat16_rn(x[b * n + src_index(i / c, i % c, cols, tall)]));
    X[b * n + i] = __float2bfloat16_rn(v / norm);
  }
}

// store_kernel: x_b = X_b (transposed back when tall), fp32
__global__ void store_kernel(float* x, const __nv_bfloat16* X, int r, int c, int cols, bool tall) {
  const size_t n = size_t(r) * c, b = blockIdx.y;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[b * n + src_index(i / c, i % c, cols, tall)] = __bfloat162float(X[b * n + i]);
}

// gemm_batched: column-major C = alpha op(A) op(B) + beta C over `batch` matrices, bf16 operands and results,
// fp32 accumulation (tensor cores)
void gemm_batched(const OpContext& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                  const __nv_bfloat16* A, int lda, long long sA, const __nv_bfloat16* B, int ldb, long long sB,
                  float beta, __nv_bfloat16* C, int ldc, long long sC, int batch) {
  XT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF,
                                             ldb, sB, &beta, C, CUDA_R_16BF, ldc, sC, batch, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
}
}  // namespace

void newton_schulz(const OpContext& ctx, float* x, int batch, int rows, int cols, int steps, float eps) {
  if (batch == 0) return;
  const bool tall = rows > cols;
  const int r = std::min(rows, cols), c = std::max(rows, cols);
  const size_t n = size_t(r) * c, rr = size_t(r) * r;
  ScratchBuffer<__nv_bfloat16> X(*ctx.alloc, batch * n, "newton_schulz X"), Xn(*ctx.alloc, batch * n, "newton_schulz X");
  ScratchBuffer<__nv_bfloat16> A(*ctx.alloc, batch * rr, "newton_schulz A"), B(*ctx.alloc, batch * rr, "newton_schulz B");
  ScratchBuffer<float> norms(*ctx.alloc, batch, "newton_schulz norms");
  const size_t chunk = norm_chunk(n);
  const int parts = static_cast<int>((n + chunk - 1) / chunk);  // every block's chunk starts inside the matrix
  ScratchBuffer<float> partials(*ctx.alloc, size_t(batch) * parts, "newton_schulz norm partials");
  const dim3 norm_grid(parts, batch);
  if (n % 4 == 0 && aligned16(x))
    norm_partial_kernel<true><<<norm_grid, kThreads, 0, ctx.stream>>>(x, n, chunk, partials.get());
  else
    norm_partial_kernel<false><<<norm_grid, kThreads, 0, ctx.stream>>>(x, n, chunk, partials.get());
  XT_CUDA_LAUNCH_CHECK();
  constexpr int kFinishThreads = 4 * kWarp;  // four matrices per block
  norm_finish_kernel<<<(batch + 3) / 4, kFinishThreads, 0, ctx.stream>>>(partials.get(), parts, batch, eps,
                                                                         norms.get());
  XT_CUDA_LAUNCH_CHECK();
  const dim3 grid(std::min<unsigned>(blocks_for(n, kThreads), 4096u), batch);
  load_kernel<<<grid, kThreads, 0, ctx.stream>>>(x, X.get(), norms.get(), r, c, cols, tall);
  XT_CUDA_LAUNCH_CHECK();
  const float ca = kMuonNsCoefficients[0], cb = kMuonNsCoefficients[1], cc = kMuonNsCoefficients[2];
  __nv_bfloat16 *cur = X.get(), *next = Xn.get();
  // Row-major (r, c) X is column-major X^T (ld c); each product below is the row-major one written for
  // cuBLAS (gemm.cpp's convention).
  for (int k = 0; k < steps; ++k) {
    // A (r, r) = X X^T: column-major (X^T)^T (X^T)
    gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, r, r, c, 1.0f, cur, c, n, cur, c, n, 0.0f, A.get(), r, rr, batch);
    // B = b A + c A A (A symmetric: its column-major storage is itself)
    XT_CUDA_CHECK(cudaMemcpyAsync(B.get(), A.get(), batch * rr * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice,
                                  ctx.stream));
    gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, r, r, r, cc, A.get(), r, rr, A.get(), r, rr, cb, B.get(), r, rr, batch);
    // X' = a X + B X: column-major (B X)^T = X^T B^T, B^T being B's column-major storage
    XT_CUDA_CHECK(cudaMemcpyAsync(next, cur, batch * n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice, ctx.stream));
    gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, c, r, r, 1.0f, cur, c, n, B.get(), r, rr, ca, next, c, n, batch);
    std::swap(cur, next);
  }
  store_kernel<<<grid, kThreads, 0, ctx.stream>>>(x, cur, r, c, cols, tall);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
