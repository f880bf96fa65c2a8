// Fused causal grouped-query attention, FlashAttention-2 style (Dao 2023, arXiv:2307.08691): tiles of
// 64 queries x 64 keys in shared memory, online softmax, the (T,T) matrices never reach global memory.
// The forward keeps per row only the log-sum-exp (and a head-major copy of its output, for the
// backward's D = rowsum(dO * O)); the backward recomputes the probabilities from them.
// Products: 16x8x16 warp tiles. With bf16 (kBf16) they are mma.sync bf16 tensor-core products with
// fp32 accumulation (PTX ISA, "mma.m16n8k16"); otherwise the same fragment ownership is computed in
// fp32 on CUDA cores (exact enough for the fp32 tests, slower). Softmax and all sums are fp32.
// q, k, v, the output and the gradients are activations in the same element type (bf16 with
// --dtype bf16, ops.h); the scratch `att` (log-sum-exp, output copy) is fp32.
// Backward without atomics (deterministic): one kernel owns a key tile of one kv head and sums dk, dv
// over the group's query heads and all query tiles; a second owns a query tile and sums dq.
// Pieces (as FlashAttention's hopper/ code splits them): the PTX wrappers in ptx.cuh; TileDims and
// WarpPos, the tile geometry and lane position every kernel starts from; one causal() mask;
// OnlineSoftmax, the forward's running row state; backward_scores, the recomputation of P and dS that
// both backward kernels run on each tile pair; store_grad, their = / += epilogue.
#include <cuda_bf16.h>

#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/flash_attention.h"
#include "backend/cuda/ptx.cuh"

namespace xtrain::cuda {

namespace {
constexpr int kTile = 64;       // queries and keys per tile
constexpr int kFlashThreads = 128;  // 4 warps x 16 rows
constexpr int kPadP = 8;        // row padding (elements) of the shared tiles: spreads banks

template <bool kBf16>
using Elem = typename std::conditional<kBf16, __nv_bfloat16, float>::type;

// Shared-memory tile geometry for head size HS: LD, LDP = row strides (elements) of the (64, HS) and
// (64, 64) tiles; NO, NS = 8-column mma tiles across a row of O (HS) and of S (64).
template <int HS>
struct TileDims {
  static constexpr int LD = HS + kPadP, LDP = kTile + kPadP, NO = HS / 8, NS = kTile / 8;
};

// WarpPos: where this thread sits in the block's 4 x 16 rows and in the mma C layout: warp w owns the
// tile's rows w*16 .. w*16+15; this lane owns rows g, g+8 and columns 2*q4, 2*q4+1 of each 8-column tile.
struct WarpPos {
  int warp, g, q4;
  __device__ WarpPos() {
    const int lane = threadIdx.x % kWarp;
    warp = threadIdx.x / kWarp, g = lane / 4, q4 = lane % 4;
  }
  // row: the block-tile row (0..63) of this lane's row half hr (0: g, 1: g+8)
  __device__ int row(int hr) const { return warp * 16 + g + 8 * hr; }
};

// Layout of a B operand in shared memory: kNK = stored (N, K) rows (k contiguous, i.e. the
// transpose of B: K of S = Q K^T), kKN = stored (K, N) rows (n contiguous: V of O = P V).
enum class BLayout { kNK, kKN };

// warp_gemm: acc (16 x NT*8) += A (16 x K) B (K x NT*8), K a multiple of 16, NT even, as 16x8x16
// warp tiles. A(r,k) = a[r*lda + k]; B(k,n) = b[n*ldb + k] (kNK) or b[k*ldb + n] (kKN); shared memory,
// rows 16-byte aligned. acc[j] is in the mma C layout: this lane owns rows g, g+8 and columns
// 8j + 2q, 8j + 2q + 1 (g = lane/4, q = lane%4).
// bf16: fragments loaded with ldmatrix (.trans for kKN) and multiplied with mma.sync m16n8k16
// (PTX ISA, "Warp-level matrix load instruction: ldmatrix" and "Matrix Fragments for mma.m16n8k16").
template <bool kBf16, int NT, int K, BLayout kB>
__device__ __forceinline__ void warp_gemm(float (*acc)[4], const Elem<kBf16>* a, int lda, const Elem<kBf16>* b,
                                          int ldb) {
  static_assert(NT % 2 == 0 && K % 16 == 0, "warp_gemm tiles");
  const int lane = threadIdx.x % kWarp;
  if constexpr (kBf16) {
    const int m = lane / 8, r = lane % 8;  // this lane addresses row r of 8x8 matrix m
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
      uint32_t ra[4];  // matrices: (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
      ptx::ldmatrix_x4(ra, a + (r + 8 * (m % 2)) * lda + kk + 8 * (m / 2));
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        uint32_t rb[4];  // (b0, b1) of n-tile j, then of n-tile j+1
        if constexpr (kB == BLayout::kNK) {
          // matrices: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
          ptx::ldmatrix_x4(rb, b + (j * 8 + r + 8 * (m / 2)) * ldb + kk + 8 * (m % 2));
        } else {
          // stored (k, n): transposed loads of (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
          ptx::ldmatrix_x4_trans(rb, b + (kk + r + 8 * (m % 2)) * ldb + j * 8 + 8 * (m / 2));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) ptx::mma_bf16_16816(acc[j + h], ra, rb[2 * h], rb[2 * h + 1]);
      }
    }
  } else {  // the same ownership in fp32 on CUDA cores
    const int g = lane / 4, q = lane % 4;
    constexpr bool nk = kB == BLayout::kNK;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll 4
      for (int k = 0; k < K; ++k) {
        const int n0 = j * 8 + 2 * q;
        const float a0 = a[g * lda + k], a1 = a[(g + 8) * lda + k];
        const float b0 = nk ? b[n0 * ldb + k] : b[k * ldb + n0], b1 = nk ? b[(n0 + 1) * ldb + k] : b[k * ldb + n0 + 1];
        float* c = acc[j];
        c[0] = fmaf(a0, b0, c[0]), c[1] = fmaf(a0, b1, c[1]), c[2] = fmaf(a1, b0, c[2]), c[3] = fmaf(a1, b1, c[3]);
      }
  }
}

