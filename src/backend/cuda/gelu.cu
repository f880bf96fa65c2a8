// GELU, tanh approximation (gelu.cuh: the formulas), elementwise, fp32 arithmetic on activations of type T
// (float or bf16, ops.h), through map_kernel (common.cuh).
#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
struct GeluForward {  // out = gelu(x)
  __device__ float operator()(float x, float, float) const { return gelu_tanh(x); }
};

struct GeluBackward {  // dinp = dinp + gelu'(x) dout
  __device__ float operator()(float x, float dout, float dinp) const { return dinp + gelu_tanh_grad(x) * dout; }
};
}  // namespace

void gelu_forward(const OpContext& ctx, void* out, const void* inp, size_t count) {
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    launch_map<T, false>(ctx.stream, static_cast<T*>(out), static_cast<const T*>(inp), nullptr, count, GeluForward{});
  });
}

void gelu_backward(const OpContext& ctx, void* dinp, const void* inp, const void* dout, size_t count,
                   bool accumulate) {
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dx = static_cast<T*>(dinp);
    const T *x = static_cast<const T*>(inp), *dy = static_cast<const T*>(dout);
    if (accumulate) launch_map<T, true>(ctx.stream, dx, x, dy, count, GeluBackward{});
    else launch_map<T, false>(ctx.stream, dx, x, dy, count, GeluBackward{});  // dinp read as 0: dinp = gelu' dout
  });
}

}  // namespace xtrain::cuda
