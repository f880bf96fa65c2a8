// Rotary position embeddings (Su et al. 2021) on the q and k heads of the fused qkv activation, in place, in
// Hugging Face's rotate-half convention. Two kernels, the same bits: the row kernel (a block per position: the
// position's HS/2 angles' cos and sin once, in shared memory, for all NH + KVH heads; the heads in 16-byte
// vectors) where HS/2 and the pointer allow, else the pair kernel (a thread per channel pair, any even HS).
// The angle from backend/rotary.h, cosf/sinf in fp32 (not the fast intrinsics, whose error grows with the
// angle: positions reach thousands of radians). The start position is read on the device, when the kernel
// runs, so one recorded decoding step serves every position.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include "backend/rotary.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kMaxPairs = 256;        // HS <= 512: the table below stays a 1 KiB kernel argument
constexpr int kRowThreads = 256;      // the row kernel's block: about this many threads, whole rows each
constexpr int kMaxRowThreads = 1024;  // threads along one row (more vectors than this: each thread loops)

// InvFreq: rotary_inv_freq(i, HS, theta) for i < HS/2, computed on the host once per launch and passed by
// value (__grid_constant__: read in place from the kernel's parameters, no per-thread copy). Why not powf in
// the kernel: the device's powf may differ from the host's in the last bits, and a relative change of
// inv_freq moves the angle p * inv_freq by p times as much (p in the thousands), which the CPU oracle
// comparison would see; with the host's values the angles are the oracle's to the bit.
struct InvFreq {
  float v[kMaxPairs];
};

// rotary_cos_sin: c = cos a, sn = sign * sin a (exact: sign is +-1) of the angle a = a(p, i), both kernels'.
__device__ __forceinline__ void rotary_cos_sin(int p, float inv_freq, float sign, float& c, float& sn) {
  const float a = rotary_angle_from(p, inv_freq);
  c = cosf(a);
  sn = sign * sinf(a);
}

// rotate_pair: (x0, x1) -> (x0 c - x1 sn, x1 c + x0 sn), each an fma around one rounded product. Written with
// the intrinsics so the compiler's contraction choices (which may differ between two kernels) cannot change
// a bit: the two kernels round the same way.
__device__ __forceinline__ void rotate_pair(float& x0, float& x1, float c, float sn) {
  const float y0 = __fmaf_rn(x0, c, -__fmul_rn(x1, sn));
  const float y1 = __fmaf_rn(x0, sn, __fmul_rn(x1, c));
  x0 = y0;
  x1 = y1;
}

// The pair kernel: grid-stride over the B*T*(NH+KVH)*HS/2 pairs of the q and k heads (contiguous in a qkv
// row: q heads, then k heads); v untouched. Row t of each sequence is at position *pos + t (pos null: 0).
// sign +1 rotates by a(p, i) (forward), -1 by -a(p, i) (backward: the rotation's transpose). fp32
// arithmetic, A storage.
template <typename A>
__global__ void rotary_pairs_kernel(A* qkv, const int32_t* pos, QkvLayout s, const __grid_constant__ InvFreq inv_freq,
                                    float sign, bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (launch_rotary)
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
    float c, sn;
    rotary_cos_sin(start + t, inv_freq.v[i], sign, c, sn);
    float x0 = to_f(x[i]), x1 = to_f(x[i + half]);
    rotate_pair(x0, x1, c, sn);
    x[i] = from_f<A>(x0);
    x[i + half] = from_f<A>(x1);
  }
}

