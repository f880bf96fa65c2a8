// LayerNorm (Ba et al. 2016), eps 1e-5 (GPT-2 / PyTorch default). One warp per row for the row
// statistics and dinp; dw and db through the deterministic column reduction. fp32 arithmetic on
// activations of type T (float or bf16, ops.h); rows move in 16-byte vectors (kN = Pack<T>::kN
// elements) when C and the pointers allow, else element by element (kN = 1), same code.
#include "cuda/column_reduce.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 4;  // warps per block, one row each

// out (N,C) = (x - mean) * rstd * w + b; two-pass variance (no cancellation for large means).
// out, inp: activations; statistics fp32. C % kN == 0.
// kAdd (residual_layernorm_forward): x = res = inp + inp2 rounded to T as residual_forward rounds it,
// written to res in the first pass and read back by the same lane in the later passes, so the
// statistics and out see exactly the values that layernorm_forward(res) would read. res may alias inp
// or inp2 (each element is read before the same thread overwrites it); out aliases none of them.
template <typename T, int kN, bool kAdd>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const float* w,
                                         const float* b, int N, int C, const T* inp2, T* res) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = (kAdd ? res : inp) + size_t(row) * C;
  const int nv = C / kN;
  float s = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    Vec<T, kN> v;
    if constexpr (kAdd) {
      const size_t at = size_t(row) * C + size_t(p) * kN;
      const Vec<T, kN> a = load_vec<T, kN>(inp + at), c = load_vec<T, kN>(inp2 + at);
#pragma unroll
      for (int k = 0; k < kN; ++k) v.v[k] = from_f<T>(to_f(a.v[k]) + to_f(c.v[k]));
      store_vec<T, kN>(res + at, v);
    } else {
      v = load_vec<T, kN>(x + p * kN);
    }
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

// dinp (N,C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * w, xhat = (x - mean) rstd.
template <typename T, int kN>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  const T* dy = dout + size_t(row) * C;
  const float mu = mean[row], rs = rstd[row];
  const int nv = C / kN;
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> xv = load_vec<T, kN>(x + p * kN), dv = load_vec<T, kN>(dy + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float g = to_f(dv.v[k]) * wv.v[k];
      g_sum += g;
      gx_sum += g * (to_f(xv.v[k]) - mu) * rs;
    }
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  T* dx = dinp + size_t(row) * C;
  for (int p = lane; p < nv; p += kWarp) {
    const Vec<T, kN> xv = load_vec<T, kN>(x + p * kN), dv = load_vec<T, kN>(dy + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
    Vec<T, kN> acc = load_vec<T, kN>(dx + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float xhat = (to_f(xv.v[k]) - mu) * rs;
      acc.v[k] = from_f<T>(to_f(acc.v[k]) + rs * (to_f(dv.v[k]) * wv.v[k] - g_mean - xhat * gx_mean));
    }
    store_vec<T, kN>(dx + p * kN, acc);
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

// vec_rows: every row of these (N,C) buffers and the (C) weights start 16-byte aligned, so kN = Pack<T>::kN
// applies (activation rows and the fp32 weight and bias vectors move in 16-byte pieces).
template <typename T>
bool vec_rows(int C, std::initializer_list<const void*> ptrs) {
  if (C % Pack<T>::kN != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}
}  // namespace

namespace {
// launch_layernorm_forward: layernorm_forward, or with inp2 and res the fused residual_layernorm_forward.
void launch_layernorm_forward(const OpContext& ctx, void* out, float* mean, float* rstd, const void* inp,
                              const float* w, const float* b, int N, int C, const void* inp2, void* res) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  const bool add = res != nullptr;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(inp);
    const T* x2 = static_cast<const T*>(inp2);
    T* r = static_cast<T*>(res);
    const bool vec = vec_rows<T>(C, {out, inp, w, b}) && (!add || (aligned16(inp2) && aligned16(res)));
    constexpr int kV = Pack<T>::kN;
    const auto kernel = vec ? (add ? layernorm_forward_kernel<T, kV, true> : layernorm_forward_kernel<T, kV, false>)
                            : (add ? layernorm_forward_kernel<T, 1, true> : layernorm_forward_kernel<T, 1, false>);
    kernel<<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(o, mean, rstd, x, w, b, N, C, x2, r);
  });
  XT_CUDA_LAUNCH_CHECK();
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
                        const void* inp, const float* w, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dx = static_cast<T*>(dinp);
    const T* dy = static_cast<const T*>(dout);
    const T* x = static_cast<const T*>(inp);
    if (vec_rows<T>(C, {dinp, dout, inp, w}))
      layernorm_backward_kernel<T, Pack<T>::kN><<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(dx, dy, x, w, mean,
                                                                                                  rstd, N, C);
    else
      layernorm_backward_kernel<T, 1><<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(dx, dy, x, w, mean, rstd, N,
                                                                                        C);
    XT_CUDA_LAUNCH_CHECK();
    column_reduce_accumulate<2>(ctx, {{dw, db}}, ParamGradTerms<T>{dy, x, mean, rstd, C}, N, C);
  });
}

}  // namespace xtrain::cuda