// load_tile: dst (64, HS + kPadP) = rows [t0, t0+64) of one head (channels [col, col+HS)) of a row
// layout src (B*T rows of `width`), batch b; rows >= T are zero. Activations are stored in the
// kernel's element type (float, or bf16 with --dtype bf16), so this is a copy in 16-byte vectors
// (row starts and head offsets are multiples of 16 bytes: HS is 32 or 64), issued as asynchronous
// copies (cp.async, sm_80+; PTX ISA "cp.async"): rows >= T copy 0 source bytes, which zero-fills.
// Every thread's copies are complete after ptx::cp_async_commit() + ptx::cp_async_wait<n>() and
// visible to the block after the __syncthreads() that follows. The kernels double-buffer: the next tile's copies are
// issued before the current tile is multiplied, so the loads overlap the tensor-core work.
template <typename E, int HS>
__device__ __forceinline__ void load_tile(E* dst, const E* src, int b, int T, int t0, int width, int col) {
  constexpr int kPer = 16 / sizeof(E), kVec = HS / kPer;
  for (int i = threadIdx.x; i < kTile * kVec; i += kFlashThreads) {
    const int r = i / kVec, c = (i % kVec) * kPer, t = t0 + r;
    const E* g = t < T ? src + (size_t(b) * T + t) * width + col + c : src;  // a valid address either way
    ptx::cp_async_16(dst + r * (HS + kPadP) + c, g, t < T ? 16 : 0);
  }
}

// store2: p[0], p[1] = a, b rounded to E, as one 32-bit (bf16 pair) or 64-bit (float pair) shared store;
// p is at an even element index of a 16-byte aligned row.
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }

