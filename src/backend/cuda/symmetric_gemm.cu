// SymmetricProducts (symmetric_gemm.h): the upper blocks of symmetric bf16 products D = alpha Y Y^T + beta C
// as one pointer-array batched GEMM over a group's matrices, then the lower blocks mirrored from them. The
// idea of cuBLAS's syrk (only one triangle's products), which has no bf16 tensor-core or batched form.
#include "backend/cuda/symmetric_gemm.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm_lt_batched.h"

namespace xtrain::cuda {

namespace {
struct ProductTable {  // the products as the pointer kernel reads them (kernel arguments)
  SymmetricProduct p[SymmetricProducts::kMaxProducts];
};

// block_pointers_kernel: thread t = (q, b, u) of (count, batch, p (p + 1) / 2) writes the pointers of matrix
// b's u-th upper block (i, j), i <= j in row order, of product q into ptrs (count, 4, per) as the column-major
// GEMM of run() reads them: D's block (i, j) (row-major, at i h r + j h) in column-major is (Y_j Y_i^T)
// (h, h) = op_T(Y_j^T) op_N(Y_i^T), Y_i^T being row block i of Y_b (rows i h.., ld k) read column-major.
__global__ void block_pointers_kernel(ProductTable t, int count, int batch, int r, int p, int h, const void** ptrs) {
  const int nb = p * (p + 1) / 2, per = batch * nb;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= count * per) return;
  const int q = idx / per, w = idx % per, b = w / nb;
  int u = w % nb, i = 0;
  while (u >= p - i) u -= p - i, ++i;  // row i holds the p - i blocks (i, i..p-1)
  const int j = i + u;
  const SymmetricProduct& s = t.p[q];
  const __nv_bfloat16* Y = s.Y + b * s.stride_y;
  const size_t rr = size_t(r) * r, at = size_t(b) * rr + size_t(i) * h * r + size_t(j) * h;
  const void** out = ptrs + size_t(q) * 4 * per + w;
  out[0] = Y + size_t(j) * h * s.k;
  out[1] = Y + size_t(i) * h * s.k;
  out[2 * per] = s.C != nullptr ? s.C + at : s.D + at;  // beta 0: C unread, D in its place
  out[3 * per] = s.D + at;
}

// block_tiles_kernel over (r, r) matrices split into p x p blocks of h rows: one 32x32 tile of one block pair
// per block of threads (blockIdx.x: the pair, then the tile inside it; blockIdx.y: the matrix), so no block
// is launched for a block pair it does not write and a tile never straddles two blocks:
//   kCopy false: in place in `dst`, each lower block (I, J), I > J, = the transpose of upper block (J, I)
//                (only upper blocks read, only lower ones written);
//   kCopy true:  dst = src on the upper blocks (I <= J): the C term of the in-place route.
// The mirror reads its tile transposed through shared memory (33 columns: a column read hits 32 banks), so
// both sides go along rows.
constexpr int kTile = 32, kTileRows = 8;
template <bool kCopy>
__global__ void block_tiles_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst, int r, int p, int h) {
  const int tiles = (h + kTile - 1) / kTile;  // a side of a block
  int u = blockIdx.x / (tiles * tiles), I = 0, J = 0;
  if constexpr (kCopy) {  // upper pairs (I, J), I <= J, in row order
    while (u >= p - I) u -= p - I, ++I;
    J = I + u;
  } else {  // strictly upper pairs (J, I), J < I, in row order
    while (u >= p - 1 - J) u -= p - 1 - J, ++J;
    I = J + 1 + u;
  }
  const int t = blockIdx.x % (tiles * tiles), a0 = (t / tiles) * kTile, b0 = (t % tiles) * kTile;
  const int row0 = I * h + a0, col0 = J * h + b0;  // the tile: rows row0.. (a0 + y < h), columns col0.. (b0 + x < h)
  const size_t at = size_t(blockIdx.y) * r * r;
  if constexpr (kCopy) {
    for (int y = threadIdx.y; y < kTile; y += kTileRows)
      if (a0 + y < h && b0 + threadIdx.x < h) {
        const size_t e = at + size_t(row0 + y) * r + col0 + threadIdx.x;
        dst[e] = src[e];
      }
  } else {
    __shared__ float tile[kTile][kTile + 1];
    for (int y = threadIdx.y; y < kTile; y += kTileRows)  // tile[y][x] = dst[col0 + y][row0 + x]
      if (b0 + y < h && a0 + threadIdx.x < h)
        tile[y][threadIdx.x] = __bfloat162float(dst[at + size_t(col0 + y) * r + row0 + threadIdx.x]);
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += kTileRows)  // dst[row0 + y][col0 + x] = tile[x][y]
      if (a0 + y < h && b0 + threadIdx.x < h)
        dst[at + size_t(row0 + y) * r + col0 + threadIdx.x] = __float2bfloat16_rn(tile[threadIdx.x][y]);
  }
}

