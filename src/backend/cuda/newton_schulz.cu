// Newton-Schulz orthogonalization of a batch of matrices (Backend::newton_schulz; torch.optim.Muon's
// _zeropower_via_newtonschulz), in bf16 on tensor cores as PyTorch runs it: each matrix rounded to bf16
// (transposed when tall, so the Gram matrix is the smaller one) and divided by its Frobenius norm, then per
// step three strided-batched GEMMs over the whole batch with fp32 accumulation and bf16 results:
// A = X X^T, B = b A + c A A, X = a X + B X (the last two through cuBLASLt, which writes the result apart
// from the term it adds, so neither needs a copy first). PyTorch rounds b A and c (A A) apart before adding them;
// here the GEMM's epilogue adds them in fp32 and rounds once (within bf16 rounding of PyTorch's result).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm_lt_batched.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// The Frobenius norm of each matrix in two passes: norm_partial_kernel spreads each matrix over
// parts blocks of norm_chunk(n) elements (grid (parts, batch), so a batch of a few large matrices still
// fills the GPU), each writing the fp32 sum of its chunk's squares to partials (batch, parts);
// norm_finish_kernel adds a matrix's partials in a fixed order. No float atomics: the same bits on every
// run and on every rank, and the split depends on the matrix size only (not on the batch, which differs by
// rank; nor does the float4 path, x's alignment being that of the group's start when n is a multiple of 4),
// so a matrix's norm does not depend on which rank orthogonalizes it. The summation order is not a single
// block's any more: bits may differ from that by fp32 rounding, far below the bf16 roundings that follow.
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

// Load and store move each matrix between x (fp32, as stored) and X (bf16, the working (r, c) layout):
// coalesced and, where the size and the pointers allow, 16-byte loads (flat: wide and square matrices,
// X_b = x_b), or through 32x32 shared-memory tiles (tall: X_b = x_b^T), so both sides of the transpose
// are read and written along rows.
constexpr int kTile = 32, kTileRows = 8;  // a (kTile, kTileRows) block moves one tile, kTile / kTileRows rows a thread

// scaled: X's element for x's element v, bf16(bf16(v) / norm), as torch's bf16 ortho_grad.div_(norm)
__device__ __forceinline__ __nv_bfloat16 scaled(float v, float norm) {
  return __float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(v)) / norm);
}

struct alignas(8) Bf16x4 {  // four bf16, moved with one 8-byte access
  __nv_bfloat16 v[4];
};

// load_flat_kernel: X_b = scaled(x_b), n elements each, blockIdx.y = b; kVec: 4 elements per access (x
// 16-byte and X 8-byte aligned, n a multiple of 4)
template <bool kVec>
__global__ void load_flat_kernel(const float* x, __nv_bfloat16* X, const float* norms, size_t n) {
  const size_t b = blockIdx.y, stride = size_t(gridDim.x) * blockDim.x;
  const float norm = norms[b];
  const float* xb = x + b * n;
  __nv_bfloat16* Xb = X + b * n;
  if constexpr (kVec) {
    for (size_t i = 4 * (blockIdx.x * size_t(blockDim.x) + threadIdx.x); i < n; i += 4 * stride) {
      const float4 v = *reinterpret_cast<const float4*>(xb + i);
      *reinterpret_cast<Bf16x4*>(Xb + i) = Bf16x4{{scaled(v.x, norm), scaled(v.y, norm), scaled(v.z, norm),
                                                   scaled(v.w, norm)}};
    }
  } else {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) Xb[i] = scaled(xb[i], norm);
  }
}

// store_flat_kernel: x_b = X_b in fp32; kVec as load_flat_kernel
template <bool kVec>
__global__ void store_flat_kernel(float* x, const __nv_bfloat16* X, size_t n) {
  const size_t b = blockIdx.y, stride = size_t(gridDim.x) * blockDim.x;
  float* xb = x + b * n;
  const __nv_bfloat16* Xb = X + b * n;
  if constexpr (kVec) {
    for (size_t i = 4 * (blockIdx.x * size_t(blockDim.x) + threadIdx.x); i < n; i += 4 * stride) {
      const Bf16x4 v = *reinterpret_cast<const Bf16x4*>(Xb + i);
      *reinterpret_cast<float4*>(xb + i) = make_float4(__bfloat162float(v.v[0]), __bfloat162float(v.v[1]),
                                                       __bfloat162float(v.v[2]), __bfloat162float(v.v[3]));
    }
  } else {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) xb[i] = __bfloat162float(Xb[i]);
  }
}

// load_tall_kernel: x_b stored (c, r) (a tall matrix) -> X_b (r, c), X_b[p][q] = scaled(x_b[q][p]); block
// (blockIdx.x, blockIdx.y) moves x_b's rows q0.. q0+31, columns p0.. p0+31 (edge tiles partly); blockIdx.z = b.
// The tile is padded to 33 columns so reading it down a column hits 32 different banks.
__global__ void load_tall_kernel(const float* x, __nv_bfloat16* X, const float* norms, int r, int c) {
  __shared__ float tile[kTile][kTile + 1];
  const size_t b = blockIdx.z, n = size_t(r) * c;
  const float norm = norms[b];
  const float* xb = x + b * n;
  __nv_bfloat16* Xb = X + b * n;
  const int p0 = blockIdx.x * kTile, q0 = blockIdx.y * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // tile[j][i] = x_b[q0 + j][p0 + i]
    const int q = q0 + j, p = p0 + threadIdx.x;
    if (q < c && p < r) tile[j][threadIdx.x] = xb[size_t(q) * r + p];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // X_b[p0 + j][q0 + i] = tile[i][j]
    const int p = p0 + j, q = q0 + threadIdx.x;
    if (p < r && q < c) Xb[size_t(p) * c + q] = scaled(tile[threadIdx.x][j], norm);
  }
}