// Softmax in base 2: scores are scaled by scale * log2(e) once, so every exponential is one exp2f
// (the MUFU.EX2 instruction plus range handling) instead of expf's extra range reduction; the stored
// log-sum-exp stays in natural log (lse = ln 2 * log2-sum-exp).
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// causal: query position `query` sees key position `key` (the decoder's mask: no keys after the query).
// The one masking rule of the three kernels; the backward's also drop query rows past T.
__device__ __forceinline__ bool causal(int query, int key) { return key <= query; }

// OnlineSoftmax: the forward's running softmax state of one query row (FlashAttention-2, Algorithm 1):
// m = the largest score seen so far (log2 units; the same on the 4 lanes of the quad that share the row)
// and l = this lane's share of sum exp2(s - m). Per key tile: rescale() to the tile's max, add() its sum.
struct OnlineSoftmax {
  float m = -INFINITY, l = 0.f;
  // rescale: mx = this lane's max over m and its scores of the tile; m becomes the quad's max. Returns
  // alpha = exp2(m_old - m_new), the factor for the earlier sum and output (0 on the first tile).
  __device__ __forceinline__ float rescale(float mx) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float alpha = exp2f(m - mx);  // m = -inf on the first tile: alpha = 0
    m = mx;
    return alpha;
  }
  __device__ __forceinline__ void add(float alpha, float sum) { l = l * alpha + sum; }
  // row_sum: the whole row's sum over the quad (every lane must call it)
  __device__ __forceinline__ float row_sum() const {
    float lt = l;
    lt += __shfl_xor_sync(0xffffffffu, lt, 1);
    lt += __shfl_xor_sync(0xffffffffu, lt, 2);
    return lt;
  }
};

// backward_scores: the step both backward kernels share (FlashAttention-2, Algorithm 2, lines 8-13):
// this warp's 16 rows against a 64-column tile, S = A Bt^T and dP = dA dBt^T, the probabilities
// P = exp2(S * scale2 - lse2) recomputed where the key is visible (0 elsewhere) and dS = P (dP - D) scale,
// stored as E pairs into the warp's rows of dSw and, in the dK/dV kernel, of Pw.
// kKeyRows: rows are key positions and columns queries (dK/dV: S^T = K Q^T, dP^T = V dO^T); otherwise
// rows are queries and columns keys (dQ: S = Q K^T, dP = dO V^T). row0, col0: the positions of the warp
// tile's row 0 and column 0. stats(hr, c) -> (lse2, D) of the query of row half hr and tile column c.
template <bool kBf16, int HS, bool kKeyRows, typename Stats>
__device__ __forceinline__ void backward_scores(Elem<kBf16>* Pw, Elem<kBf16>* dSw, const Elem<kBf16>* a,
                                                const Elem<kBf16>* bt, const Elem<kBf16>* da,
                                                const Elem<kBf16>* dbt, int row0, int col0, int T, float scale,
                                                float scale2, const WarpPos& wp, Stats&& stats) {
  constexpr int LD = TileDims<HS>::LD, LDP = TileDims<HS>::LDP, NS = TileDims<HS>::NS;
  float s[NS][4] = {}, dp[NS][4] = {};
  warp_gemm<kBf16, NS, HS, BLayout::kNK>(s, a, LD, bt, LD);
  warp_gemm<kBf16, NS, HS, BLayout::kNK>(dp, da, LD, dbt, LD);
#pragma unroll
  for (int j = 0; j < NS; ++j)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {  // a pair of adjacent columns of row g + 8 hr
      const int hr = e / 2, rpos = row0 + wp.g + 8 * hr, c = j * 8 + 2 * wp.q4;
      float p[2], ds[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int cpos = col0 + c + k, query = kKeyRows ? cpos : rpos, key = kKeyRows ? rpos : cpos;
        const bool live = causal(query, key) && query < T;
        const float2 st = stats(hr, c + k);
        p[k] = live ? exp2f(s[j][e + k] * scale2 - st.x) : 0.f;
        ds[k] = p[k] * (dp[j][e + k] - st.y) * scale;
      }
      const int at = (wp.g + 8 * hr) * LDP + c;
      if constexpr (kKeyRows) store2(Pw + at, p[0], p[1]);
      store2(dSw + at, ds[0], ds[1]);
    }
}

