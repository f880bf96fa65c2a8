// What the row-normalizing kernels (layernorm.cu, rmsnorm.cu) share: one launch shape for every norm
// (ggml-cuda's norm.cu keeps one too) and the read of a row's input that, in their fused residual forms,
// is the residual add itself.
#pragma once

#include <initializer_list>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

// residual_row_vec: the kN elements at element offset `at` of a row's input. kAdd (residual_layernorm_forward,
// residual_rmsnorm_forward): inp + inp2 rounded to T as residual_forward rounds it, stored to res as well, so
// the statistics see exactly what the unfused norm would read from res; the caller's later passes read res
// back in the same lane. Otherwise inp's elements (inp2 and res unused).
template <typename T, int kN, bool kAdd>
__device__ __forceinline__ Vec<T, kN> residual_row_vec(const T* inp, const T* inp2, T* res, size_t at) {
  if constexpr (kAdd) {
    const Vec<T, kN> a = load_vec<T, kN>(inp + at), b = load_vec<T, kN>(inp2 + at);
    Vec<T, kN> v;
#pragma unroll
    for (int k = 0; k < kN; ++k) v.v[k] = from_f<T>(to_f(a.v[k]) + to_f(b.v[k]));
    store_vec<T, kN>(res + at, v);
    return v;
  } else {
    (void)inp2;
    (void)res;
    return load_vec<T, kN>(inp + at);
  }
}

// The launch shape: one warp per row, kRowNormRows rows per block, so row = blockIdx.x * kRowNormRows +
// threadIdx.x / kWarp (row_norm_row). A kernel's instantiation is RowNorm<T, kN, kAdd>: T the activation
// type (with_act), kN = Pack<T>::kN when C and every row pointer allow 16-byte vectors (vec_rows), else 1;
// kAdd for a fused residual form (its inp2 and res given, and 16-byte aligned for kN > 1).
inline constexpr int kRowNormRows = 4;

// LayerNorm's epsilon (GPT-2 / PyTorch default): layernorm.cu and gemv.cu's fused LayerNorm prologue
inline constexpr float kLayerNormEps = 1e-5f;

__device__ __forceinline__ int row_norm_row() { return blockIdx.x * kRowNormRows + threadIdx.x / kWarp; }

template <typename T, int kN_, bool kAdd_>
struct RowNorm {
  using type = T;
  static constexpr int kN = kN_;
  static constexpr bool kAdd = kAdd_;
  dim3 grid, block;  // the launch's
};

// launch_row_norm: calls launch(RowNorm<T, kN, kAdd>{grid, block}) for the instantiation that fits
// (kAdd = inp2 and res given; `rows`: the (N,C) buffers and (C) vectors the kernel moves in vectors),
// which launches it <<<shape.grid, shape.block, 0, ctx.stream>>>; then checks the launch. No launch for
// N or C <= 0. A kernel without a fused form ignores kAdd (res null).
template <typename Launch>
void launch_row_norm(const OpContext& ctx, int N, int C, std::initializer_list<const void*> rows, const void* inp2,
                     void* res, Launch&& launch) {
  if (N <= 0 || C <= 0) return;
  const dim3 grid(unsigned((N + kRowNormRows - 1) / kRowNormRows)), block(kRowNormRows * kWarp);
  const bool add = res != nullptr;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = Pack<T>::kN;
    if (vec_rows<T>(C, rows) && (!add || (aligned16(inp2) && aligned16(res)))) {
      if (add) launch(RowNorm<T, kV, true>{grid, block});
      else launch(RowNorm<T, kV, false>{grid, block});
    } else {
      if (add) launch(RowNorm<T, 1, true>{grid, block});
      else launch(RowNorm<T, 1, false>{grid, block});
    }
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
