// LayerNorm (Ba et al. 2016), eps 1e-5 (GPT-2 / PyTorch default). One warp per row for the row
// statistics and dinp (the forward in the row norms' launch shape, row_norm.cuh; the backward in blocks of
// kBackwardWarps rows that also sum dw and db); dw and db as deterministic column sums, per block of rows by the backward's row
// kernel up to C = 1024, by the separate column reduction beyond. fp32 arithmetic on
// activations of type T (float or bf16, ops.h); rows move in 16-byte vectors (kN = Pack<T>::kN
// elements) when C and the pointers allow, else element by element (kN = 1), same code.
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_norm.cuh"

namespace xtrain::cuda {

namespace {
// out (N,C) = (x - mean) * rstd * w + b; two-pass variance (no cancellation for large means).
// out, inp: activations; statistics fp32. C % kN == 0.
// kAdd (residual_layernorm_forward): x = res = inp + inp2 rounded to T as residual_forward rounds it,
// written to res in the first pass and read back by the same lane in the later passes, so the
// statistics and out see exactly the values that layernorm_forward(res) would read. res may alias inp
// or inp2 (each element is read before the same thread overwrites it); out aliases none of them.
template <typename T, int kN, bool kAdd>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const float* w,
                                         const float* b, int N, int C, const T* inp2, T* res, bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (launch_layernorm_forward)
  const int row = row_norm_row(), lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = (kAdd ? res : inp) + size_t(row) * C;
  const int nv = C / kN;
  float s = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> v = residual_row_vec<T, kN, kAdd>(inp, inp2, res, size_t(row) * C + size_t(p) * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) s += to_f(v.v[k]);
  }
  const float mu = warp_sum(s) / C;
  float var = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> v = load_vec<T, kN>(x + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) var += (to_f(v.v[k]) - mu) * (to_f(v.v[k]) - mu);
  }
  const float rs = rsqrtf(warp_sum(var) / C + kLayerNormEps);
  T* o = out + size_t(row) * C;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> v = load_vec<T, kN>(x + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN), bv = load_vec<float, kN>(b + p * kN);
    Vec<T, kN> r;
#pragma unroll
    for (int k = 0; k < kN; ++k) r.v[k] = from_f<T>((to_f(v.v[k]) - mu) * rs * wv.v[k] + bv.v[k]);
    store_vec<T, kN>(o + p * kN, r);
  }
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

// LayerNorm's two column sums (dw, db) leave a lane kLaneCols columns of each: C <= kFusedMaxC = 1024 fuses them.
constexpr int kLaneCols = lane_cols(2);
constexpr int kFusedMaxC = fused_norm_max_c(2);

// Block b takes the rows [b * rows_per_block, (b + 1) * rows_per_block) of N, warp j of them the rows
// begin + j, begin + j + kBackwardWarps, ...; lane l the vectors p = l, l + 32, ... (kN elements each)
// of a row, kSlots of them per trip of the loop. Per row:
//   dinp (N,C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * w, xhat = (x - mean) rstd
// kParams (needs C / kN <= 32 * kSlots, one trip, so a lane's columns stay the same registers) also
// writes the block's column sums partial (2, gridDim.x, C): [0] of dout * xhat (dw), [1] of dout (db).
// Order: each lane adds its columns' terms in fp32 over its warp's rows in row order, then
// block_column_partial adds the warps' sums in double in warp order; column_finish adds the blocks'.
// dynamic shared memory: norm_stage_warps(2) * C floats with kParams (launch_norm_backward), else none.
template <typename T, int kN, int kSlots, bool kParams>
__global__ void __launch_bounds__(kBackwardThreads)
    layernorm_backward_kernel(T* dinp, double* partial, const T* dout, const T* inp, const float* w,
                              const float* mean, const float* rstd, int N, int C, int rows_per_block) {
  extern __shared__ __align__(16) float stage[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int begin = blockIdx.x * rows_per_block, end = min(N, begin + rows_per_block);
  const int nv = C / kN;
  Vec<float, kN> dw_sum[kSlots] = {}, db_sum[kSlots] = {};
  for (int row = begin + warp; row < end; row += kBackwardWarps) {
    const T* x = inp + size_t(row) * C;
    const T* dy = dout + size_t(row) * C;
    const float mu = mean[row], rs = rstd[row];
    float g_sum = 0.0f, gx_sum = 0.0f;
    for_backward_slots<T, kN, kSlots>(x, dy, w, lane, nv, [&](int, int, const Vec<T, kN>& xv, const Vec<T, kN>& dv,
                                                             const Vec<float, kN>& wv) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const float g = to_f(dv.v[k]) * wv.v[k];
        g_sum += g;
        gx_sum += g * (to_f(xv.v[k]) - mu) * rs;
      }
    });
    const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
    T* dx = dinp + size_t(row) * C;
    for_backward_slots<T, kN, kSlots>(x, dy, w, lane, nv, [&](int i, int p, const Vec<T, kN>& xv, const Vec<T, kN>& dv,
                                                             const Vec<float, kN>& wv) {
      Vec<T, kN> dxv = load_vec<T, kN>(dx + p * kN);
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const float d = to_f(dv.v[k]), xhat = (to_f(xv.v[k]) - mu) * rs;
        dxv.v[k] = from_f<T>(to_f(dxv.v[k]) + rs * (d * wv.v[k] - g_mean - xhat * gx_mean));
        if constexpr (kParams) {
          dw_sum[i].v[k] += d * xhat;
          db_sum[i].v[k] += d;
        }
      }
      store_vec<T, kN>(dx + p * kN, dxv);
    });
  }
  if constexpr (kParams) {
    constexpr int kStageWarps = norm_stage_warps(2);
    block_column_partial<kStageWarps>(partial + size_t(blockIdx.x) * C, dw_sum, stage, C);
    block_column_partial<kStageWarps>(partial + (size_t(gridDim.x) + blockIdx.x) * C, db_sum, stage, C);
  }
}

