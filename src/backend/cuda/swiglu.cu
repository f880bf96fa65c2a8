// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; transformers' LlamaMLP) on the fused (N,2F)
// [gate | up] activation, elementwise, forward and backward: fp32 arithmetic on activations of type T
// (float or bf16, ops.h), expf (not the fast intrinsic). Whole 16-byte packs when F and the pointers allow
// (a pack never straddles the gate and up halves then), else element by element, same code.
#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// grid-stride over the N*F/kN vectors of out: element j of row n reads gate inp[n, j], up inp[n, F + j].
// out (N,F) = silu(gate) * up, silu(x) = x sigmoid(x). F % kN == 0.
template <typename T, int kN>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int F, size_t count, bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (swiglu_forward)
  for (size_t p = blockIdx.x * size_t(blockDim.x) + threadIdx.x; p < count / kN; p += size_t(gridDim.x) * blockDim.x) {
    const size_t e = p * kN, n = e / F, j = e % F;
    const T* g = inp + n * 2 * F + j;
    const Vec<T, kN> gv = load_vec<T, kN>(g), uv = load_vec<T, kN>(g + F);
    Vec<T, kN> o;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float x = to_f(gv.v[k]);
      o.v[k] = from_f<T>(x * sigmoid(x) * to_f(uv.v[k]));
    }
    store_vec<T, kN>(out + e, o);
  }
}

// dinp (N,2F) = [dgate | dup] (assigned), s = sigmoid(gate): dup = dout gate s,
// dgate = dout up s (1 + gate (1 - s)) (the derivative of x sigmoid(x) is s (1 + x (1 - s))). F % kN == 0.
template <typename T, int kN>
__global__ void swiglu_backward_kernel(T* dinp, const T* dout, const T* inp, int F, size_t count) {
  for (size_t p = blockIdx.x * size_t(blockDim.x) + threadIdx.x; p < count / kN; p += size_t(gridDim.x) * blockDim.x) {
    const size_t e = p * kN, n = e / F, j = e % F, at = n * 2 * F + j;
    const Vec<T, kN> gv = load_vec<T, kN>(inp + at), uv = load_vec<T, kN>(inp + at + F);
    const Vec<T, kN> dv = load_vec<T, kN>(dout + e);
    Vec<T, kN> dg, du;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float x = to_f(gv.v[k]), u = to_f(uv.v[k]), dy = to_f(dv.v[k]), s = sigmoid(x);
      du.v[k] = from_f<T>(dy * x * s);
      dg.v[k] = from_f<T>(dy * u * s * (1.0f + x * (1.0f - s)));
    }
    store_vec<T, kN>(dinp + at, dg);
    store_vec<T, kN>(dinp + at + F, du);
  }
}

}  // namespace

void swiglu_forward(const OpContext& ctx, void* out, const void* inp, int N, int F) {
  const size_t count = size_t(N) * F;
  if (N <= 0 || F <= 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(inp);
    constexpr int kV = Pack<T>::kN;
    if (vec_rows<T>(F, {out, inp}))  // every row of out and of each half of inp 16-byte aligned
      launch_kernel(decoding_rows(N), ctx.stream, dim3(blocks_for(count / kV, kThreads)), dim3(kThreads), 0,
                    swiglu_forward_kernel<T, kV>, o, x, F, count, decoding_rows(N));
    else
      launch_kernel(decoding_rows(N), ctx.stream, dim3(blocks_for(count, kThreads)), dim3(kThreads), 0,
                    swiglu_forward_kernel<T, 1>, o, x, F, count, decoding_rows(N));
  });
}

void swiglu_backward(const OpContext& ctx, void* dinp, const void* dout, const void* inp, int N, int F) {
  const size_t count = size_t(N) * F;
  if (N <= 0 || F <= 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dx = static_cast<T*>(dinp);
    const T *dy = static_cast<const T*>(dout), *x = static_cast<const T*>(inp);
    constexpr int kV = Pack<T>::kN;
    if (vec_rows<T>(F, {dinp, dout, inp}))
      swiglu_backward_kernel<T, kV><<<blocks_for(count / kV, kThreads), kThreads, 0, ctx.stream>>>(dx, dy, x, F,
                                                                                                 count);
    else
      swiglu_backward_kernel<T, 1><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(dx, dy, x, F, count);
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
