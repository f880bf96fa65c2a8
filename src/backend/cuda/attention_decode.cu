// Attention against a key/value cache for inference (Backend::attention_decode): one kernel appends the
// new positions' keys and values to the caches, a second one computes each new query's attention over
// the cache: one block per (sequence, query head, new position), a thread per key row for the scores and
// a warp per value row for the weighted sum (decode_kernel), fp32 accumulation, storage in the
// activation type T; decoding is bound by the latency of reading the cache, not by math. The cache rows
// are taken in tiles with an online softmax, so shared memory does not grow with the context. No split of
// the cache rows across blocks (flash-decoding): at batch 1, NH blocks run.
// The first new position comes from device memory (Backend::attention_decode), so a recorded decoding
// step (Decoder's CUDA graph) runs at whatever position the cache has reached.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"
#include "backend/qkv_layout.h"
#include "core/error.h"

namespace xtrain::cuda {

namespace {

constexpr int kThreads = 256;  // 8 warps per (sequence, head, new position)
constexpr int kTile = 4096;    // cache rows whose scores a block holds at once (16 KiB of shared memory)

// position_ok: the first new position, read from device memory, leaves room for Tn rows in the cache;
// otherwise the first thread of the grid raises kBadPosition and no thread writes.
__device__ bool position_ok(int pos, int Tn, int maxT, int* error_flag) {
  if (pos >= 0 && pos <= maxT - Tn) return true;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicCAS(error_flag, kDeviceOk, kBadPosition);
  return false;
}

// kv_append_kernel: kcache, vcache (B,maxT,KVH*HS) rows [*pos_p, *pos_p+Tn) = the k, v heads of qkv (B,Tn,QKV).
template <typename T>
__global__ void kv_append_kernel(T* kcache, T* vcache, const T* qkv, int B, int Tn, const int32_t* pos_p, int maxT,
                                 int NH, int KVH, int HS, int* error_flag) {
  const int pos = *pos_p;
  if (!position_ok(pos, Tn, maxT, error_flag)) return;
  const size_t kv_row = size_t(KVH) * HS, row = size_t(QkvLayout::row_width(NH, KVH, HS));
  const size_t count = size_t(B) * Tn * kv_row;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < count; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t j = idx % kv_row, bi = idx / kv_row;  // bi = b * Tn + i
    const size_t b = bi / Tn, i = bi % Tn;
    const T* src = qkv + bi * row + size_t(NH) * HS;
    const size_t dst = (b * maxT + pos + i) * kv_row + j;
    kcache[dst] = src[j];
    vcache[dst] = src[kv_row + j];
  }
}

// decode_kernel: block (b*Tn + i, h): out (B,Tn,NH*HS) for query head h of new position t = *pos_p + i over
// cache rows [0, t], taken in tiles of kTile rows with the running max and sum of the online softmax
// (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022): a tile's scores are shifted by the max so
// far, the sums kept so far rescaled by exp(old max - new max). One tile (t < kTile) is the plain softmax.
// Scores: a thread per key row, read in 16-byte packs where kVec (HS a whole number of packs, cache
// 16-byte aligned), so a thread has all its row's loads in flight at once. Weighted sum: warp w takes
// rows w, w + nwarps, ... of the tile and each lane keeps columns j = lane, lane + 32, ... (a row read
// coalesced by the warp); the warps' partial sums are added in a fixed order at the end.
// Dynamic shared memory, fp32: q (HS), the warps' partial sums (nwarps x HS), a tile's scores
// (min(maxT, kTile)), as attention_decode sizes it.
template <typename T, bool kVec>
__global__ void decode_kernel(T* out, const T* kcache, const T* vcache, const T* qkv, int Tn, const int32_t* pos_p,
                              int maxT, int NH, int KVH, int HS, float scale) {
  const int pos = *pos_p;
  if (pos < 0 || pos > maxT - Tn) return;  // raised by kv_append_kernel, queued before
  extern __shared__ float smem[];
  __shared__ float red[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  float* q = smem;
  float* part = q + HS;
  float* s = part + nwarps * HS;
  const int bi = blockIdx.x, h = blockIdx.y, b = bi / Tn, t = pos + bi % Tn;
  const int kh = h / (NH / KVH);  // grouped-query attention (Ainslie et al. 2023)
  const size_t kv_row = size_t(KVH) * HS;
  const T* qp = qkv + size_t(bi) * QkvLayout::row_width(NH, KVH, HS) + size_t(h) * HS;
  for (int j = threadIdx.x; j < HS; j += blockDim.x) q[j] = to_f(qp[j]) * scale;
  __syncthreads();
  const T* kb = kcache + size_t(b) * maxT * kv_row + size_t(kh) * HS;
  const T* vb = vcache + size_t(b) * maxT * kv_row + size_t(kh) * HS;
  float m = -INFINITY, z = 0.0f;  // the running max and sum of exponentials (the same in every thread)
  for (int t0 = 0; t0 <= t; t0 += kTile) {
    const int n = min(kTile, t + 1 - t0);  // rows t0 .. t0 + n - 1 of this tile
    float mx = -INFINITY;
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
      const T* k = kb + size_t(t0 + r) * kv_row;
      float dot = 0.0f;
      if constexpr (kVec) {
        constexpr int kN = Pack<T>::kN;
        for (int j = 0; j < HS; j += kN) {
          const Pack<T> p = load_pack(k + j);
#pragma unroll
          for (int e = 0; e < kN; ++e) dot += q[j + e] * to_f(p.v[e]);
        }
      } else {
        for (int j = 0; j < HS; ++j) dot += q[j] * to_f(k[j]);
      }
      s[r] = dot;
      mx = fmaxf(mx, dot);
    }
    const float m_new = fmaxf(m, block_max(mx, red));  // block_max synchronizes: every s[r] is written
    const float alpha = m == -INFINITY ? 0.0f : __expf(m - m_new);  // 0 on the first tile
    // the shift: the max so far, or 0 while every score so far is -inf (inf inputs; no -inf - -inf)
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    float zt = 0.0f;
    for (int r = threadIdx.x; r < n; r += blockDim.x) zt += (s[r] = __expf(s[r] - shift));
    z = z * alpha + block_sum(zt, red);  // block_sum synchronizes: every s[r] is the exponential
    m = m_new;
    const T* vt = vb + size_t(t0) * kv_row;
    for (int j = lane; j < HS; j += kWarp) {
      float acc = t0 == 0 ? 0.0f : part[warp * HS + j] * alpha;
#pragma unroll 8
      for (int r = warp; r < n; r += nwarps) acc += s[r] * to_f(vt[size_t(r) * kv_row + j]);
      part[warp * HS + j] = acc;
    }
    __syncthreads();  // the tile's s is read by every warp before the next tile overwrites it
  }
  const float inv_z = 1.0f / z;
  T* o = out + size_t(bi) * NH * HS + size_t(h) * HS;
  for (int j = threadIdx.x; j < HS; j += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < nwarps; ++w) acc += part[w * HS + j];
    o[j] = from_f<T>(acc * inv_z);
  }
}

}  // namespace