// the dw and db terms of one element, dout * xhat and dout: one pass over dout gives both sums
template <typename T>
struct ParamGradTerms {
  const T *dout, *inp;
  const float *mean, *rstd;
  int C;
  __device__ ColumnTerms<2> operator()(int n, int c) const {
    const size_t i = size_t(n) * C + c;
    const float dy = to_f(dout[i]);
    return {{dy * ((to_f(inp[i]) - mean[n]) * rstd[n]), dy}};
  }
};

// launch_layernorm_forward: layernorm_forward, or with inp2 and res the fused residual_layernorm_forward.
void launch_layernorm_forward(const OpContext& ctx, void* out, float* mean, float* rstd, const void* inp,
                              const float* w, const float* b, int N, int C, const void* inp2, void* res) {
  launch_row_norm(ctx, N, C, {out, inp, w, b}, inp2, res, [&](auto shape) {
    using S = decltype(shape);
    using T = typename S::type;
    launch_kernel(decoding_rows(N), ctx.stream, shape.grid, shape.block, 0, layernorm_forward_kernel<T, S::kN, S::kAdd>,
                  static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp), w, b, N, C,
                  static_cast<const T*>(inp2), static_cast<T*>(res), decoding_rows(N));
  });
}
}  // namespace

void layernorm_forward(const OpContext& ctx, void* out, float* mean, float* rstd, const void* inp,
                       const float* w, const float* b, int N, int C) {
  launch_layernorm_forward(ctx, out, mean, rstd, inp, w, b, N, C, nullptr, nullptr);
}

void residual_layernorm_forward(const OpContext& ctx, void* res, void* out, float* mean, float* rstd, const void* a,
                                const void* b, const float* w, const float* bias, int N, int C) {
  launch_layernorm_forward(ctx, out, mean, rstd, a, w, bias, N, C, b, res);
}

void layernorm_backward(const OpContext& ctx, void* dinp, float* dw, float* db, const void* dout,
                        const void* inp, const float* w, const float* mean, const float* rstd, int N, int C,
                        bool accumulate_dw) {
  if (C <= 0) return;
  if (N <= 0) {  // empty sums: dw, db assigned zeros, or left as they are
    if (!accumulate_dw) column_zero<2>(ctx, {{dw, db}}, C);
    return;
  }
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dx = static_cast<T*>(dinp);
    const T* dy = static_cast<const T*>(dout);
    const T* x = static_cast<const T*>(inp);
    const bool vec = vec_rows<T>(C, {dinp, dout, inp, w});
    constexpr int kV = Pack<T>::kN;
    if (C <= kFusedMaxC) {  // dw, db from the row kernel's per-block sums, then the finish stage
      launch_norm_backward<2>(ctx, {{dw, db}}, N, C, accumulate_dw, [&](const NormBackwardShape& s) {
        const auto kernel = vec ? layernorm_backward_kernel<T, kV, kLaneCols / kV, true>
                                : layernorm_backward_kernel<T, 1, kLaneCols, true>;
        kernel<<<s.grid, kBackwardThreads, s.smem, ctx.stream>>>(dx, s.partial, dy, x, w, mean, rstd, N, C,
                                                                 s.rows_per_block);
      });
    } else {  // one row per warp, then the column reduction reads dout and inp again
      const unsigned blocks = unsigned((N + kBackwardWarps - 1) / kBackwardWarps);
      const auto kernel = vec ? layernorm_backward_kernel<T, kV, 1, false> : layernorm_backward_kernel<T, 1, 1, false>;
      kernel<<<blocks, kBackwardThreads, 0, ctx.stream>>>(dx, nullptr, dy, x, w, mean, rstd, N, C, kBackwardWarps);
      XT_CUDA_LAUNCH_CHECK();
      column_reduce_accumulate<2>(ctx, {{dw, db}}, ParamGradTerms<T>{dy, x, mean, rstd, C}, N, C, accumulate_dw);
    }
  });
}

}  // namespace xtrain::cuda