// store_grad: r = v, or r += v when accumulating (Grad::accumulate); each element has one writer.
template <typename E>
__device__ __forceinline__ void store_grad(E& r, float v, bool accumulate) {
  r = from_f<E>((accumulate ? to_f(r) : 0.f) + v);
}

// load_kv_stage: the K and V tiles kt of kv head kh (batch b) into stage kt % 2 of Kb, Vb (each two
// (64, HS + kPadP) tiles), as one committed copy group.
template <typename E, int HS>
__device__ __forceinline__ void load_kv_stage(E* Kb, E* Vb, const E* qkv, int b, const QkvLayout& d, int kh, int kt) {
  constexpr int kStage = kTile * (HS + kPadP);
  load_tile<E, HS>(Kb + (kt & 1) * kStage, qkv, b, d.T, kt * kTile, d.row(), d.k_col(kh));
  load_tile<E, HS>(Vb + (kt & 1) * kStage, qkv, b, d.T, kt * kTile, d.row(), d.v_col(kh));
  ptx::cp_async_commit();
}

// next_stage: the double-buffer step at the top of every loop iteration. issue_next() starts the next
// iteration's copies (into the stage the previous iteration finished with: every iteration ends with a
// barrier); then this iteration's copies are awaited and the barrier makes them visible to all warps.
template <typename F>
__device__ __forceinline__ void next_stage(bool has_next, F&& issue_next) {
  if (has_next) {
    issue_next();
    ptx::cp_async_wait<1>();
  } else {
    ptx::cp_async_wait<0>();
  }
  __syncthreads();
}

// Forward: grid (q tiles, B*NH); block 128 threads; warp w owns query rows w*16 .. w*16+15.
template <bool kBf16, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(Elem<kBf16>* out, float* lse, float* ocopy,
                                                                      const Elem<kBf16>* qkv, QkvLayout d, float scale) {
  using E = Elem<kBf16>;
  constexpr int LD = TileDims<HS>::LD, LDP = TileDims<HS>::LDP, NO = TileDims<HS>::NO, NS = TileDims<HS>::NS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Qs = reinterpret_cast<E*>(smem_raw);
  E* Kb = Qs + kTile * LD;      // 2 stages of K (64, LD)
  E* Vb = Kb + 2 * kTile * LD;  // 2 stages of V
  E* Ps = Vb + 2 * kTile * LD;  // (64, LDP)
  const int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int bh = blockIdx.y, b = bh / d.NH, h = bh % d.NH, kh = d.kv_head(h);
  const WarpPos wp;
  const int q0 = qt * kTile;
  const float scale2 = scale * kLog2e;
  load_tile<E, HS>(Qs, qkv, b, d.T, q0, d.row(), d.q_col(h));
  load_kv_stage<E, HS>(Kb, Vb, qkv, b, d, kh, 0);  // one group: Q and the first K, V
  float o[NO][4] = {};
  OnlineSoftmax sm[2];  // rows g and g+8 of the warp's 16
  E* Pw = Ps + wp.warp * 16 * LDP;
  for (int kt = 0; kt <= qt; ++kt) {
    next_stage(kt < qt, [&] { load_kv_stage<E, HS>(Kb, Vb, qkv, b, d, kh, kt + 1); });
    const E* Ks = Kb + (kt & 1) * kTile * LD;
    const E* Vs = Vb + (kt & 1) * kTile * LD;
    float s[NS][4] = {};
    warp_gemm<kBf16, NS, HS, BLayout::kNK>(s, Qs + wp.warp * 16 * LD, LD, Ks, LD);  // S = Q K^T
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = q0 + wp.row(hr);
      float mx = sm[hr].m;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = kt * kTile + j * 8 + 2 * wp.q4 + e;
          float& x = s[j][2 * hr + e];
          x = causal(row, col) ? x * scale2 : -INFINITY;  // log2 units
          mx = fmaxf(mx, x);
        }
      // the new max is finite: column kt*64 <= row for every tile visited (kt <= qt)
      const float alpha = sm[hr].rescale(mx);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < NS; ++j) {
        const float p0 = exp2f(s[j][2 * hr] - sm[hr].m), p1 = exp2f(s[j][2 * hr + 1] - sm[hr].m);
        sum += p0 + p1;
        store2(Pw + (wp.g + 8 * hr) * LDP + j * 8 + 2 * wp.q4, p0, p1);
      }
      sm[hr].add(alpha, sum);