// store_tall_kernel: x_b (c, r) = X_b^T in fp32, tiles as load_tall_kernel
__global__ void store_tall_kernel(float* x, const __nv_bfloat16* X, int r, int c) {
  __shared__ float tile[kTile][kTile + 1];
  const size_t b = blockIdx.z, n = size_t(r) * c;
  float* xb = x + b * n;
  const __nv_bfloat16* Xb = X + b * n;
  const int p0 = blockIdx.x * kTile, q0 = blockIdx.y * kTile;
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // tile[j][i] = X_b[p0 + j][q0 + i]
    const int p = p0 + j, q = q0 + threadIdx.x;
    if (p < r && q < c) tile[j][threadIdx.x] = __bfloat162float(Xb[size_t(p) * c + q]);
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {  // x_b[q0 + j][p0 + i] = tile[i][j]
    const int q = q0 + j, p = p0 + threadIdx.x;
    if (q < c && p < r) xb[size_t(q) * r + p] = tile[threadIdx.x][j];
  }
}

// gemm_batched: column-major D = alpha op(A) op(B) + beta C over `batch` matrices, bf16 operands and results,
// fp32 accumulation (tensor cores). D apart from C through cuBLASLt; where it offers no algorithm (or
// XTRAIN_CUDA_LT=off) C is copied into D first and cublasGemmStridedBatchedEx runs in place: the same sum
// either way. C may be null with beta 0.
void gemm_batched(const OpContext& ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                  const __nv_bfloat16* A, int lda, long long sA, const __nv_bfloat16* B, int ldb, long long sB,
                  float beta, const __nv_bfloat16* C, __nv_bfloat16* D, int ldc, long long sC, int batch) {
  if (C != nullptr && C != D) {
    if (gemm_lt_batched(ctx, LtBatchedGemm{ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, D, ldc, sC, batch,
                                           CUDA_R_16BF, CUBLAS_COMPUTE_32F}))
      return;
    // C and D: `batch` matrices (m, n) of column stride ldc, sC apart, packed here (ldc = m, sC = m n)
    XT_CHECK(ldc == m && sC == static_cast<long long>(m) * n, "gemm_batched: copying C needs packed matrices");
    XT_CUDA_CHECK(cudaMemcpyAsync(D, C, size_t(batch) * sC * sizeof(__nv_bfloat16), cudaMemcpyDeviceToDevice,
                                  ctx.stream));
  }
  XT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sA, B, CUDA_R_16BF,
                                             ldb, sB, &beta, D, CUDA_R_16BF, ldc, sC, batch, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
}
}  // namespace

void newton_schulz(const OpContext& ctx, float* x, int batch, int rows, int cols, int steps, float eps) {
  if (batch == 0) return;
  // grid limits: the batch is gridDim.y (norm, flat) or gridDim.z (tall), a tall matrix's c / 32 gridDim.y
  XT_CHECK(batch <= 65535 && (rows + kTile - 1) / kTile <= 65535,
           "newton_schulz: " << batch << " matrices (" << rows << ", " << cols
                             << ") exceed the launch grid (at most 65535 matrices, 65535 * 32 rows)");
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
  // flat: 4 elements a thread where vec; tall: one block per 32x32 tile
  const bool vec = n % 4 == 0 && aligned16(x) && reinterpret_cast<uintptr_t>(X.get()) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(Xn.get()) % 8 == 0;
  const dim3 flat_grid(std::min<unsigned>(blocks_for(vec ? n / 4 : n, kThreads), 4096u), batch);
  const dim3 tile_grid((r + kTile - 1) / kTile, (c + kTile - 1) / kTile, batch), tile_block(kTile, kTileRows);
  if (tall)
    load_tall_kernel<<<tile_grid, tile_block, 0, ctx.stream>>>(x, X.get(), norms.get(), r, c);
  else if (vec)
    load_flat_kernel<true><<<flat_grid, kThreads, 0, ctx.stream>>>(x, X.get(), norms.get(), n);
  else
    load_flat_kernel<false><<<flat_grid, kThreads, 0, ctx.stream>>>(x, X.get(), norms.get(), n);
  XT_CUDA_LAUNCH_CHECK();
  const float ca = kMuonNsCoefficients[0], cb = kMuonNsCoefficients[1], cc = kMuonNsCoefficients[2];
  __nv_bfloat16 *cur = X.get(), *next = Xn.get();
  // Row-major (r, c) X is column-major X^T (ld c); each product below is the row-major one written for
  // cuBLAS (gemm.cpp's convention).
  for (int k = 0; k < steps; ++k) {
    // A (r, r) = X X^T: column-major (X^T)^T (X^T)
    gemm_batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, r, r, c, 1.0f, cur, c, n, cur, c, n, 0.0f, nullptr, A.get(), r, rr,
                 batch);
    // B = b A + c A A (A symmetric: its column-major storage is itself)
    gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, r, r, r, cc, A.get(), r, rr, A.get(), r, rr, cb, A.get(), B.get(), r, rr,
                 batch);
    // X' = a X + B X: column-major (B X)^T = X^T B^T, B^T being B's column-major storage
    gemm_batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, c, r, r, 1.0f, cur, c, n, B.get(), r, rr, ca, cur, next, c, n, batch);
    std::swap(cur, next);
  }
  if (tall)
    store_tall_kernel<<<tile_grid, tile_block, 0, ctx.stream>>>(x, cur, r, c);
  else if (vec)
    store_flat_kernel<true><<<flat_grid, kThreads, 0, ctx.stream>>>(x, cur, n);
  else
    store_flat_kernel<false><<<flat_grid, kThreads, 0, ctx.stream>>>(x, cur, n);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