// The row kernel: block (tx, ty) takes positions blockIdx.x * ty + threadIdx.y, ty of them. Per position,
// item j < (NH + KVH) * HS/2 / kN is vector j % (HS/2/kN) of head j / (HS/2/kN): channels [i0, i0 + kN) and
// [i0 + HS/2, ...) of the head, i0 = kN * (j % (HS/2/kN)). The arithmetic is the pair kernel's, element for
// element. Needs HS/2 % kN == 0 and qkv 16-byte aligned (then every vector is: rows, heads and halves are
// whole multiples of 2 kN elements); 32-bit index math within a row.
template <typename A>
__global__ void __launch_bounds__(kMaxRowThreads)
    rotary_rows_kernel(A* qkv, const int32_t* pos, QkvLayout s, const __grid_constant__ InvFreq inv_freq, float sign,
                       bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (launch_rotary)
  constexpr int kN = Pack<A>::kN;
  // (ty, HS) fp32: per position, cos a(p, i) for i < HS/2, then sign * sin a(p, i)
  extern __shared__ __align__(16) float trig[];
  const int half = s.HS / 2, per_head = half / kN, items = (s.NH + s.KVH) * per_head;
  const int bt = blockIdx.x * blockDim.y + threadIdx.y;  // b*T + t
  const bool live = bt < s.B * s.T;                     // the last block's spare rows only join the barrier
  float* cs = trig + threadIdx.y * s.HS;
  float* sn = cs + half;
  A* x = qkv + (live ? size_t(bt) * s.row() : 0);
  // the first vectors are loaded before the angles are computed: their latency hides the cosf/sinf
  int j = threadIdx.x;
  Pack<A> lo, hi;
  auto load = [&] {
    const int h = j / per_head, e = h * s.HS + (j - h * per_head) * kN;
    lo = load_pack(x + e);
    hi = load_pack(x + e + half);
  };
  if (live && j < items) load();
  if (live) {
    const int p = (pos ? *pos : 0) + bt % s.T;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rotary_cos_sin(p, inv_freq.v[i], sign, cs[i], sn[i]);
  }
  __syncthreads();
  if (!live) return;
  while (j < items) {
    const int h = j / per_head, i0 = (j - h * per_head) * kN;
    const Vec<float, kN> c = load_vec<float, kN>(cs + i0), sv = load_vec<float, kN>(sn + i0);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      float x0 = to_f(lo.v[k]), x1 = to_f(hi.v[k]);
      rotate_pair(x0, x1, c.v[k], sv.v[k]);
      lo.v[k] = from_f<A>(x0);
      hi.v[k] = from_f<A>(x1);
    }
    A* xe = x + h * s.HS + i0;
    store_pack(xe, lo);
    store_pack(xe + half, hi);
    j += blockDim.x;
    if (j < items) load();
  }
}

template <typename A>
bool rows_route(const void* qkv, int HS) {
  return (HS / 2) % Pack<A>::kN == 0 && aligned16(qkv);
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
    A* x = static_cast<A*>(qkv);
    if (rows_route<A>(qkv, HS)) {
      const int rows = B * T, items = (NH + KVH) * (HS / 2 / Pack<A>::kN);
      const int tx = std::min((items + kWarp - 1) / kWarp * kWarp, kMaxRowThreads);
      const int ty = std::max(1, std::min(kRowThreads / tx, rows));
      const size_t smem = size_t(ty) * HS * sizeof(float);  // <= 8 rows of HS <= 512: 16 KiB
      launch_kernel(decoding_rows(rows), ctx.stream, dim3((rows + ty - 1) / ty), dim3(tx, ty), smem,
                    rotary_rows_kernel<A>, x, pos, s, inv_freq, sign, decoding_rows(rows));
    } else {
      launch_kernel(decoding_rows(size_t(B) * T), ctx.stream, dim3(blocks_for(pairs, kThreads)), dim3(kThreads), 0,
                    rotary_pairs_kernel<A>, x, pos, s, inv_freq, sign, decoding_rows(size_t(B) * T));
    }
  });
}
}  // namespace

RotaryRoute rotary_route(const OpContext& ctx, const void* qkv, int HS) {
  const bool rows = ctx.bf16 ? rows_route<__nv_bfloat16>(qkv, HS) : rows_route<float>(qkv, HS);
  return rows ? RotaryRoute::rows : RotaryRoute::pairs;
}

void rotary_forward(const OpContext& ctx, void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS,
                    float theta) {
  launch_rotary(ctx, qkv, pos, B, T, NH, KVH, HS, theta, 1.0f);
}

void rotary_backward(const OpContext& ctx, void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) {
  launch_rotary(ctx, dqkv, nullptr, B, T, NH, KVH, HS, theta, -1.0f);
}

}  // namespace xtrain::cuda
