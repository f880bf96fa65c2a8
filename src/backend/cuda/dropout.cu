// Dropout with a mask recomputed from counter-based random numbers (src/core/rng.h), so the
// forward and the backward are the same call and no mask is stored. Bit-for-bit the CPU contract:
// keep = uniform01(seq_keys[b], j) >= p, x *= keep ? 1/(1-p) : 0, j the index within sequence b.
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"
#include <xtrain/core/rng.h>

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// grid (blocks over per_seq, B); x activations of type T (float or bf16, ops.h)
template <typename T>
__global__ void dropout_kernel(T* x, const uint64_t* keys, size_t per_seq, float p, float scale) {
  const uint64_t key = keys[blockIdx.y];
  T* xb = x + blockIdx.y * per_seq;
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < per_seq; j += size_t(gridDim.x) * blockDim.x)
    xb[j] = from_f<T>(to_f(xb[j]) * ((uniform01(key, j) >= p) ? scale : 0.0f));
}
}  // namespace

void dropout_apply(const OpContext& ctx, void* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) {
  XT_CHECK(p >= 0.0f && p < 1.0f, "dropout probability " << p << " not in [0, 1)");
  XT_CHECK(B >= 0 && B <= 65535, "dropout: B=" << B << " outside [0, 65535] (grid y limit)");
  if (p == 0.0f || B == 0 || per_seq == 0) return;  // uniform01 >= 0: everything kept with scale 1
  const float scale = 1.0f / (1.0f - p);
  // The host keys go through a stream-ordered scratch copy; a pageable-memory cudaMemcpyAsync
  // returns only once the source has been read, so the caller may reuse seq_keys at once.
  ScratchBuffer<uint64_t> keys(*ctx.alloc, size_t(B), "dropout keys");
  XT_CUDA_CHECK(cudaMemcpyAsync(keys.get(), seq_keys, size_t(B) * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                ctx.stream));
  unsigned bx = blocks_for(per_seq, kThreads);
  if (bx > 4096) bx = 4096;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<dim3(bx, unsigned(B)), kThreads, 0, ctx.stream>>>(static_cast<T*>(x), keys.get(), per_seq, p,
                                                                          scale);
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
