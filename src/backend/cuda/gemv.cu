// Few-row matrix products (decoding: N = the batch, N <= kGemvMaxRows of gemv.h): out (N,OC) = inp (N,IC) w^T
// (+ bias), and the MLP's fc variant writing pre and gelu(pre). At these N a product is bound by reading w
// (GPT-2 124M: 14 MB of bf16 weights per layer against kilobytes of activations), which cuBLASLt's tiles for
// large N do not approach, so here each weight element is loaded once per call, in 16-byte pieces, for all rows.
// The summation order of an output depends on IC and the path (vector or scalar) only, never on N or the other
// rows, so RowKernels::per_row (one row per call) and a decoding batch give a row the same bits. One row on the
// 16-byte path takes gemv_row_kernel (the same order, more loads in flight), which also fuses the decoder's
// batch-1 norms and residual adds (gemv_fused_forward).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/row_norm.cuh"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / kWarp;
// output columns per warp: each input element is loaded and converted once for kCols weight rows
constexpr int kCols = 2;
// packs per lane and column loaded before the first of them is multiplied, so that many loads are in flight
constexpr int kUnroll = 4;
// split_for: a column's IC goes to more warps only while each lane keeps at least this many packs
constexpr int kMinPacksPerLane = 4;
// rows per launch: the largest register tile (kRowTile x kCols fp32 sums per lane; kRowTile * kCols <= 32 lanes
// write them). More rows take several launches, each reading the weights again.
constexpr int kRowTile = 16;
static_assert(kRowTile * kCols <= kWarp, "one lane per output of a warp's tile");
// the widest normalized row gemv_fused_forward keeps in shared memory (IC elements; the default 48 KB limit)
constexpr size_t kMaxNormRowBytes = 48 * 1024;

// gemv_kernel: rows (<= kRows) rows of out (rows,OC) = inp (rows,IC) w^T + bias; w (OC,IC) row stride ldw; T the
// activation type of inp, w, out, pre. kVec elements per load: Pack<T>::kN (16 bytes; IC and ldw multiples of it,
// inp and w 16-byte aligned) or 1 (the scalar path). A column group (kCols columns) belongs to `split` warps
// (split_for); its lanes take packs t, t + 32 split, ... (t = the lane's index among them) in ascending order
// and each sums its products in fp32 with explicit FMAs in that order, then the warp sums lanes by a butterfly
// (warp_sum) and the split warps' sums are added in warp order. None of it depends on `rows`. pre null: out =
// the sum + bias; pre set (the fc layer's GELU): pre = the sum + bias, out = gelu(the same fp32 value), each
// rounded once to T. Columns past OC (the last group of an odd OC) read row OC-1 and are not stored.
template <typename T, int kVec, int kRows>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(T* out, T* pre, const T* __restrict__ inp, const T* __restrict__ w, const float* __restrict__ bias,
                int rows, int IC, int OC, int ldw, int split) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int part = warp % split;                                            // which of the group's warps
  const int c0 = (blockIdx.x * (kWarpsPerBlock / split) + warp / split) * kCols;  // the group's first column
  const int P = IC / kVec, stride = split * kWarp;
  const T* wrow[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) wrow[j] = w + size_t(min(c0 + j, OC - 1)) * ldw;
  float acc[kRows][kCols];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j) acc[r][j] = 0.0f;

  for (int p0 = part * kWarp + lane; p0 < P; p0 += kUnroll * stride) {
    Vec<T, kVec> wv[kUnroll][kCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (p0 + u * stride < P)
#pragma unroll
        for (int j = 0; j < kCols; ++j) wv[u][j] = load_vec<T, kVec>(wrow[j] + size_t(p0 + u * stride) * kVec);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int p = p0 + u * stride;
      if (p < P) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          if (r < rows) {
            const Vec<T, kVec> xv = load_vec<T, kVec>(inp + size_t(r) * IC + size_t(p) * kVec);
#pragma unroll
            for (int k = 0; k < kVec; ++k) {
              const float x = to_f(xv.v[k]);
#pragma unroll
              for (int j = 0; j < kCols; ++j) acc[r][j] = __fmaf_rn(to_f(wv[u][j].v[k]), x, acc[r][j]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j)
      if (r < rows) acc[r][j] = warp_sum(acc[r][j]);  // every lane gets the same bits (fp32 + commutes)
  if (split > 1) {
    __shared__ float partial[kWarpsPerBlock][kRows][kCols];
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int j = 0; j < kCols; ++j) partial[warp][r][j] = acc[r][j];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        float s = partial[warp][r][j];
        for (int q = 1; q < split; ++q) s += partial[warp + q][r][j];
        acc[r][j] = s;
      }
  }
  // lane r * kCols + j stores row r, column c0 + j
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int c = c0 + j;
      if (lane == r * kCols + j && r < rows && c < OC) {
        const float s = bias ? acc[r][j] + bias[c] : acc[r][j];
        const size_t i = size_t(r) * OC + c;
        if (pre) {
          pre[i] = from_f<T>(s);
          out[i] = from_f<T>(gelu_tanh(s));
        } else {
          out[i] = from_f<T>(s);
        }
      }
    }
}

