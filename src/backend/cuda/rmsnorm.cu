// RMSNorm (Zhang & Sennrich 2019; transformers' LlamaRMSNorm), forward, the fused residual add + forward,
// and backward. The forward: one warp per row in the row norms' launch shape (row_norm.cuh), the row kept in
// registers between the statistic and the output. The backward: layernorm_backward's blocks of rows, one warp
// per row, that also sum dw per block, finished in a fixed order (row_norm.cuh, column_reduce.cuh: no atomics),
// up to C = 2048; wider rows take the separate column reduction. fp32 arithmetic on activations of type T (float
// or bf16, ops.h); rows move in 16-byte vectors (kN = Pack<T>::kN elements) when C and the pointers allow
// (vec_rows), else element by element (kN = 1), same code.
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_norm.cuh"

namespace xtrain::cuda {

namespace {

// The vectors of a row a lane of the forward holds in registers: rows of up to kRowSlots * 32 vectors (bf16
// C <= 2048, fp32 C <= 1024) are read once; longer ones go in trips of kRowSlots vectors, each trip's loads in
// flight together, and are read again (from cache) for out. 16 slots would keep bf16 rows of C = 4096, but
// the compiler then hoists 16 slots of weight loads as well: 181 to 254 registers, or spills under a bound.
constexpr int kRowSlots = 8;

// out (N,C) = x * rstd * w, rstd = 1 / sqrt(mean_c(x^2) + eps). out, inp: activations; rstd fp32, may be
// null. kAdd (residual_rmsnorm_forward): x = res = inp + inp2 rounded to T as residual_forward rounds it,
// written to res (residual_row_slots) and, for a row longer than one trip, read back by the same lane for
// out, so the statistic and out see exactly the values rmsnorm_forward(res) would read: the same bits as the
// two ops. res may alias inp or inp2 (each element is read before the same lane overwrites it); out aliases
// none of them. The statistic adds a lane's squares in the order of its vectors p = lane, lane + 32, ... as
// gemv.cu's fused norm prologue does (the same bits).
template <typename T, int kN, bool kAdd>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const float* w, int N, int C, float eps,
                                       const T* inp2, T* res, bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (launch_rmsnorm_forward)
  const int row = row_norm_row(), lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t at = size_t(row) * C;
  const T* x = (kAdd ? res : inp) + at;
  const int nv = C / kN;
  Vec<T, kN> v[kRowSlots];
  float ss = 0.0f;
  for (int p0 = lane; p0 < nv; p0 += kRowSlots * kWarp) {
    residual_row_slots<T, kN, kAdd, kRowSlots>(v, inp, inp2, res, at, p0, nv);
    for_trip_slots<kRowSlots>(p0, nv, [&](int i, int) {
#pragma unroll
      for (int k = 0; k < kN; ++k) ss += to_f(v[i].v[k]) * to_f(v[i].v[k]);
    });
  }
  const float rs = rsqrtf(warp_sum(ss) / C + eps);
  const bool kept = nv <= kRowSlots * kWarp;  // one trip: v still holds the lane's vectors of the row
  T* o = out + at;
  for_row_slots<kRowSlots>(lane, nv, [&](int i, int p) {
    const Vec<T, kN> xv = kept ? v[i] : load_vec<T, kN>(x + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
    Vec<T, kN> r;
#pragma unroll
    for (int k = 0; k < kN; ++k) r.v[k] = from_f<T>(to_f(xv.v[k]) * rs * wv.v[k]);
    store_vec<T, kN>(o + p * kN, r);
  });
  if (lane == 0 && rstd) rstd[row] = rs;
}

// RMSNorm's one column sum (dw) leaves a lane kLaneCols columns: C <= kFusedMaxC = 2048 fuses it.
constexpr int kLaneCols = lane_cols(1);
constexpr int kFusedMaxC = fused_norm_max_c(1);

// Per row: dinp (N,C) += rstd * (g - xhat * mean_c(g * xhat)), g = dout * w, xhat = x * rstd. Blocks, warps
// and lanes as layernorm_backward_kernel: block b takes the rows [b * rows_per_block, (b + 1) *
// rows_per_block) of N, warp j of them the rows begin + j, begin + j + kBackwardWarps, ...; lane l the
// vectors p = l, l + 32, ... of a row, kSlots of them per trip, so mean_c(g * xhat) adds a lane's terms in
// the order of its vectors, then across the warp (warp_sum). kParams (needs C / kN <= 32 * kSlots, one trip,
// so a lane's columns stay the same registers) also writes the block's column sums of dout * xhat (dw) to
// partial (gridDim.x, C): each lane adds its columns' terms in fp32 over its warp's rows in row order, then
// block_column_partial adds the warps' sums in double in warp order; column_finish adds the blocks'.
// dinp aliases none of the inputs (Backend::rmsnorm_backward), hence __restrict__: the loads of a trip may
// move above the stores of the trip before. dynamic shared memory: norm_stage_warps(1) * C floats with kParams
// (launch_norm_backward), else none.
template <typename T, int kN, int kSlots, bool kParams>
__global__ void __launch_bounds__(kBackwardThreads)
    rmsnorm_backward_kernel(T* __restrict__ dinp, double* __restrict__ partial, const T* __restrict__ dout,
                            const T* __restrict__ inp, const float* __restrict__ w, const float* __restrict__ rstd,
                            int N, int C, int rows_per_block) {
  extern __shared__ __align__(16) float stage[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int begin = blockIdx.x * rows_per_block, end = min(N, begin + rows_per_block);
  const int nv = C / kN;
  [[maybe_unused]] Vec<float, kN> dw_sum[kSlots] = {};
  for (int row = begin + warp; row < end; row += kBackwardWarps) {
    const T* x = inp + size_t(row) * C;
    const T* dy = dout + size_t(row) * C;
    const float rs = rstd[row];
    float gx_sum = 0.0f;
    for_backward_slots<T, kN, kSlots>(x, dy, w, lane, nv, [&](int, int, const Vec<T, kN>& xv, const Vec<T, kN>& dv,
                                                             const Vec<float, kN>& wv) {
#pragma unroll
      for (int k = 0; k < kN; ++k) gx_sum += to_f(dv.v[k]) * wv.v[k] * (to_f(xv.v[k]) * rs);
    });
    const float gx_mean = warp_sum(gx_sum) / C;
    T* dx = dinp + size_t(row) * C;
    for_backward_slots<T, kN, kSlots>(x, dy, w, lane, nv, [&](int i, int p, const Vec<T, kN>& xv, const Vec<T, kN>& dv,
                                                             const Vec<float, kN>& wv) {
      Vec<T, kN> dxv = load_vec<T, kN>(dx + p * kN);
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const float xhat = to_f(xv.v[k]) * rs;
        dxv.v[k] = from_f<T>(to_f(dxv.v[k]) + rs * (to_f(dv.v[k]) * wv.v[k] - xhat * gx_mean));
        if constexpr (kParams) dw_sum[i].v[k] += to_f(dv.v[k]) * xhat;
      }
      store_vec<T, kN>(dx + p * kN, dxv);
    });
  }
  if constexpr (kParams) block_column_partial<norm_stage_warps(1)>(partial + size_t(blockIdx.x) * C, dw_sum, stage, C);
}

// the dw term of one element, dout * xhat (the column reduction of rows wider than kFusedMaxC)
template <typename T>
struct RmsWeightTerm {
  const T *dout, *inp;
  const float* rstd;
  int C;
  __device__ ColumnTerms<1> operator()(int n, int c) const {
    const size_t i = size_t(n) * C + c;
    return {{to_f(dout[i]) * (to_f(inp[i]) * rstd[n])}};
  }
};

// launch_rmsnorm_forward: rmsnorm_forward, or with inp2 and res the fused residual_rmsnorm_forward.
void launch_rmsnorm_forward(const OpContext& ctx, void* out, float* rstd, const void* inp, const float* w, int N,
                            int C, float eps, const void* inp2, void* res) {
  launch_row_norm(ctx, N, C, {out, inp, w}, inp2, res, [&](auto shape) {
    using S = decltype(shape);
    using T = typename S::type;
    launch_kernel(decoding_rows(N), ctx.stream, shape.grid, shape.block, 0, rmsnorm_forward_kernel<T, S::kN, S::kAdd>,
                  static_cast<T*>(out), rstd, static_cast<const T*>(inp), w, N, C, eps, static_cast<const T*>(inp2),
                  static_cast<T*>(res), decoding_rows(N));
  });
}
}  // namespace

void rmsnorm_forward(const OpContext& ctx, void* out, float* rstd, const void* inp, const float* w, int N, int C,
                     float eps) {
  launch_rmsnorm_forward(ctx, out, rstd, inp, w, N, C, eps, nullptr, nullptr);
}

void residual_rmsnorm_forward(const OpContext& ctx, void* res, void* out, float* rstd, const void* a, const void* b,
                              const float* w, int N, int C, float eps) {
  launch_rmsnorm_forward(ctx, out, rstd, a, w, N, C, eps, b, res);
}

void rmsnorm_backward(const OpContext& ctx, void* dinp, float* dw, const void* dout, const void* inp, const float* w,
                      const float* rstd, int N, int C, bool accumulate_dw) {
  if (C <= 0) return;
  if (N <= 0) {  // an empty sum: dw assigned zeros, or left as it is
    if (!accumulate_dw) column_zero<1>(ctx, {{dw}}, C);
    return;
  }
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dx = static_cast<T*>(dinp);
    const T* dy = static_cast<const T*>(dout);
    const T* x = static_cast<const T*>(inp);
    const bool vec = vec_rows<T>(C, {dinp, dout, inp, w});
    constexpr int kV = Pack<T>::kN;
    if (C <= kFusedMaxC) {  // dw from the row kernel's per-block sums, then the finish stage
      launch_norm_backward<1>(ctx, {{dw}}, N, C, accumulate_dw, [&](const NormBackwardShape& s) {
        const auto kernel = vec ? rmsnorm_backward_kernel<T, kV, kLaneCols / kV, true>
                                : rmsnorm_backward_kernel<T, 1, kLaneCols, true>;
        kernel<<<s.grid, kBackwardThreads, s.smem, ctx.stream>>>(dx, s.partial, dy, x, w, rstd, N, C,
                                                                 s.rows_per_block);
      });
    } else {  // one row per warp, then the column reduction reads dout and inp again
      const unsigned blocks = unsigned((N + kBackwardWarps - 1) / kBackwardWarps);
      const auto kernel = vec ? rmsnorm_backward_kernel<T, kV, 1, false> : rmsnorm_backward_kernel<T, 1, 1, false>;
      kernel<<<blocks, kBackwardThreads, 0, ctx.stream>>>(dx, nullptr, dy, x, w, rstd, N, C, kBackwardWarps);
      XT_CUDA_LAUNCH_CHECK();
      column_reduce_accumulate<1>(ctx, {{dw}}, RmsWeightTerm<T>{dy, x, rstd, C}, N, C, accumulate_dw);
    }
  });
}

}  // namespace xtrain::cuda
