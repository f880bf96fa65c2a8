// LayerNorm (Ba et al. 2016), eps 1e-5 (GPT-2 / PyTorch default). One warp per row for the row
// statistics and dinp; dw and db through the deterministic column reduction.
#include "cuda/column_reduce.cuh"
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kLayerNormEps = 1e-5f;
constexpr int kRowsPerBlock = 4;  // warps per block, one row each

// out (N,C) = (x - mean) * rstd * w + b; two-pass variance (no cancellation for large means).
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                         const float* b, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += kWarp) s += x[c];
  const float mu = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += kWarp) v += (x[c] - mu) * (x[c] - mu);
  const float rs = rsqrtf(warp_sum(v) / C + kLayerNormEps);
  float* o = out + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) o[c] = (x[c] - mu) * rs * w[c] + b[c];
  if (lane == 0) {
    if (mean) mean[row] = mu;
    if (rstd) rstd[row] = rs;
  }
}

// dinp (N,C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * w, xhat = (x - mean) rstd.
__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + size_t(row) * C;
  const float* dy = dout + size_t(row) * C;
  const float mu = mean[row], rs = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float g = dy[c] * w[c];
    g_sum += g;
    gx_sum += g * (x[c] - mu) * rs;
  }
  const float g_mean = warp_sum(g_sum) / C, gx_mean = warp_sum(gx_sum) / C;
  float* dx = dinp + size_t(row) * C;
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (x[c] - mu) * rs;
    dx[c] += rs * (dy[c] * w[c] - g_mean - xhat * gx_mean);
  }
}

struct DoutTimesXhat {  // dw term
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float operator()(int n, int c) const {
    const size_t i = size_t(n) * C + c;
    return dout[i] * ((inp[i] - mean[n]) * rstd[n]);
  }
};

struct Dout {  // db term
  const float* dout;
  int C;
  __device__ float operator()(int n, int c) const { return dout[size_t(n) * C + c]; }
};
}  // namespace

void layernorm_forward(const OpContext& ctx, float* out, float* mean, float* rstd, const float* inp,
                       const float* w, const float* b, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_forward_kernel<<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(out, mean, rstd, inp, w, b, N, C);
  XT_CUDA_LAUNCH_CHECK();
}

void layernorm_backward(const OpContext& ctx, float* dinp, float* dw, float* db, const float* dout,
                        const float* inp, const float* w, const float* mean, const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  layernorm_backward_kernel<<<blocks, kRowsPerBlock * kWarp, 0, ctx.stream>>>(dinp, dout, inp, w, mean, rstd, N,
                                                                              C);
  XT_CUDA_LAUNCH_CHECK();
  column_reduce_accumulate(ctx, dw, DoutTimesXhat{dout, inp, mean, rstd, C}, N, C);
  column_reduce_accumulate(ctx, db, Dout{dout, C}, N, C);
}

}  // namespace xtrain::cuda