#pragma unroll
      for (int j = 0; j < NO; ++j) o[j][2 * hr] *= alpha, o[j][2 * hr + 1] *= alpha;
    }
    __syncwarp();
    warp_gemm<kBf16, NO, kTile, BLayout::kKN>(o, Pw, LDP, Vs, LD);  // O += P V
    __syncthreads();  // every warp done with this stage before the next iteration refills it
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float lt = sm[hr].row_sum();
    const int t = q0 + wp.row(hr);
    if (t >= d.T) continue;
    const float inv = 1.0f / lt;
    const size_t hrow = (size_t(bh) * d.T + t);
    if (wp.q4 == 0) lse[hrow] = (sm[hr].m + log2f(lt)) * kLn2;  // natural log
    E* orow = out + d.out(b, t, h);
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = j * 8 + 2 * wp.q4 + e;
        const float v = o[j][2 * hr + e] * inv;
        orow[c] = from_f<E>(v);
        ocopy[hrow * HS + c] = v;
      }
  }
}

// D (B*NH*T) = rowsum(dO * O) per head row (FlashAttention-2, Algorithm 2, line 4). One warp per row.
template <typename E>
__global__ void flash_rowdot_kernel(float* D, const E* dout, const float* ocopy, QkvLayout d) {
  const size_t row = blockIdx.x * size_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= size_t(d.B) * d.NH * d.T) return;
  const int t = int(row % d.T), h = int(row / d.T % d.NH), b = int(row / (size_t(d.T) * d.NH));
  const E* dr = dout + d.out(b, t, h);
  const float* orow = ocopy + row * d.HS;
  float s = 0.f;
  for (int i = lane; i < d.HS; i += kWarp) s += to_f(dr[i]) * orow[i];
  s = warp_sum(s);
  if (lane == 0) D[row] = s;
}

