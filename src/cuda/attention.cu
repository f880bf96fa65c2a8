// Causal scaled-dot-product attention with grouped-query heads (Ainslie et al. 2023): query head h
// reads key/value head h / (NH/KVH). A straightforward fp32 kernel, one block per (query row,
// head, batch), that stores the probabilities `att` as the Backend contract asks; correctness
// first, speed later (a flash-attention kernel would not store att).
// The backward runs without atomics: kernel A (per query row) produces dq and the softmax term
// D_t = sum_j P_j dP_j; kernel B (per key row and kv head) recomputes dP and produces dk and dv,
// summing the query heads of its group in a fixed order.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
struct Layout {  // element offsets into qkv (B,T,(NH+2*KVH)*HS), out (B,T,NH*HS), att (B,NH,T,T)
  int T, NH, KVH, HS;
  __device__ size_t row() const { return size_t(NH + 2 * KVH) * HS; }
  __device__ size_t q(int b, int t, int h) const { return (size_t(b) * T + t) * row() + size_t(h) * HS; }
  __device__ size_t k(int b, int t, int kh) const { return (size_t(b) * T + t) * row() + size_t(NH + kh) * HS; }
  __device__ size_t v(int b, int t, int kh) const {
    return (size_t(b) * T + t) * row() + size_t(NH + KVH + kh) * HS;
  }
  __device__ size_t out(int b, int t, int h) const { return (size_t(b) * T + t) * NH * HS + size_t(h) * HS; }
  __device__ size_t att(int b, int h, int t) const { return ((size_t(b) * NH + h) * T + t) * T; }
  __device__ int kv_head(int h) const { return h / (NH / KVH); }
};

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// grid (T, NH, B); smem: q (HS) | p (T)
__global__ void attention_forward_kernel(float* out, float* att, const float* qkv, Layout L, float scale) {
  extern __shared__ float smem[];
  __shared__ float red[kWarp];
  float *q = smem, *p = smem + L.HS;
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = L.kv_head(h);
  for (int i = threadIdx.x; i < L.HS; i += blockDim.x) q[i] = qkv[L.q(b, t, h) + i];
  __syncthreads();
  float mx = -INFINITY;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
    p[t2] = dot(q, qkv + L.k(b, t2, kh), L.HS) * scale;
    mx = fmaxf(mx, p[t2]);
  }
  mx = block_max(mx, red);
  float z = 0.0f;  // softmax shifted by the row max: no overflow
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) z += (p[t2] = expf(p[t2] - mx));
  const float inv = 1.0f / block_sum(z, red);
  float* a = att + L.att(b, h, t);
  for (int t2 = threadIdx.x; t2 < L.T; t2 += blockDim.x) a[t2] = t2 <= t ? (p[t2] *= inv) : 0.0f;
  __syncthreads();
  for (int i = threadIdx.x; i < L.HS; i += blockDim.x) {
    float acc = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) acc += p[t2] * qkv[L.v(b, t2, kh) + i];
    out[L.out(b, t, h) + i] = acc;
  }
}

// Kernel A, grid (T, NH, B); smem: dy (HS) | ds (T). dP_t2 = dout_t . v_t2, D = sum P dP,
// dS = P (dP - D) / sqrt(HS), dq_t += sum_t2 dS_t2 k_t2; D saved per row for kernel B.
__global__ void attention_backward_q_kernel(float* dqkv, float* dsum, const float* dout, const float* qkv,
                                            const float* att, Layout L, float scale) {
  extern __shared__ float smem[];
  __shared__ float red[kWarp];
  float *dy = smem, *ds = smem + L.HS;
  const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kh = L.kv_head(h);
  const float* a = att + L.att(b, h, t);
  for (int i = threadIdx.x; i < L.HS; i += blockDim.x) dy[i] = dout[L.out(b, t, h) + i];
  __syncthreads();
  float local = 0.0f;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) {
    ds[t2] = dot(dy, qkv + L.v(b, t2, kh), L.HS);
    local += a[t2] * ds[t2];
  }
  const float D = block_sum(local, red);
  if (threadIdx.x == 0) dsum[(size_t(b) * L.NH + h) * L.T + t] = D;
  for (int t2 = threadIdx.x; t2 <= t; t2 += blockDim.x) ds[t2] = a[t2] * (ds[t2] - D) * scale;
  __syncthreads();
  for (int i = threadIdx.x; i < L.HS; i += blockDim.x) {
    float acc = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) acc += ds[t2] * qkv[L.k(b, t2, kh) + i];
    dqkv[L.q(b, t, h) + i] += acc;
  }
}

