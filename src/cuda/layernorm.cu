// LayerNorm (Ba et al. 2016), eps 1e-5 (GPT-2 / PyTorch default). One warp per row for the row
// statistics and dinp; dw and db through the deterministic column reduction. fp32 arithmetic on
// activations of type T (float or bf16, ops.h).
#include "cuda/column_reduce.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 4;  // warps per block, one row each

// out (N,C) = (x - mean) * rstd * w + b; two-pass variance (no cancellation for large means).
// out, inp: activations of type T (float or bf16, ops.h); statistics fp32.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const float* w,
                                         const float* b, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += kWarp) s += to_f(x[c]);
  const float mu = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += kWarp) v += (to_f(x[c]) - mu) * (to_f(x[c]) - mu);
  const float rs = rsqrtf(warp_sum(v) / C + kLayerNormEps);
  T* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) o[c] = from_f<T>((to_f(x[c]) - mu) * rs * w[c] + b[c]);
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

// dinp (N,C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * w, xhat = (x - mean) rstd.
template <typename T>
__global__ void layernorm_backward_kernel(T* dinp, const T* dout, const T* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  const T* dy = dout + size_t(row) * C;
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float g = to_f(dy[c]) * w[c];
    g_sum += g;
    gx_sum += g * (to_f(x[c]) - mu) * rs;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  T* dx = dinp + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (to_f(x[c]) - mu) * rs;
    dx[c] = from_f<T>(to_f(dx[c]) + rs * (to_f(dy[c]) * w[c] - g_mean - xhat * gx_mean));
  }
}

template <typename T>
struct DoutTimesXhat {  // dw term
  const T *dout, *inp;
  const float *mean, *rstd;
  int C;
  __device__ float operator()(int n, int c) const {
    const size_t i = size_t(n) * C + c;
    return to_f(dout[i]) * ((to_f(inp[i]) - mean[n]) * rstd[n]);
  }
};

template <typename T>
struct Dout {  // db term
  const T* dout;
  int C;
  __device__ float operator()(int n, int c) const { return to_f(dout[size_t(n) * C + c]); }
};
}  // namespace

void layernorm_forward(const OpContext& ctx, void* out, float* mean, float* rstd, const void* inp,
                       const float* w, const float* b, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    layernorm_forward_kernel<T><<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(
        static_cast<T*>(out), mean, rstd, static_cast<const T*>(inp), w, b, N, C);
  });
  XT_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(const OpContext& ctx, void* dinp, float* dw, float* db, const void* dout,
                        const void* inp, const float* w, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    const T* dy = static_cast<const T*>(dout);
    const T* x = static_cast<const T*>(inp);
    layernorm_backward_kernel<T><<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(static_cast<T*>(dinp), dy, x, w,
                                                                                   mean, rstd, N, C);
    XT_CUDA_LAUNCH_CHECK();
    column_reduce_accumulate(ctx, dw, DoutTimesXhat<T>{dy, x, mean, rstd, C}, N, C);
    column_reduce_accumulate(ctx, db, Dout<T>{dy, C}, N, C);
  });
}

}  // namespace xtrain::cuda
