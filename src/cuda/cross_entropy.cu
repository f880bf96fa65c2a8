// Fused softmax cross-entropy: losses and dlogits in one kernel, one block per row of Vp (padded
// vocabulary) columns, of which the first V take part; the padded dlogits columns are set to 0.
// Two passes over a row: max and sum of exponentials together (online softmax, Milakov & Gimelshein
// 2018), then the gradient. dlogits may
// alias logits: every thread reads the row (max, sum) before the block synchronizes, and then
// writes only the elements it alone reads again. A target outside [0, V) sets the device error
// flag (thrown by the backend at its next synchronizing call) and that row's loss is NaN.
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
// or bf16, ops.h), fp32 arithmetic. kVec: rows are 16-byte aligned (Vp a multiple of the pack size and
// aligned bases), so the first V/kN*kN columns move as 16-byte packs (4 float or 8 bf16: fewer, wider
// memory transactions), the rest element by element.
template <typename T, bool kVec>
__global__ void cross_entropy_kernel(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                                     float dloss, int V, int Vp, int* error_flag) {
  constexpr int kN = Pack<T>::kN;
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
  const int VP = kVec ? V / kN : 0;  // whole packs; then the element tail [kN*VP, V)
  float tmx = -INFINITY, ts = 0.0f;
  for (int i = threadIdx.x; i < VP; i += blockDim.x) {
    const Pack<T> x = load_pack(l + size_t(i) * kN);
#pragma unroll
    for (int k = 0; k < kN; ++k) online_add(tmx, ts, to_f(x.v[k]));
  }
  for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x) online_add(tmx, ts, to_f(l[i]));
  const float mx = block_max(tmx, red);
  float s = tmx == -INFINITY ? 0.0f : ts * expf(tmx - mx);  // a thread with no element adds 0
  s = block_sum(s, red);  // its barriers order every read above before the writes below
  const float log_s = logf(s);
  if (threadIdx.x == 0) losses[row] = log_s + mx - target_logit;
  if (dlogits) {
    T* d = dlogits + row * Vp;
    const float inv_s = 1.0f / s;
    auto grad = [&](float x, int i) { return (expf(x - mx) * inv_s - (i == target ? 1.0f : 0.0f)) * dloss; };
    for (int i = threadIdx.x; i < VP; i += blockDim.x) {
      const Pack<T> x = load_pack(l + size_t(i) * kN);
      Pack<T> g;
#pragma unroll
      for (int k = 0; k < kN; ++k) g.v[k] = from_f<T>(grad(to_f(x.v[k]), i * kN + k));
      store_pack(d + size_t(i) * kN, g);
    }
    for (int i = kN * VP + threadIdx.x; i < V; i += blockDim.x) d[i] = from_f<T>(grad(to_f(l[i]), i));
    for (int i = V + threadIdx.x; i < Vp; i += blockDim.x) d[i] = from_f<T>(0.0f);
  }
}
}  // namespace

void cross_entropy_forward_backward(const OpContext& ctx, float* losses, void* dlogits, const void* logits,
                                    const int32_t* targets, float dloss, int N, int V, int Vp) {
  XT_CHECK(N >= 0 && V > 0 && Vp >= V, "bad cross-entropy shape N=" << N << " V=" << V << " Vp=" << Vp);
  if (N == 0) return;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    T* dl = static_cast<T*>(dlogits);
    const T* lg = static_cast<const T*>(logits);
    const bool vec = Vp % Pack<T>::kN == 0 && aligned16(logits) && aligned16(dlogits);  // dlogits may be null
    if (vec)
      cross_entropy_kernel<T, true><<<N, kThreads, 0, ctx.stream>>>(losses, dl, lg, targets, dloss, V, Vp,
                                                                    ctx.error_flag);
    else
      cross_entropy_kernel<T, false><<<N, kThreads, 0, ctx.stream>>>(losses, dl, lg, targets, dloss, V, Vp,
                                                                     ctx.error_flag);
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