// dK, dV: grid (key tiles, B*KVH); warp w owns keys w*16..+15 of the tile.
template <bool kBf16, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dkdv_kernel(Elem<kBf16>* dqkv, const Elem<kBf16>* qkv,
                                                                            const Elem<kBf16>* dout, const float* lse,
                                                                            const float* D, QkvLayout d, float scale,
                                                                            bool accumulate) {
  using E = Elem<kBf16>;
  constexpr int LD = TileDims<HS>::LD, LDP = TileDims<HS>::LDP, NO = TileDims<HS>::NO;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Ks = reinterpret_cast<E*>(smem_raw);
  E* Vs = Ks + kTile * LD;
  E* Qb = Vs + kTile * LD;         // 2 stages of Q (64, LD)
  E* dOb = Qb + 2 * kTile * LD;    // 2 stages of dO
  E* Ps = dOb + 2 * kTile * LD;    // (64, LDP): P^T, per warp 16 rows
  E* dSs = Ps + kTile * LDP;       // (64, LDP): dS^T
  __shared__ float lse_b[2][kTile], D_b[2][kTile];
  const int kt = blockIdx.x;  // key tile 0 meets every query tile: most work first
  const int bk = blockIdx.y, b = bk / d.KVH, kh = bk % d.KVH, group = d.group();
  const WarpPos wp;
  const int k0 = kt * kTile, nqt = (d.T + kTile - 1) / kTile;
  const float scale2 = scale * kLog2e;
  // iterations it = 0 .. group*nq-1 over (query head h, query tile qt): h = kh*group + it/nq, qt = kt + it%nq
  const int nq = nqt - kt, iters = group * nq;
  auto load_q = [&](int it) {  // Q, dO tiles (async) and lse, D rows (plain loads) of iteration it
    const int st = it & 1, h = kh * group + it / nq, q0 = (kt + it % nq) * kTile;
    load_tile<E, HS>(Qb + st * kTile * LD, qkv, b, d.T, q0, d.row(), d.q_col(h));
    load_tile<E, HS>(dOb + st * kTile * LD, dout, b, d.T, q0, d.out_row(), d.q_col(h));
    ptx::cp_async_commit();
    if (threadIdx.x < kTile) {
      const int t = q0 + threadIdx.x;
      const size_t r = (size_t(b) * d.NH + h) * d.T + t;
      lse_b[st][threadIdx.x] = t < d.T ? lse[r] * kLog2e : 0.f;  // log2 units
      D_b[st][threadIdx.x] = t < d.T ? D[r] : 0.f;
    }
  };
  load_tile<E, HS>(Ks, qkv, b, d.T, k0, d.row(), d.k_col(kh));
  load_tile<E, HS>(Vs, qkv, b, d.T, k0, d.row(), d.v_col(kh));
  load_q(0);  // one group: K, V and the first Q, dO
  float dk[NO][4] = {}, dv[NO][4] = {};
  E* Pw = Ps + wp.warp * 16 * LDP;
  E* dSw = dSs + wp.warp * 16 * LDP;
  for (int it = 0; it < iters; ++it) {
    next_stage(it + 1 < iters, [&] { load_q(it + 1); });
    const int st = it & 1, q0 = (kt + it % nq) * kTile;
    const E* Qs = Qb + st * kTile * LD;
    const E* dOs = dOb + st * kTile * LD;
    const float* lse_s = lse_b[st];
    const float* D_s = D_b[st];
    // P^T, dS^T from S^T = K Q^T and dP^T = V dO^T; a column's query statistics from shared memory
    backward_scores<kBf16, HS, true>(Pw, dSw, Ks + wp.warp * 16 * LD, Qs, Vs + wp.warp * 16 * LD, dOs,
                                     k0 + wp.warp * 16, q0, d.T, scale, scale2, wp,
                                     [&](int, int c) { return make_float2(lse_s[c], D_s[c]); });
    __syncwarp();
    warp_gemm<kBf16, NO, kTile, BLayout::kKN>(dv, Pw, LDP, dOs, LD);   // dV += P^T dO
    warp_gemm<kBf16, NO, kTile, BLayout::kKN>(dk, dSw, LDP, Qs, LD);   // dK += dS^T Q
    __syncthreads();  // every warp done with this stage before the next iteration refills it
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int t = k0 + wp.row(hr);
    if (t >= d.T) continue;
    E* row = dqkv + d.pos(b, t) * d.row();
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = j * 8 + 2 * wp.q4 + e;
        store_grad(row[d.k_col(kh) + c], dk[j][2 * hr + e], accumulate);  // this block's elements alone
        store_grad(row[d.v_col(kh) + c], dv[j][2 * hr + e], accumulate);
      }
  }
}