// gemv_row_kernel: the one-row product of the vector path (rows = 1, kVec = Pack<T>::kN), each output's sum in
// exactly gemv_kernel's order (the same split, lane packs and reductions: the same bits), with more loads in
// flight: a lane loads kRowUnroll packs of each of its kCols columns and of the input vector before the first
// multiply, so a row of up to kRowUnroll * 32 * split packs is one memory round trip (launch_row picks 4 or 8). Fused around it (the
// decoder's batch-1 step, GemvFusion of ops.h):
// - kNorm (kLayerNorm, kRmsNorm): inp is the raw (IC) row; each block first normalizes it into shared memory with
//   layernorm_forward_kernel's / rmsnorm_forward_kernel's arithmetic (one warp's lane order for the statistics,
//   fp32, the same rounding to T), so the product sees the bits the norm kernel would have written. The first
//   weight packs are loaded before it, so their latency overlaps the norm.
// - residual set: out = residual + the product rounded to T, rounded again as residual_forward rounds (out may
//   alias residual: each element is read, then written, by the same lane).
// Launched with programmatic dependent launch (launch_row, launch.cuh): the kernel may start before the previous one
// has finished. It reads inp and residual, and writes, only after griddepcontrol_wait; it reads the weights, bias
// and the norm's weights after the wait too, unless `prefetch` (the caller's promise that no kernel still running
// writes them, GemvFusion::prefetch_weights: the decoder's weights during a step): then it loads its first weight
// packs, its bias and the norm weights it applies first before the wait, overlapping the previous kernel's tail.
// The residual element is read right after the wait, so that the chain after it holds no load from HBM. It lets
// the next kernel start likewise as soon as all of its own blocks run.
// dynamic shared memory: IC elements of T with kNorm, else none.
constexpr int kNone = 0, kLayerNorm = 1, kRmsNorm = 2;