uint32_t alignment_of(uintptr_t a) {  // the largest power of two <= 256 dividing a (256 for 0)
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}
}  // namespace

int symmetric_blocks(int r, int requested) {
  for (int p = requested; p > 1; --p)
    if (r % p == 0 && (r / p) % 8 == 0 && r / p >= kMinSymmetricBlock) return p;
  return 1;
}

bool symmetric_products_lt(const OpContext& ctx, int batch, int r, int p, int k) {
  const int h = r / p, per = batch * p * (p + 1) / 2;
  // the heuristic reads no pointer: the arrays' places are left null
  LtBatchedGemm g{CUBLAS_OP_T, CUBLAS_OP_N, h, h, k, 1.0f, nullptr, k, 0, nullptr, k, 0, 1.0f, nullptr, nullptr, r, 0,
                  per, CUDA_R_16BF, CUBLAS_COMPUTE_32F, true, 256, true};
  return gemm_lt_batched(ctx, g);
}

SymmetricProducts::SymmetricProducts(const OpContext& ctx, int batch, int r, int p,
                                     std::initializer_list<SymmetricProduct> products)
    : ctx_(ctx),
      batch_(batch),
      r_(r),
      p_(p),
      h_(r / p),
      per_(batch * p * (p + 1) / 2),
      products_{},
      align_{},
      count_(static_cast<int>(products.size())),
      ptrs_(*ctx.alloc, size_t(count_) * 4 * per_, "newton_schulz block pointers") {
  XT_CHECK(batch > 0 && p > 1 && symmetric_blocks(r, p) == p && count_ <= kMaxProducts,
           "SymmetricProducts: " << batch << " matrices of " << r << " rows in " << p << " blocks, " << count_
                                 << " products");
  ProductTable table{};
  int q = 0;
  for (const SymmetricProduct& s : products) {
    XT_CHECK(s.k > 0 && (s.C != nullptr || s.D != nullptr), "SymmetricProducts: product " << q << " has no D or k");
    products_[q] = table.p[q] = s;
    // every pointer block_pointers_kernel makes: the bases plus multiples of these offsets (bytes)
    const size_t e = sizeof(__nv_bfloat16), h = size_t(h_);
    uint32_t a = 256;
    for (uintptr_t v : {reinterpret_cast<uintptr_t>(s.Y), reinterpret_cast<uintptr_t>(s.C),
                        reinterpret_cast<uintptr_t>(s.D), uintptr_t(s.stride_y * e), uintptr_t(h * s.k * e),
                        uintptr_t(size_t(r) * r * e), uintptr_t(h * r * e), uintptr_t(h * e)})
      a = std::min(a, alignment_of(v));
    align_[q++] = a;
  }
  constexpr int kThreads = 256;
  const int threads = count_ * per_;
  block_pointers_kernel<<<(threads + kThreads - 1) / kThreads, kThreads, 0, ctx.stream>>>(table, count_, batch, r, p,
                                                                                           h_, ptrs_.get());
  XT_CUDA_LAUNCH_CHECK();
}

void SymmetricProducts::run(int i, float alpha, float beta) const {
  XT_CHECK(i >= 0 && i < count_, "SymmetricProducts::run: product " << i << " of " << count_);
  const SymmetricProduct& s = products_[i];
  const void** A = ptrs_.get() + size_t(i) * 4 * per_;
  const void **B = A + per_, **C = A + 2 * per_, **D = A + 3 * per_;
  const unsigned tiles = unsigned((h_ + kTile - 1) / kTile) * unsigned((h_ + kTile - 1) / kTile);  // per block
  const dim3 block(kTile, kTileRows), upper(tiles * p_ * (p_ + 1) / 2, batch_), lower(tiles * p_ * (p_ - 1) / 2, batch_);
  LtBatchedGemm g{CUBLAS_OP_T, CUBLAS_OP_N, h_, h_, s.k, alpha, A, s.k, 0, B, s.k, 0, beta, C, D, r_, 0, per_,
                  CUDA_R_16BF, CUBLAS_COMPUTE_32F, true, align_[i]};
  if (!gemm_lt_batched(ctx_, g)) {
    if (beta != 0.0f && s.C != s.D) {  // cuBLAS runs in place: D's upper blocks take C's first
      block_tiles_kernel<true><<<upper, block, 0, ctx_.stream>>>(s.C, s.D, r_, p_, h_);
      XT_CUDA_LAUNCH_CHECK();
    }
    XT_CUBLAS_CHECK(cublasGemmBatchedEx(ctx_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, h_, h_, s.k, &alpha, A, CUDA_R_16BF,
                                        s.k, B, CUDA_R_16BF, s.k, &beta, const_cast<void* const*>(D), CUDA_R_16BF,
                                        r_, per_, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  block_tiles_kernel<false><<<lower, block, 0, ctx_.stream>>>(s.D, s.D, r_, p_, h_);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