// dQ: grid (q tiles, B*NH); warp w owns queries w*16..+15 of the tile.
template <bool kBf16, int HS>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dq_kernel(Elem<kBf16>* dqkv, const Elem<kBf16>* qkv,
                                                                          const Elem<kBf16>* dout, const float* lse,
                                                                          const float* D, QkvLayout d, float scale,
                                                                          bool accumulate) {
  using E = Elem<kBf16>;
  constexpr int LD = TileDims<HS>::LD, LDP = TileDims<HS>::LDP, NO = TileDims<HS>::NO;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* Qs = reinterpret_cast<E*>(smem_raw);
  E* dOs = Qs + kTile * LD;
  E* Kb = dOs + kTile * LD;     // 2 stages of K (64, LD)
  E* Vb = Kb + 2 * kTile * LD;  // 2 stages of V
  E* dSs = Vb + 2 * kTile * LD;  // (64, LDP)
  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / d.NH, h = bh % d.NH, kh = d.kv_head(h);
  const WarpPos wp;
  const int q0 = qt * kTile;
  const float scale2 = scale * kLog2e;
  load_tile<E, HS>(Qs, qkv, b, d.T, q0, d.row(), d.q_col(h));
  load_tile<E, HS>(dOs, dout, b, d.T, q0, d.out_row(), d.q_col(h));
  load_kv_stage<E, HS>(Kb, Vb, qkv, b, d, kh, 0);  // one group: Q, dO and the first K, V
  float row_lse[2], row_D[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int t = q0 + wp.row(hr);
    const size_t r = size_t(bh) * d.T + t;
    row_lse[hr] = t < d.T ? lse[r] * kLog2e : 0.f;  // log2 units
    row_D[hr] = t < d.T ? D[r] : 0.f;
  }
  float dq[NO][4] = {};
  E* dSw = dSs + wp.warp * 16 * LDP;
  for (int kt = 0; kt <= qt; ++kt) {
    next_stage(kt < qt, [&] { load_kv_stage<E, HS>(Kb, Vb, qkv, b, d, kh, kt + 1); });
    const E* Ks = Kb + (kt & 1) * kTile * LD;
    const E* Vs = Vb + (kt & 1) * kTile * LD;
    // dS from S = Q K^T and dP = dO V^T; a row's query statistics from registers
    backward_scores<kBf16, HS, false>(nullptr, dSw, Qs + wp.warp * 16 * LD, Ks, dOs + wp.warp * 16 * LD, Vs,
                                      q0 + wp.warp * 16, kt * kTile, d.T, scale, scale2, wp,
                                      [&](int hr, int) { return make_float2(row_lse[hr], row_D[hr]); });
    __syncwarp();
    warp_gemm<kBf16, NO, kTile, BLayout::kKN>(dq, dSw, LDP, Ks, LD);  // dQ += dS K
    __syncthreads();  // every warp done with this stage before the next iteration refills it
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int t = q0 + wp.row(hr);
    if (t >= d.T) continue;
    E* row = dqkv + d.q(b, t, h);
#pragma unroll
    for (int j = 0; j < NO; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) store_grad(row[j * 8 + 2 * wp.q4 + e], dq[j][2 * hr + e], accumulate);
  }
}

// launch: a flash kernel with `smem` bytes of dynamic shared memory (above 48 KiB needs the opt-in).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, Args... args) {
  XT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kFlashThreads, smem, stream>>>(args...);
  XT_CUDA_LAUNCH_CHECK();
}

template <bool kBf16, int HS>
void forward_impl(const OpContext& ctx, Elem<kBf16>* out, float* att, const Elem<kBf16>* qkv, QkvLayout d, float scale) {
  using E = Elem<kBf16>;
  const size_t rows = size_t(d.B) * d.NH * d.T;
  const size_t smem = sizeof(E) * (5 * kTile * (HS + kPadP) + kTile * (kTile + kPadP));  // Q, 2x K, 2x V, P
  const dim3 grid((d.T + kTile - 1) / kTile, d.B * d.NH);
  launch(flash_forward_kernel<kBf16, HS>, grid, smem, ctx.stream, out, att, att + rows, qkv, d, scale);
}

