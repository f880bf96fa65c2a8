// RMSNorm (Zhang & Sennrich 2019; transformers' LlamaRMSNorm), forward, the fused residual add + forward,
// and backward. One warp per row for the statistic and dinp, in the row norms' launch shape (row_norm.cuh); dw as a deterministic
// column sum (column_reduce.cuh: fixed chunks, double partials, no atomics). fp32 arithmetic on
// activations of type T (float or bf16, ops.h); rows move in 16-byte vectors (kN = Pack<T>::kN elements)
// when C and the pointers allow (vec_rows), else element by element (kN = 1), same code.
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_norm.cuh"

namespace xtrain::cuda {

namespace {

// out (N,C) = x * rstd * w, rstd = 1 / sqrt(mean_c(x^2) + eps). out, inp: activations; rstd fp32, may be
// null. kAdd (residual_rmsnorm_forward): x = res = inp + inp2 rounded to T as residual_forward rounds it,
// written to res in the first pass and read back by the same lane in the second, so the statistic and out
// see exactly the values rmsnorm_forward(res) would read: the same bits as the two ops. res may alias inp
// or inp2 (each element is read before the same thread overwrites it); out aliases none of them.
template <typename T, int kN, bool kAdd>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const float* w, int N, int C, float eps,
                                       const T* inp2, T* res) {
  const int row = row_norm_row(), lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = (kAdd ? res : inp) + size_t(row) * C;
  const int nv = C / kN;
  float ss = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> v = residual_row_vec<T, kN, kAdd>(inp, inp2, res, size_t(row) * C + size_t(p) * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) ss += to_f(v.v[k]) * to_f(v.v[k]);
  }
  const float rs = rsqrtf(warp_sum(ss) / C + eps);
  T* o = out + size_t(row) * C;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> v = load_vec<T, kN>(x + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
    Vec<T, kN> r;
#pragma unroll
    for (int k = 0; k < kN; ++k) r.v[k] = from_f<T>(to_f(v.v[k]) * rs * wv.v[k]);
    store_vec<T, kN>(o + p * kN, r);
  }
  if (lane == 0 && rstd) rstd[row] = rs;
}

// dinp (N,C) += rstd * (g - xhat * mean_c(g * xhat)), g = dout * w, xhat = x * rstd; one warp per row.
template <typename T, int kN>
__global__ void rmsnorm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* w, const float* rstd,
                                        int N, int C) {
  const int row = row_norm_row(), lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  const T* dy = dout + size_t(row) * C;
  const int nv = C / kN;
  const float rs = rstd[row];
  float gx_sum = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> xv = load_vec<T, kN>(x + p * kN), dv = load_vec<T, kN>(dy + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) gx_sum += to_f(dv.v[k]) * wv.v[k] * (to_f(xv.v[k]) * rs);
  }
  const float gx_mean = warp_sum(gx_sum) / C;
  T* dx = dinp + size_t(row) * C;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> xv = load_vec<T, kN>(x + p * kN), dv = load_vec<T, kN>(dy + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
    Vec<T, kN> dxv = load_vec<T, kN>(dx + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float xhat = to_f(xv.v[k]) * rs;
      dxv.v[k] = from_f<T>(to_f(dxv.v[k]) + rs * (to_f(dv.v[k]) * wv.v[k] - xhat * gx_mean));
    }
    store_vec<T, kN>(dx + p * kN, dxv);
  }
}

// the dw term of one element, dout * xhat
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
    rmsnorm_forward_kernel<T, S::kN, S::kAdd><<<shape.grid, shape.block, 0, ctx.stream>>>(
        static_cast<T*>(out), rstd, static_cast<const T*>(inp), w, N, C, eps, static_cast<const T*>(inp2),
        static_cast<T*>(res));
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
                      const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  launch_row_norm(ctx, N, C, {dinp, dout, inp, w}, nullptr, nullptr, [&](auto shape) {
    using S = decltype(shape);
    using T = typename S::type;
    rmsnorm_backward_kernel<T, S::kN><<<shape.grid, shape.block, 0, ctx.stream>>>(
        static_cast<T*>(dinp), static_cast<const T*>(dout), static_cast<const T*>(inp), w, rstd, N, C);
  });
  // dw: a second pass over dout and inp; the fused per-block sums of layernorm_backward would save it
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    column_reduce_accumulate<1>(ctx, {{dw}}, RmsWeightTerm<T>{static_cast<const T*>(dout), static_cast<const T*>(inp), rstd, C},
                                N, C);
  });
}

}  // namespace xtrain::cuda
