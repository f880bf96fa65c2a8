// Few-row matrix products (decoding: N = the batch, N <= kGemvMaxRows of gemv.h): out (N,OC) = inp (N,IC) w^T
// (+ bias), and the MLP's fc variant writing pre and gelu(pre). At these N a product is bound by reading w
// (GPT-2 124M: 14 MB of bf16 weights per layer against kilobytes of activations), which cuBLASLt's tiles for
// large N do not approach, so here each weight element is loaded once per call, in 16-byte pieces, for all rows.
// The summation order of an output depends on IC and the path (vector or scalar) only, never on N or the other
// rows, so RowKernels::per_row (one row per call) and a decoding batch give a row the same bits.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"
#include "backend/cuda/ops.h"

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
    for (int r0 = 0; r0 < N; r0 += kRowTile) {  // every tile starts 16-byte aligned when row 0 does (IC % kN == 0)
      const int rows = std::min(kRowTile, N - r0);
      T* tile_pre = p ? p + size_t(r0) * OC : nullptr;
      if (vec) launch_rows<T, kN>(ctx, o + size_t(r0) * OC, tile_pre, x + size_t(r0) * IC, wt, bias, rows, IC, OC, ldw, split);
      else launch_rows<T, 1>(ctx, o + size_t(r0) * OC, tile_pre, x + size_t(r0) * IC, wt, bias, rows, IC, OC, ldw, split);
    }
  });
}

}  // namespace xtrain::cuda