template <typename T, int kRowUnroll, int kNorm>
__global__ void __launch_bounds__(kThreads)
    gemv_row_kernel(T* out, T* pre, const T* __restrict__ inp, const T* __restrict__ w,
                    const float* __restrict__ bias, const T* residual, const float* __restrict__ norm_w,
                    const float* __restrict__ norm_b, float eps, int IC, int OC, int ldw, int split,
                    bool prefetch) {
  constexpr int kVec = Pack<T>::kN;
  extern __shared__ __align__(16) unsigned char row_smem[];
  ptx::griddepcontrol_launch_dependents();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int part = warp % split;
  const int c0 = (blockIdx.x * (kWarpsPerBlock / split) + warp / split) * kCols;
  const int P = IC / kVec, stride = split * kWarp;
  const T* wrow[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) wrow[j] = w + size_t(min(c0 + j, OC - 1)) * ldw;
  float acc[kCols];
#pragma unroll
  for (int j = 0; j < kCols; ++j) acc[j] = 0.0f;
  Vec<T, kVec> wv[kRowUnroll][kCols];
  int p0 = part * kWarp + lane;
  auto load_weights = [&] {
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (p0 + u * stride < P)
#pragma unroll
        for (int j = 0; j < kCols; ++j) wv[u][j] = load_vec<T, kVec>(wrow[j] + size_t(p0 + u * stride) * kVec);
  };
  // the parameters this thread reads late (its output column's bias, the norm's weights of its first normalized
  // pack), loaded with the weights so that no load from memory waits at the end of the chain
  const int nv = IC / kVec;
  float bias_v = 0.0f;
  Vec<float, kVec> wn0{}, bn0{};
  auto load_params = [&] {
    if (bias && lane < kCols) bias_v = bias[min(c0 + lane, OC - 1)];
    if constexpr (kNorm != kNone) {
      if (int(threadIdx.x) < nv) wn0 = load_vec<float, kVec>(norm_w + threadIdx.x * kVec);
      if constexpr (kNorm == kLayerNorm)
        if (int(threadIdx.x) < nv) bn0 = load_vec<float, kVec>(norm_b + threadIdx.x * kVec);
    }
  };
  if (prefetch) load_weights(), load_params();
  ptx::griddepcontrol_wait();  // the previous kernels' outputs (inp, residual) from here on
  if (!prefetch) load_weights(), load_params();
  // the residual element this lane adds at the end, read now so that its latency overlaps the product (out may
  // alias residual: the same lane reads it here and writes it last)
  const float res_v = residual && lane < kCols ? to_f(residual[min(c0 + lane, OC - 1)]) : 0.0f;
  const T* x = inp;
  if constexpr (kNorm != kNone) {
    T* xs = reinterpret_cast<T*>(row_smem);
    // the statistics: every warp the same lane order as the norm kernels' one warp per row (the same bits in each)
    float mu = 0.0f, rs;
    if constexpr (kNorm == kLayerNorm) {
      float s = 0.0f;
      for (int p = lane; p < nv; p += kWarp) {
        const Vec<T, kVec> v = load_vec<T, kVec>(inp + p * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) s += to_f(v.v[k]);
      }
      mu = warp_sum(s) / IC;
      float var = 0.0f;
      for (int p = lane; p < nv; p += kWarp) {
        const Vec<T, kVec> v = load_vec<T, kVec>(inp + p * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) var += (to_f(v.v[k]) - mu) * (to_f(v.v[k]) - mu);
      }
      rs = rsqrtf(warp_sum(var) / IC + eps);
    } else {
      float ss = 0.0f;
      for (int p = lane; p < nv; p += kWarp) {
        const Vec<T, kVec> v = load_vec<T, kVec>(inp + p * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) ss += to_f(v.v[k]) * to_f(v.v[k]);
      }
      rs = rsqrtf(warp_sum(ss) / IC + eps);
    }
    // the normalized row, each element as the norm kernel computes it, spread over the block
    for (int p = threadIdx.x; p < nv; p += kThreads) {
      const Vec<T, kVec> v = load_vec<T, kVec>(inp + p * kVec);
      const bool first = p == int(threadIdx.x);
      const Vec<float, kVec> wn = first ? wn0 : load_vec<float, kVec>(norm_w + p * kVec);
      Vec<T, kVec> r;
      if constexpr (kNorm == kLayerNorm) {
        const Vec<float, kVec> bn = first ? bn0 : load_vec<float, kVec>(norm_b + p * kVec);
#pragma unroll
        for (int k = 0; k < kVec; ++k) r.v[k] = from_f<T>((to_f(v.v[k]) - mu) * rs * wn.v[k] + bn.v[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) r.v[k] = from_f<T>(to_f(v.v[k]) * rs * wn.v[k]);
      }
      store_vec<T, kVec>(xs + p * kVec, r);
    }
    __syncthreads();
    x = xs;
  }
  for (;;) {
    Vec<T, kVec> xv[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (p0 + u * stride < P) xv[u] = load_vec<T, kVec>(x + size_t(p0 + u * stride) * kVec);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      if (p0 + u * stride < P) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float xf = to_f(xv[u].v[k]);
#pragma unroll
          for (int j = 0; j < kCols; ++j) acc[j] = __fmaf_rn(to_f(wv[u][j].v[k]), xf, acc[j]);
        }
      }
    }
    p0 += kRowUnroll * stride;
    if (p0 >= P) break;
    load_weights();
  }
