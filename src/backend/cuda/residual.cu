// Residual add (out = a + b) and in-place accumulation (dst += src), elementwise, fp32 arithmetic on
// activations of type T (float or bf16, ops.h), through map_kernel (common.cuh).
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
struct Add {  // out = a + b (residual_forward; out may alias a or b)
  __device__ float operator()(float a, float b, float) const { return a + b; }
};
struct AddTo {  // out = out + a (add_inplace)
  __device__ float operator()(float a, float, float out) const { return out + a; }
};
}  // namespace

void residual_forward(const OpContext& ctx, void* out, const void* a, const void* b, size_t count) {
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    launch_map<T, false>(ctx.stream, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), count,
                         Add{});
  });
}

void add_inplace(const OpContext& ctx, void* dst, const void* src, size_t count) {
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    launch_map<T, true>(ctx.stream, static_cast<T*>(dst), static_cast<const T*>(src), nullptr, count, AddTo{});
  });
}

}  // namespace xtrain::cuda
