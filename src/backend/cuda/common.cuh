// Small device helpers shared by the op kernels: launch sizes, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/cuda_check.h"

namespace xtrain::cuda {

constexpr int kWarp = 32;

// Activation elements (ops.h, with_act): float, or __nv_bfloat16 with --dtype bf16. Every op loads
// them with to_f, computes in fp32 and stores with from_f<T> (round to nearest even).
__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// blocks_for: number of blocks of `threads` covering `count` elements, capped for grid-stride
// loops (kernels loop, so the cap never drops elements).
inline unsigned blocks_for(size_t count, int threads) {
  size_t blocks = (count + threads - 1) / threads;
  const size_t cap = 65535u * 8u;
  return static_cast<unsigned>(blocks == 0 ? 1 : (blocks < cap ? blocks : cap));
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Vec<T, N>: N consecutive elements; 128-bit accesses when they fill whole 16 bytes (e.g. a Pack, or
// 8 floats), element accesses otherwise (N = 1: the unaligned fallback of the same kernel code). For
// 128-bit accesses p must be 16-byte aligned.
template <typename T, int N>
struct alignas((N * sizeof(T)) % 16 == 0 ? 16 : alignof(T)) Vec {
  static constexpr int kN = N;
  T v[N];
};
template <typename T, int kN>
__device__ __forceinline__ Vec<T, kN> load_vec(const T* p) {
  Vec<T, kN> r;
  if constexpr ((kN * sizeof(T)) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < int(kN * sizeof(T) / 16); ++j)
      reinterpret_cast<uint4*>(r.v)[j] = reinterpret_cast<const uint4*>(p)[j];
  } else {
#pragma unroll
    for (int k = 0; k < kN; ++k) r.v[k] = p[k];
  }
  return r;
}
template <typename T, int kN>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, kN>& x) {
  if constexpr ((kN * sizeof(T)) % 16 == 0) {
#pragma unroll
    for (int j = 0; j < int(kN * sizeof(T) / 16); ++j)
      reinterpret_cast<uint4*>(p)[j] = reinterpret_cast<const uint4*>(x.v)[j];
  } else {
#pragma unroll
    for (int k = 0; k < kN; ++k) p[k] = x.v[k];
  }
}

// Pack<T>: 16 bytes of activations (4 float or 8 bf16), moved with one 128-bit load or store. The
// elementwise kernels take whole packs where the count and the pointers allow (aligned16) and finish
// the rest element by element.
template <typename T>
using Pack = Vec<T, int(16 / sizeof(T))>;
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) { return load_vec<T, Pack<T>::kN>(p); }
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& x) { store_vec<T, Pack<T>::kN>(p, x); }

// vec_rows: every row of these (N,C) buffers and the (C) weights start 16-byte aligned, so kN = Pack<T>::kN
// applies (activation rows and the fp32 weight and bias vectors move in 16-byte pieces). The row kernels
// (layernorm.cu, rmsnorm.cu) take whole Vec<T, kN> when it holds, element by element (kN = 1) otherwise.
template <typename T>
bool vec_rows(int C, std::initializer_list<const void*> ptrs) {
  if (C % Pack<T>::kN != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = kWarp / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// block_sum / block_max: reduce over the whole block (blockDim.x a multiple of 32, <= 1024); every
// thread gets the result. `shared` holds >= 32 elements; the call synchronizes the block.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : T(0);
  return warp_sum(v);
}

__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace xtrain::cuda

namespace xtrain::cuda {

// map_kernel: the elementwise ops on activations of type T (float or bf16). For i < count:
//   out[i] = op(a[i], b[i] (0 when b is null), out[i] (0 unless kReadOut))
// in fp32, rounded once to T. Whole 16-byte packs where `vec` (every pointer aligned16), then the
// tail element by element. out may alias a or b: each element is read before the same thread writes it.
template <typename T, bool kReadOut, typename Op>
__global__ void map_kernel(T* out, const T* a, const T* b, size_t count, bool vec, Op op) {
  constexpr int kN = Pack<T>::kN;
  const size_t start = blockIdx.x * size_t(blockDim.x) + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  const size_t npack = vec ? count / kN : 0;
  for (size_t p = start; p < npack; p += stride) {
    const Pack<T> pa = load_pack(a + p * kN);
    Pack<T> pb, po;
    if (b) pb = load_pack(b + p * kN);
    if (kReadOut) po = load_pack(out + p * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k)
      po.v[k] = from_f<T>(op(to_f(pa.v[k]), b ? to_f(pb.v[k]) : 0.0f, kReadOut ? to_f(po.v[k]) : 0.0f));
    store_pack(out + p * kN, po);
  }
  for (size_t i = npack * kN + start; i < count; i += stride)
    out[i] = from_f<T>(op(to_f(a[i]), b ? to_f(b[i]) : 0.0f, kReadOut ? to_f(out[i]) : 0.0f));
}

// launch_map: map_kernel over count elements on `stream` (256 threads, grid capped as blocks_for).
template <typename T, bool kReadOut, typename Op>
void launch_map(cudaStream_t stream, T* out, const T* a, const T* b, size_t count, Op op) {
  if (count == 0) return;
  const bool vec = aligned16(out) && aligned16(a) && (b == nullptr || aligned16(b));
  constexpr int kThreads = 256;
  const size_t work = vec ? (count + Pack<T>::kN - 1) / Pack<T>::kN : count;
  map_kernel<T, kReadOut, Op><<<blocks_for(work, kThreads), kThreads, 0, stream>>>(out, a, b, count, vec, op);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