#pragma unroll
  for (int j = 0; j < kCols; ++j) acc[j] = warp_sum(acc[j]);  // every lane gets the same bits
  if (split > 1) {
    __shared__ float partial[kWarpsPerBlock][kCols];
    if (lane == 0)
#pragma unroll
      for (int j = 0; j < kCols; ++j) partial[warp][j] = acc[j];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      float s = partial[warp][j];
      for (int q = 1; q < split; ++q) s += partial[warp + q][j];
      acc[j] = s;
    }
  }
  // lane j stores column c0 + j
#pragma unroll
  for (int j = 0; j < kCols; ++j) {
    const int c = c0 + j;
    if (lane == j && c < OC) {
      const float s = bias ? acc[j] + bias_v : acc[j];
      if (pre) {
        pre[c] = from_f<T>(s);
        out[c] = from_f<T>(gelu_tanh(s));
      } else if (residual) {
        out[c] = from_f<T>(res_v + to_f(from_f<T>(s)));
      } else {
        out[c] = from_f<T>(s);
      }
    }
  }
}

// split_for: warps per column group for a row of `packs` loads: the most of 1, 2, 4 that leaves each lane at
// least kMinPacksPerLane packs, so a wide IC (an MLP projection) still puts enough loads in flight per SM when
// OC gives few column groups. A function of IC and the path only (see the file header).
int split_for(int packs) {
  int s = 1;
  while (s < kWarpsPerBlock && packs >= 2 * s * kWarp * kMinPacksPerLane) s *= 2;
  return s;
}

template <typename T, int kVec, int kRows>
void launch(const OpContext& ctx, T* out, T* pre, const T* inp, const T* w, const float* bias, int rows, int IC,
            int OC, int ldw, int split) {
  const int groups = (OC + kCols - 1) / kCols, per_block = kWarpsPerBlock / split;
  const unsigned blocks = unsigned((groups + per_block - 1) / per_block);
  gemv_kernel<T, kVec, kRows><<<blocks, kThreads, 0, ctx.stream>>>(out, pre, inp, w, bias, rows, IC, OC, ldw, split);
  XT_CUDA_LAUNCH_CHECK();
}

// launch_rows: the smallest register tile of 1, 2, 4, 8 or kRowTile rows that holds `rows` (<= kRowTile)
template <typename T, int kVec>
void launch_rows(const OpContext& ctx, T* out, T* pre, const T* inp, const T* w, const float* bias, int rows, int IC,
                 int OC, int ldw, int split) {
  if (rows <= 1) launch<T, kVec, 1>(ctx, out, pre, inp, w, bias, rows, IC, OC, ldw, split);
  else if (rows <= 2) launch<T, kVec, 2>(ctx, out, pre, inp, w, bias, rows, IC, OC, ldw, split);
  else if (rows <= 4) launch<T, kVec, 4>(ctx, out, pre, inp, w, bias, rows, IC, OC, ldw, split);
  else if (rows <= 8) launch<T, kVec, 8>(ctx, out, pre, inp, w, bias, rows, IC, OC, ldw, split);
  else launch<T, kVec, kRowTile>(ctx, out, pre, inp, w, bias, rows, IC, OC, ldw, split);
}
// launch_row: gemv_row_kernel for one row, unrolled 4 packs per lane where that holds a lane's packs of a column (IC
// = 768: 3), else 8 (fewer registers, so more warps per SM, for the short rows). Neither changes an output's bits.
template <typename T, int kNorm>
void launch_row(const OpContext& ctx, T* out, T* pre, const T* inp, const T* w, const float* bias, const T* residual,
                const float* norm_w, const float* norm_b, float eps, int IC, int OC, int ldw, int split,
                bool prefetch) {
  const size_t smem = kNorm != kNone ? size_t(IC) * sizeof(T) : 0;
  const int per_block = kWarpsPerBlock / split;
  const int groups = (OC + kCols - 1) / kCols;
  const unsigned blocks = unsigned((groups + per_block - 1) / per_block);
  const int lane_packs = (IC / Pack<T>::kN + split * kWarp - 1) / (split * kWarp);
  auto kernel = lane_packs <= 4 ? gemv_row_kernel<T, 4, kNorm> : gemv_row_kernel<T, 8, kNorm>;
  launch_kernel(true, ctx.stream, dim3(blocks), dim3(kThreads), smem, kernel, out, pre, inp, w, bias, residual, norm_w,
                norm_b, eps, IC, OC, ldw, split, prefetch);
}
}  // namespace

