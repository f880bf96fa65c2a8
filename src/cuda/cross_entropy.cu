// Fused softmax cross-entropy: losses and dlogits in one kernel, one block per row of Vp (padded
// vocabulary) columns, of which the first V take part; the padded dlogits columns are set to 0.
// Two passes over a row: max and sum of exponentials together (online softmax, Milakov & Gimelshein
// 2018), then the gradient. dlogits may
// alias logits: every thread reads the row (max, sum) before the block synchronizes, and then
// writes only the elements it alone reads again. A target outside [0, V) sets the device error
// flag (thrown by the backend at its next synchronizing call) and that row's loss is NaN.
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 512;

// online softmax state of this thread: running max and sum of exp(x - max)
__device__ __forceinline__ void online_add(float& mx, float& s, float x) {
  if (x > mx) {
    s = s * expf(mx - x) + 1.0f;  // first element: 0 * exp(-inf) + 1
    mx = x;
  } else {
    s += expf(x - mx);
  }
}

// grid (N); no __restrict__: dlogits may alias logits. logits, dlogits: activations of type T (float
// or bf16, ops.h), fp32 arithmetic. kVec (float only): rows are 16-byte aligned (Vp % 4 == 0 and
// aligned bases), so the first V/4*4 columns move as float4 (fewer, wider memory transactions).
template <typename T, bool kVec>
__global__ void cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                     float dloss, int V, int Vp, int* error_flag) {
  static_assert(!kVec || std::is_same<T, float>::value, "float4 path for fp32 logits only");
  __shared__ float red[kWarp];
  const size_t row = blockIdx.x;
  const T* l = logits + row * Vp;
  const int32_t target = targets[row];
  if (target < 0 || target >= V) {  // uniform over the block: no thread reaches a barrier
    if (threadIdx.x == 0) {
      atomicCAS(error_flag, kDeviceOk, kBadTarget);
      losses[row] = NAN;
    }
    return;
  }
  const float target_logit = to_f(l[target]);  // read before any thread may overwrite the row
  const int V4 = kVec ? V / 4 : 0;        // float4 columns; then the scalar tail [4*V4, V)
  float tmx = -INFINITY, ts = 0.0f;
  for (int i = threadIdx.x; i < V4; i += blockDim.x) {
    const float4 x = reinterpret_cast<const float4*>(l)[i];
    online_add(tmx, ts, x.x), online_add(tmx, ts, x.y), online_add(tmx, ts, x.z), online_add(tmx, ts, x.w);
  }
  for (int i = 4 * V4 + threadIdx.x; i < V; i += blockDim.x) online_add(tmx, ts, to_f(l[i]));
  const float mx = block_max(tmx, red);
  float s = tmx == -INFINITY ? 0.0f : ts * expf(tmx - mx);  // a thread with no element adds 0
  s = block_sum(s, red);  // its barriers order every read above before the writes below
  const float log_s = logf(s);
  if (threadIdx.x == 0) losses[row] = log_s + mx - target_logit;
  if (dlogits) {
    T* d = dlogits + row * Vp;
    const float inv_s = 1.0f / s;
    auto grad = [&](float x, int i) { return (expf(x - mx) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss; };
    for (int i = threadIdx.x; i < V4; i += blockDim.x) {
      const float4 x = reinterpret_cast<const float4*>(l)[i];
      reinterpret_cast<float4*>(d)[i] = make_float4(grad(x.x, 4 * i), grad(x.y, 4 * i + 1), grad(x.z, 4 * i + 2),
                                                    grad(x.w, 4 * i + 3));
    }
    for (int i = 4 * V4 + threadIdx.x; i < V; i += blockDim.x) d[i] = from_f<T>(grad(to_f(l[i]), i));
    for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) d[i] = from_f<T>(0.0f);
  }
}
}  // namespace

void cross_entropy_forward_backward(const OpContext& ctx, float* losses, void* dlogits, const void* logits,
                                    const int32_t* targets, float dloss, int N, int V, int Vp) {
  XT_CHECK(N >= 0 && V > 0 && Vp >= V, "bad cross-entropy shape N=" << N << " V=" << V << " Vp=" << Vp);
  if (N == 0) return;
  if (ctx.bf16) {
    using B16 = __nv_bfloat16;
    cross_entropy_kernel<B16, false><<<N, kThreads, 0, ctx.stream>>>(
        losses, static_cast<B16*>(dlogits), static_cast<const B16*>(logits), targets, dloss, V, Vp, ctx.error_flag);
    XT_CUDA_LAUNCH_CHECK();
    return;
  }
  float* dl = static_cast<float*>(dlogits);
  const float* lg = static_cast<const float*>(logits);
  const bool vec = Vp % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dlogits) % 16 == 0;
  if (vec)
    cross_entropy_kernel<float, true><<<N, kThreads, 0, ctx.stream>>>(losses, dl, lg, targets, dloss, V, Vp,
                                                                      ctx.error_flag);
  else
    cross_entropy_kernel<float, false><<<N, kThreads, 0, ctx.stream>>>(losses, dl, lg, targets, dloss, V, Vp,
                                                                       ctx.error_flag);
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
