// Rotary position embeddings (Su et al. 2021) on the q and k heads of the fused qkv activation, in place, in
// Hugging Face's rotate-half convention: one thread per channel pair (i, i + HS/2) of a head, the angle from
// backend/rotary.h, cosf/sinf in fp32 (not the fast intrinsics, whose error grows with the angle: positions
// reach thousands of radians). The start position is read on the device, when the kernel runs, so one
// recorded decoding step serves every position.
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include "backend/rotary.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kMaxPairs = 256;  // HS <= 512: the table below stays a 1 KiB kernel argument

// InvFreq: rotary_inv_freq(i, HS, theta) for i < HS/2, computed on the host once per launch and passed by
// value (__grid_constant__: read in place from the kernel's parameters, no per-thread copy). Why not powf in
// the kernel: the device's powf may differ from the host's in the last bits, and a relative change of
// inv_freq moves the angle p * inv_freq by p times as much (p in the thousands), which the CPU oracle
// comparison would see; with the host's values the angles are the oracle's to the bit.
struct InvFreq {
  float v[kMaxPairs];
};

// grid-stride over the B*T*(NH+KVH)*HS/2 pairs of the q and k heads (contiguous in a qkv row: q heads,
// then k heads); v untouched. Row t of each sequence is at position *pos + t (pos null: 0). sign +1 rotates
// by a(p, i) (forward), -1 by -a(p, i) (backward: the rotation's transpose). fp32 arithmetic, A storage.
template <typename A>
__global__ void rotary_kernel(A* qkv, const int32_t* pos, QkvLayout s,
                              const __grid_constant__ InvFreq inv_freq, float sign) {
  const int half = s.HS / 2, heads = s.NH + s.KVH;
  const int start = pos ? *pos : 0;
  const size_t count = size_t(s.B) * s.T * heads * half;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < count;
       idx += size_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const size_t head_row = idx / half;  // (b*T + t) * heads + h
    const int h = int(head_row % heads);
    const size_t bt = head_row / heads;
    const int t = int(bt % s.T);
    A* x = qkv + bt * s.row() + size_t(h) * s.HS;
    const float a = rotary_angle_from(start + t, inv_freq.v[i]);
    const float c = cosf(a), sn = sign * sinf(a);
    const float x0 = to_f(x[i]), x1 = to_f(x[i + half]);
    x[i] = from_f<A>(x0 * c - x1 * sn);
    x[i + half] = from_f<A>(x1 * c + x0 * sn);
  }
}

void launch_rotary(const OpContext& ctx, void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS,
                   float theta, float sign) {
  XT_CHECK(HS % 2 == 0, "rotary embeddings need an even head size (HS=" << HS << ")");
  XT_CHECK(HS / 2 <= kMaxPairs, "rotary embeddings on CUDA take HS <= " << 2 * kMaxPairs << " (HS=" << HS << ")");
  const QkvLayout s = qkv_layout(B, T, NH, KVH, HS);
  const size_t pairs = size_t(B) * T * (NH + KVH) * (HS / 2);
  if (pairs == 0) return;
  InvFreq inv_freq{};
  for (int i = 0; i < HS / 2; ++i) inv_freq.v[i] = rotary_inv_freq(i, HS, theta);
  with_act(ctx, [&](auto tag) {
    using A = decltype(tag);
    rotary_kernel<A><<<blocks_for(pairs, kThreads), kThreads, 0, ctx.stream>>>(static_cast<A*>(qkv), pos, s,
                                                                              inv_freq, sign);
  });
  XT_CUDA_LAUNCH_CHECK();
}
}  // namespace

void rotary_forward(const OpContext& ctx, void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS,
                    float theta) {
  launch_rotary(ctx, qkv, pos, B, T, NH, KVH, HS, theta, 1.0f);
}

void rotary_backward(const OpContext& ctx, void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) {
  launch_rotary(ctx, dqkv, nullptr, B, T, NH, KVH, HS, theta, -1.0f);
}

}  // namespace xtrain::cuda
