// GELU, tanh approximation (Hendrycks & Gimpel 2016, sec. 2; as in GPT-2), elementwise, fp32 arithmetic
// on activations of type T (float or bf16, ops.h), through map_kernel (common.cuh):
//   gelu(x) = 0.5 x (1 + tanh(k (x + a x^3))), k = sqrt(2/pi), a = 0.044715.
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr float kGeluK = 0.79788456080286535588f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

struct GeluForward {  // out = gelu(x)
  __device__ float operator()(float x, float, float) const {
    return 0.5f * x * (1.0f + tanhf(kGeluK * (x + kGeluA * x * x * x)));
  }
};

// gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2), th = tanh(k (x + a x^3));
// 1 - th^2 instead of 1/cosh^2 so that large |x| cannot overflow. dinp = dinp + gelu'(x) dout.
struct GeluBackward {
  __device__ float operator()(float x, float dout, float dinp) const {
    const float th = tanhf(kGeluK * (x + kGeluA * x * x * x));
    const float d = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
    return dinp + d * dout;
  }
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