// Kernel B, grid (T, KVH, B), blockDim >= HS; smem: vrow (HS) | ds (T) | pa (T). For key row t2 of
// kv head kh: dk_t2 += sum_h sum_{t>=t2} dS[t,t2] q_t,h, dv_t2 += sum_h sum_{t>=t2} P[t,t2] dout_t,h.
__global__ void attention_backward_kv_kernel(float* dqkv, const float* dsum, const float* dout, const float* qkv,
                                             const float* att, Layout L, float scale) {
  extern __shared__ float smem[];
  float *vrow = smem, *ds = smem + L.HS, *pa = smem + L.HS + L.T;
  const int t2 = blockIdx.x, kh = blockIdx.y, b = blockIdx.z, group = L.NH / L.KVH;
  for (int i = threadIdx.x; i < L.HS; i += blockDim.x) vrow[i] = qkv[L.v(b, t2, kh) + i];
  float dk = 0.0f, dv = 0.0f;  // thread i owns channel i (blockDim >= HS)
  for (int h = kh * group; h < (kh + 1) * group; ++h) {
    __syncthreads();  // vrow loaded / previous head's ds, pa consumed
    for (int t = t2 + threadIdx.x; t < L.T; t += blockDim.x) {
      const float P = att[L.att(b, h, t) + t2];
      const float dP = dot(dout + L.out(b, t, h), vrow, L.HS);
      ds[t] = P * (dP - dsum[(size_t(b) * L.NH + h) * L.T + t]) * scale;
      pa[t] = P;
    }
    __syncthreads();
    const int i = threadIdx.x;
    if (i < L.HS) {
      for (int t = t2; t < L.T; ++t) {
        dk += ds[t] * qkv[L.q(b, t, h) + i];
        dv += pa[t] * dout[L.out(b, t, h) + i];
      }
    }
  }
  if (threadIdx.x < L.HS) {
    dqkv[L.k(b, t2, kh) + threadIdx.x] += dk;
    dqkv[L.v(b, t2, kh) + threadIdx.x] += dv;
  }
}

Layout check_shape(int B, int T, int NH, int KVH, int HS) {
  XT_CHECK(B >= 0 && T >= 0 && HS > 0 && HS <= 1024, "bad attention shape B=" << B << " T=" << T << " HS=" << HS);
  XT_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
           "query heads NH=" << NH << " must be a positive multiple of kv heads KVH=" << KVH);
  XT_CHECK(B <= 65535 && NH <= 65535, "attention grid: B=" << B << ", NH=" << NH << " must be <= 65535");
  return Layout{T, NH, KVH, HS};
}

// Kernels whose dynamic shared memory exceeds the 48 KiB default must opt in (CUDA C++ Programming
// Guide, "Shared Memory"); a request beyond the device limit fails here with the runtime's message.
template <typename Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    XT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

constexpr int kThreads = 128;
int kv_threads(int HS) { return HS <= kThreads ? kThreads : (HS + kWarp - 1) / kWarp * kWarp; }
}  // namespace

void attention_forward(const OpContext& ctx, float* out, float* att, const float* qkv, int B, int T, int NH,
                       int KVH, int HS) {
  const Layout L = check_shape(B, T, NH, KVH, HS);
  if (B == 0 || T == 0) return;
  const float scale = float(1.0 / std::sqrt(double(HS)));  // Vaswani et al. 2017, eq. 1
  const size_t smem = size_t(HS + T) * sizeof(float);
  set_smem(attention_forward_kernel, smem);
  attention_forward_kernel<<<dim3(T, NH, B), kThreads, smem, ctx.stream>>>(out, att, qkv, L, scale);
  XT_CUDA_LAUNCH_CHECK();
}

void attention_backward(const OpContext& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                        int B, int T, int NH, int KVH, int HS) {
  const Layout L = check_shape(B, T, NH, KVH, HS);
  if (B == 0 || T == 0) return;
  const float scale = float(1.0 / std::sqrt(double(HS)));
  ScratchBuffer<float> dsum(*ctx.alloc, size_t(B) * NH * T);  // D per (b, h, t)
  const size_t smem_q = size_t(HS + T) * sizeof(float);
  set_smem(attention_backward_q_kernel, smem_q);
  attention_backward_q_kernel<<<dim3(T, NH, B), kThreads, smem_q, ctx.stream>>>(dqkv, dsum.get(), dout, qkv, att,
                                                                                 L, scale);
  XT_CUDA_LAUNCH_CHECK();
  const size_t smem_kv = size_t(HS + 2 * T) * sizeof(float);
  set_smem(attention_backward_kv_kernel, smem_kv);
  attention_backward_kv_kernel<<<dim3(T, KVH, B), kv_threads(HS), smem_kv, ctx.stream>>>(dqkv, dsum.get(), dout,
                                                                                         qkv, att, L, scale);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
