// What the row-normalizing kernels (layernorm.cu, rmsnorm.cu) share: the read of a row's input that, in
// their fused residual forms, is the residual add itself.
#pragma once

#include "backend/cuda/common.cuh"

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

}  // namespace xtrain::cuda