void attention_decode(const OpContext& ctx, void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn,
                      const int32_t* pos, int maxT, int NH, int KVH, int HS) {
  XT_CHECK(B >= 0 && HS > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
           "bad attention_decode shape B=" << B << " NH=" << NH << " KVH=" << KVH << " HS=" << HS);
  XT_CHECK(Tn >= 1 && Tn <= maxT, "attention_decode: " << Tn << " new positions do not fit the cache of " << maxT);
  if (B == 0) return;
  // q, the warps' partial sums and one tile of scores (decode_kernel); the static red[32] comes on top
  const size_t smem = (size_t(HS) * (1 + kThreads / kWarp) + std::min(maxT, kTile)) * sizeof(float);
  const size_t smem_static = 32 * sizeof(float);
  int dev = 0, smem_max = 0;
  XT_CUDA_CHECK(cudaGetDevice(&dev));
  XT_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  XT_CHECK(smem + smem_static <= size_t(smem_max),
           "attention_decode: head size " << HS << " needs " << smem + smem_static
                                          << " bytes of shared memory per block; this GPU has " << smem_max);
  const float scale = 1.0f / sqrtf(float(HS));  // Vaswani et al. 2017, eq. 1
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    const size_t count = size_t(B) * Tn * KVH * HS;
    kv_append_kernel<T><<<blocks_for(count, 256), 256, 0, ctx.stream>>>(
        static_cast<T*>(kcache), static_cast<T*>(vcache), static_cast<const T*>(qkv), B, Tn, pos, maxT, NH, KVH, HS,
        ctx.error_flag);
    XT_CUDA_LAUNCH_CHECK();
    auto launch = [&](auto kernel) {
      if (smem + smem_static > 48 * 1024)  // above the default shared memory of a block: opt in
        XT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      kernel<<<dim3(unsigned(B) * Tn, unsigned(NH)), kThreads, smem, ctx.stream>>>(
          static_cast<T*>(out), static_cast<const T*>(kcache), static_cast<const T*>(vcache),
          static_cast<const T*>(qkv), Tn, pos, maxT, NH, KVH, HS, scale);
      XT_CUDA_LAUNCH_CHECK();
    };
    if (HS % Pack<T>::kN == 0 && aligned16(kcache))
      launch(decode_kernel<T, true>);
    else
      launch(decode_kernel<T, false>);
  });
}

}  // namespace xtrain::cuda