template <bool kBf16, int HS>
void backward_impl(const OpContext& ctx, Elem<kBf16>* dqkv, const Elem<kBf16>* dout, const Elem<kBf16>* qkv,
                   const float* att, QkvLayout d, float scale, bool accumulate) {
  using E = Elem<kBf16>;
  const size_t rows = size_t(d.B) * d.NH * d.T;
  const float* lse = att;
  const float* ocopy = att + rows;
  ScratchBuffer<float> D(*ctx.alloc, rows, "flash attention D");
  constexpr int kRowThreads = 256;
  flash_rowdot_kernel<<<unsigned((rows + kRowThreads / kWarp - 1) / (kRowThreads / kWarp)), kRowThreads, 0,
                        ctx.stream>>>(D.get(), dout, ocopy, d);  // E deduced from dout
  XT_CUDA_LAUNCH_CHECK();
  const int ntiles = (d.T + kTile - 1) / kTile;
  const size_t smem_kv = sizeof(E) * (6 * kTile * (HS + kPadP) + 2 * kTile * (kTile + kPadP));  // K, V, 2x Q, 2x dO, P, dS
  launch(flash_backward_dkdv_kernel<kBf16, HS>, dim3(ntiles, d.B * d.KVH), smem_kv, ctx.stream, dqkv, qkv, dout,
         lse, static_cast<const float*>(D.get()), d, scale, accumulate);
  const size_t smem_q = sizeof(E) * (6 * kTile * (HS + kPadP) + kTile * (kTile + kPadP));  // Q, dO, 2x K, 2x V, dS
  launch(flash_backward_dq_kernel<kBf16, HS>, dim3(ntiles, d.B * d.NH), smem_q, ctx.stream, dqkv, qkv, dout, lse,
         static_cast<const float*>(D.get()), d, scale, accumulate);
}

template <bool kBf16>
void forward_hs(const OpContext& ctx, void* out_, float* att, const void* qkv_, QkvLayout d, float scale) {
  auto* out = static_cast<Elem<kBf16>*>(out_);
  const auto* qkv = static_cast<const Elem<kBf16>*>(qkv_);
  switch (d.HS) {
    case 32: return forward_impl<kBf16, 32>(ctx, out, att, qkv, d, scale);
    case 64: return forward_impl<kBf16, 64>(ctx, out, att, qkv, d, scale);
    default: XT_FAIL("flash attention: unsupported head size " << d.HS);
  }
}

template <bool kBf16>
void backward_hs(const OpContext& ctx, void* dqkv_, const void* dout_, const void* qkv_, const float* att, QkvLayout d,
                 float scale, bool accumulate) {
  auto* dqkv = static_cast<Elem<kBf16>*>(dqkv_);
  const auto* dout = static_cast<const Elem<kBf16>*>(dout_);
  const auto* qkv = static_cast<const Elem<kBf16>*>(qkv_);
  switch (d.HS) {
    case 32: return backward_impl<kBf16, 32>(ctx, dqkv, dout, qkv, att, d, scale, accumulate);
    case 64: return backward_impl<kBf16, 64>(ctx, dqkv, dout, qkv, att, d, scale, accumulate);
    default: XT_FAIL("flash attention: unsupported head size " << d.HS);
  }
}
}  // namespace

bool flash_attention_supported(int T, int HS) {
  // att must hold lse (T per head) + the head-major output copy (T*HS per head) within T*T per head.
  return (HS == 32 || HS == 64) && T >= HS + 1;  // more head sizes: one instantiation each
}

// check_aligned: the tiles move as 16-byte cp.async copies straight from these buffers.
static void check_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    XT_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
             "flash attention: activation buffers must be 16-byte aligned (got " << p << ")");
}

void flash_attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, const QkvLayout& d) {
  check_aligned({out, qkv});
  const float scale = float(1.0 / std::sqrt(double(d.HS)));  // Vaswani et al. 2017, eq. 1
  if (ctx.bf16) forward_hs<true>(ctx, out, att, qkv, d, scale);
  else forward_hs<false>(ctx, out, att, qkv, d, scale);
}

void flash_attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv,
                              const float* att, const QkvLayout& d, bool accumulate) {
  check_aligned({dqkv, dout, qkv});
  const float scale = float(1.0 / std::sqrt(double(d.HS)));
  if (ctx.bf16) backward_hs<true>(ctx, dqkv, dout, qkv, att, d, scale, accumulate);
  else backward_hs<false>(ctx, dqkv, dout, qkv, att, d, scale, accumulate);
}

}  // namespace xtrain::cuda
