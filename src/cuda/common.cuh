// Small device helpers shared by the op kernels: launch sizes, warp and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/cuda_check.h"

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