void gemv_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const void* w, int ldw,
                  const float* bias, int N, int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0 && ldw >= IC,
           "bad gemv shape N=" << N << " IC=" << IC << " OC=" << OC << " ldw=" << ldw);
  if (N == 0 || OC == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = Pack<T>::kN;
    T* o = static_cast<T*>(out);
    T* p = static_cast<T*>(pre);
    const T* x = static_cast<const T*>(inp);
    const T* wt = static_cast<const T*>(w);
    const bool vec = IC % kN == 0 && ldw % kN == 0 && aligned16(x) && aligned16(wt);
    const int split = split_for(vec ? IC / kN : IC);
    if (vec && N == 1)
      return launch_row<T, kNone>(ctx, o, p, x, wt, bias, nullptr, nullptr, nullptr, 0.0f, IC, OC, ldw, split, false);
    for (int r0 = 0; r0 < N; r0 += kRowTile) {  // every tile starts 16-byte aligned when row 0 does (IC % kN == 0)
      const int rows = std::min(kRowTile, N - r0);
      T* tile_pre = p ? p + size_t(r0) * OC : nullptr;
      if (vec) launch_rows<T, kN>(ctx, o + size_t(r0) * OC, tile_pre, x + size_t(r0) * IC, wt, bias, rows, IC, OC, ldw, split);
      else launch_rows<T, 1>(ctx, o + size_t(r0) * OC, tile_pre, x + size_t(r0) * IC, wt, bias, rows, IC, OC, ldw, split);
    }
  });
}

bool gemv_fused_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const void* w, int ldw,
                        const float* bias, int IC, int OC, const GemvFusion& f) {
  XT_CHECK(IC > 0 && OC > 0 && ldw >= IC, "bad gemv shape IC=" << IC << " OC=" << OC << " ldw=" << ldw);
  XT_CHECK(!(pre && f.residual), "gemv_fused_forward: the GELU and the residual add do not fuse together");
  XT_CHECK(f.norm_w || !f.norm_b, "gemv_fused_forward: a norm bias without its weight");
  bool done = false;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = Pack<T>::kN;
    // the vector path of both gemv_kernel (same bits) and the norm kernels (vec_rows: their kN = Pack<T>::kN order)
    if (IC % kN != 0 || ldw % kN != 0 || !aligned16(inp) || !aligned16(w)) return;
    if (f.norm_w && (!vec_rows<T>(IC, {f.norm_w, f.norm_b}) || size_t(IC) * sizeof(T) > kMaxNormRowBytes)) return;
    T* o = static_cast<T*>(out);
    T* p = static_cast<T*>(pre);
    const T* x = static_cast<const T*>(inp);
    const T* wt = static_cast<const T*>(w);
    const T* res = static_cast<const T*>(f.residual);
    const int split = split_for(IC / kN);
    const bool pf = f.prefetch_weights;
    if (!f.norm_w)
      launch_row<T, kNone>(ctx, o, p, x, wt, bias, res, nullptr, nullptr, 0.0f, IC, OC, ldw, split, pf);
    else if (f.norm_b)
      launch_row<T, kLayerNorm>(ctx, o, p, x, wt, bias, res, f.norm_w, f.norm_b, kLayerNormEps, IC, OC, ldw, split, pf);
    else
      launch_row<T, kRmsNorm>(ctx, o, p, x, wt, bias, res, f.norm_w, nullptr, f.rms_eps, IC, OC, ldw, split, pf);
    done = true;
  });
  return done;
}

}  // namespace xtrain::cuda
