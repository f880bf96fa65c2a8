// Attention against a key/value cache for inference (Backend::attention_decode) in one kernel, split over
// the cache rows (Flash-Decoding: Dao, Haziza, Massa, Sizov 2023): the rows [0, t] a new position t attends
// to are cut into chunks (split_rows, a function of t alone), one block per (sequence, new position, group
// of query heads sharing a key/value head, chunk); each block keeps its chunk's online softmax in fp32
// and the last block of a query row to finish combines the chunks in chunk order. The same kernel writes
// the new keys and values into the caches; blocks read the new rows from qkv, so no block waits for
// another's cache write. Decoding is bound by the latency of reading the cache, not by math.
// The first new position comes from device memory, so a recorded decoding step (Decoder's CUDA graph) runs
// at whatever position the cache has reached; chunk boundaries depend on t only, never on the launch
// (B, Tn, maxT), so a query row has the same bits in a decoding step and in RowKernels::per_row's
// training forward (backend.h), and on every run. Launched programmatically (launch.cuh): before its wait a
// block only prefetches into L2 the cache rows it will read that earlier launches wrote, so that reading them
// overlaps the kernel before (the qkv product), and lets the next kernel (the output projection) start loading
// its weights.
#include <algorithm>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/core/error.h>

namespace xtrain::cuda {

namespace {

constexpr int kThreads = 128;  // 4 warps per block
constexpr int kTile = 256;     // cache rows whose scores a block holds at once (per query head)
// A chunk has at least kMinRows rows, and a position's rows [0, t] make at most kMaxSplits chunks (attention_decode.h; in
// a cache of 1024, position 1023 takes 8 chunks of 128 rows: 8 blocks per query head). At batch 1 a short
// context in one chunk (positions below 128) or few is faster than many small ones whose partials need the
// combining pass (GPT-2 124M, 128 new tokens: 12% more tokens a second on an H100 than with chunks of 32 rows).
constexpr int kMinRows = kDecodeChunkRows, kMaxSplits = kDecodeMaxChunks;

// Split: position t's cache rows [0, t] cut into `count` chunks of `rows` rows (the last one shorter):
// chunk c is rows [c * rows, min(t + 1, (c + 1) * rows)). count <= kMaxSplits and count <=
// ceil((t + 1) / kMinRows), so max_splits(maxT) blocks cover every t < maxT.
struct Split {
  int rows, count;
};
__host__ __device__ inline Split split_rows(int t) {
  const int n = t + 1, spread = (n + kMaxSplits - 1) / kMaxSplits, rows = spread > kMinRows ? spread : kMinRows;
  return {rows, (n + rows - 1) / rows};
}
inline int max_splits(int maxT) { return std::min(kMaxSplits, (maxT + kMinRows - 1) / kMinRows); }

// DecodeArgs: the arguments of decode_kernel (shapes as Backend::attention_decode). This launch computes
// the query rows bi = b * Tn + i in [row0, row0 + gridDim.x / S).
template <typename T>
struct DecodeArgs {
  T* out;                 // (B,Tn,NH*HS)
  T* kcache;              // (B,maxT,KVH*HS)
  T* vcache;              // (B,maxT,KVH*HS)
  const T* qkv;           // (B,Tn,(NH+2*KVH)*HS)
  const int32_t* pos_p;   // the first new position (one int32 in device memory)
  float2* partial_ml;     // (rows of the launch, NH, S): a chunk's max score and sum of exponentials
  float* partial_acc;     // (rows of the launch, NH, S, HS): a chunk's output before dividing by the sum
  unsigned* counters;     // (rows of the launch, NH / G) chunks done; zero before and after each launch
  int* error_flag;
  int B, Tn, maxT, NH, KVH, HS, S, row0;
  float scale;
  bool trigger;  // let the next kernel start early (a decoding step's launch: the next is a GEMV of gemv.cu)
};

// position_ok: the first new position, read from device memory, leaves room for Tn rows in the cache;
// otherwise the first block of the grid raises kBadPosition and no thread writes.
__device__ bool position_ok(int pos, int Tn, int maxT, int* error_flag) {
  if (pos >= 0 && pos <= maxT - Tn) return true;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicCAS(error_flag, kDeviceOk, kBadPosition);
  return false;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// group_reduce: the block's threads with threadIdx.x % G == g hold values of query head g; out[g] = op
// over them in a fixed order (lanes by shuffles, then warps in order), in every thread. Synchronizes the
// block; `red` holds kThreads / kWarp * G floats.
template <int G, typename Op>
__device__ void group_reduce(float v, float* red, float (&out)[G], Op op, float init) {
  for (int off = kWarp / 2; off >= G; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // red may still be read after the previous reduction
  if (lane < G) red[warp * G + lane] = v;
  __syncthreads();
#pragma unroll
  for (int g = 0; g < G; ++g) {
    out[g] = init;
    for (int w = 0; w < kThreads / kWarp; ++w) out[g] = op(out[g], red[w * G + g]);
  }
}

// pick: a[g] for a g known only at run time, without indexing a register array (local memory).
template <int G>
__device__ __forceinline__ float pick(const float (&a)[G], int g) {
  float r = a[0];
#pragma unroll
  for (int k = 1; k < G; ++k) r = g == k ? a[k] : r;
  return r;
}

// decode_smem_floats: decode_kernel's dynamic shared memory (floats): q (G,HS), a tile's scores (G,kTile)
// and the row groups' weighted sums (HS / kN packs of columns, kThreads / packs row groups: (groups,G,HS)).
int decode_smem_floats(int G, int HS, int kN) {
  const int packs = (HS + kN - 1) / kN;
  return G * HS + G * kTile + (kThreads / packs) * G * HS;
}

// prefetch_cache: before the wait, L2 prefetches of the key and value rows of block (bi * S + s, y)'s chunk that
// lie below the first new position: cache rows that earlier launches wrote (the rows from pos on are this
// launch's, read from qkv). Hints only: the position read here may be one that an earlier kernel of the stream
// has yet to write; then other rows of the cache are prefetched and nothing else changes.
template <typename T, int G>
__device__ void prefetch_cache(const DecodeArgs<T>& a) {
  constexpr int kLine = 128;  // bytes of an L2 line
  const int pos = min(max(*a.pos_p, 0), a.maxT - a.Tn);
  const int local = blockIdx.x / a.S, s = blockIdx.x % a.S, bi = a.row0 + local;
  const int b = bi / a.Tn, t = pos + bi % a.Tn;
  const Split split = split_rows(t);
  const int lo = s * split.rows, hi = min(min(t + 1, lo + split.rows), pos);
  if (s >= split.count || hi <= lo) return;
  const QkvLayout lay{a.B, a.Tn, a.NH, a.KVH, a.HS};
  const int kh = lay.kv_head(blockIdx.y * G), bytes = a.HS * int(sizeof(T));
  // a head's row of bytes spans at most bytes / kLine + 1 lines: offsets 0, kLine, ... and its last byte
  const int lines = bytes / kLine + 1;
  const size_t kv_row = size_t(a.KVH) * a.HS, seq = size_t(b) * a.maxT;
  for (int idx = threadIdx.x; idx < (hi - lo) * 2 * lines; idx += kThreads) {
    const int r = lo + idx / (2 * lines), line = idx % lines;
    const T* cache = (idx / lines) % 2 ? a.vcache : a.kcache;
    const char* row = reinterpret_cast<const char*>(cache + (seq + r) * kv_row + size_t(kh) * a.HS);
    ptx::prefetch_l2(row + min(line * kLine, bytes - 1));
  }
}

// decode_kernel: block (bi * S + s, y): query heads h0 = y * G .. h0 + G - 1 (one key/value head kh; G
// divides NH / KVH: grouped-query attention, Ainslie et al. 2023, the key and value rows read once for G
// heads) of new position t = pos + i of sequence b, over chunk s of split_rows(t); blocks of a chunk past
// the last one return at once. The chunk's rows are taken in tiles of kTile with the online softmax
// (Milakov & Gimelshein 2018; FlashAttention, Dao et al. 2022): a tile's scores shifted by the max so far,
// the sums kept so far rescaled by exp(old max - new max).
// Scores: thread x takes head x % G and rows x / G, x / G + kThreads / G, ... (q pre-scaled; the dot in
// column order). Weighted sum: thread x keeps columns [c * kN, c * kN + kN), c = x % packs, over rows
// x / packs, x / packs + groups, ... of the tile; the row groups' sums are added in order at the end.
// kVec: 16-byte loads (HS a whole number of packs; caches and qkv 16-byte aligned); otherwise the same
// arithmetic element by element. A chunk's (max m_s, sum z_s, unnormalized output acc_s) goes to the
// scratch; the last of the row's blocks (a counter per row, reset by that block for the next launch)
// combines them in chunk order: m = max m_s, z = sum z_s exp(m_s - m), out = sum acc_s exp(m_s - m) / z.
// A position of one chunk (t < kMinRows) writes its output directly.
// The block of chunk 0 of the first head group of kh writes new position i's key and value rows.
template <typename T, int G, bool kVec>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeArgs<T> a) {
  if (a.trigger) ptx::griddepcontrol_launch_dependents();
  if (a.trigger) prefetch_cache<T, G>(a);
  ptx::griddepcontrol_wait();  // qkv, the position, the counters and the scratch: the earlier kernels' from here on
  const int pos = *a.pos_p;
  constexpr int kN = Pack<T>::kN;
  const QkvLayout lay{a.B, a.Tn, a.NH, a.KVH, a.HS};
  const int HS = a.HS, local = blockIdx.x / a.S, s = blockIdx.x % a.S, bi = a.row0 + local;
  const int b = bi / a.Tn, i = bi % a.Tn;
  const int h0 = blockIdx.y * G, kh = lay.kv_head(h0);
  extern __shared__ float smem[];
  __shared__ float red[kThreads / kWarp * G];
  float* q = smem;              // (G,HS), times scale
  float* sc = q + G * HS;       // (G,kTile): a tile's scores, then their exponentials
  float* part = sc + G * kTile;  // (groups,G,HS)
  // the query rows, whose place does not depend on the position: loaded while the position's load is in flight
  const T* qp = a.qkv + lay.q(b, i, h0);  // the G query heads are consecutive
  for (int j = threadIdx.x; j < G * HS; j += kThreads) q[j] = to_f(qp[j]) * a.scale;
  if (!position_ok(pos, a.Tn, a.maxT, a.error_flag)) return;
  const int t = pos + i;
  const Split split = split_rows(t);
  if (s >= split.count) return;
  const int lo = s * split.rows, hi = min(t + 1, lo + split.rows);
  const size_t kv_row = size_t(a.KVH) * HS, seq = size_t(b) * a.maxT;

  if (s == 0 && h0 % lay.group() == 0) {  // the cache append of new position i
    const T* kn = a.qkv + lay.k(b, i, kh);
    const T* vn = a.qkv + lay.v(b, i, kh);
    const size_t dst = (seq + t) * kv_row + size_t(kh) * HS;
    for (int j = threadIdx.x; j < HS; j += kThreads) a.kcache[dst + j] = kn[j], a.vcache[dst + j] = vn[j];
  }
  // cache row r's key or value of head kh: rows before pos from the cache, the new ones from qkv
  auto key_row = [&](int r) -> const T* {
    return r < pos ? a.kcache + (seq + r) * kv_row + size_t(kh) * HS : a.qkv + lay.k(b, r - pos, kh);
  };
  auto value_row = [&](int r) -> const T* {
    return r < pos ? a.vcache + (seq + r) * kv_row + size_t(kh) * HS : a.qkv + lay.v(b, r - pos, kh);
  };

  __syncthreads();  // q

  const int g = threadIdx.x % G;  // this thread's head for the scores (kThreads % G == 0)
  const int packs = (HS + kN - 1) / kN, groups = kThreads / packs;
  const int c = threadIdx.x % packs, rg = threadIdx.x / packs;
  float m[G], z[G], acc[G][kN];
#pragma unroll
  for (int k = 0; k < G; ++k) {
    m[k] = -INFINITY, z[k] = 0.0f;
#pragma unroll
    for (int e = 0; e < kN; ++e) acc[k][e] = 0.0f;
  }
  for (int t0 = lo; t0 < hi; t0 += kTile) {
    const int n = min(kTile, hi - t0);  // rows t0 .. t0 + n - 1
    float mx = -INFINITY;
    for (int r = threadIdx.x / G; r < n; r += kThreads / G) {
      const T* k = key_row(t0 + r);
      const float* qg = q + g * HS;
      float dot = 0.0f;
      if constexpr (kVec) {
        for (int j = 0; j < HS; j += kN) {
          const Pack<T> p = load_pack(k + j);
#pragma unroll
          for (int e = 0; e < kN; ++e) dot += qg[j + e] * to_f(p.v[e]);
        }
      } else {
        for (int j = 0; j < HS; ++j) dot += qg[j] * to_f(k[j]);
      }
      sc[g * kTile + r] = dot;
      mx = fmaxf(mx, dot);
    }
    float tile_max[G], alpha[G], shift[G], tile_sum[G];
    group_reduce<G>(mx, red, tile_max, MaxOp(), -INFINITY);  // synchronizes: every score is written
#pragma unroll
    for (int k = 0; k < G; ++k) {
      const float m_new = fmaxf(m[k], tile_max[k]);
      alpha[k] = m[k] == -INFINITY ? 0.0f : __expf(m[k] - m_new);  // 0 on the first tile
      // the shift: the max so far, or 0 while every score so far is -inf (inf inputs; no -inf - -inf)
      shift[k] = m_new == -INFINITY ? 0.0f : m_new;
      m[k] = m_new;
    }
    const float my_shift = pick(shift, g);
    float zt = 0.0f;
    for (int r = threadIdx.x / G; r < n; r += kThreads / G)
      zt += (sc[g * kTile + r] = __expf(sc[g * kTile + r] - my_shift));
    group_reduce<G>(zt, red, tile_sum, SumOp(), 0.0f);  // synchronizes: every score is its exponential
#pragma unroll
    for (int k = 0; k < G; ++k) {
      z[k] = z[k] * alpha[k] + tile_sum[k];
#pragma unroll
      for (int e = 0; e < kN; ++e) acc[k][e] *= alpha[k];
    }
    if (rg < groups) {
      for (int r = rg; r < n; r += groups) {
        const T* v = value_row(t0 + r) + c * kN;
        float ve[kN];
        if constexpr (kVec) {
          const Pack<T> p = load_pack(v);
#pragma unroll
          for (int e = 0; e < kN; ++e) ve[e] = to_f(p.v[e]);
        } else {
#pragma unroll
          for (int e = 0; e < kN; ++e) ve[e] = c * kN + e < HS ? to_f(v[e]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < G; ++k) {
          const float p = sc[k * kTile + r];
#pragma unroll
          for (int e = 0; e < kN; ++e) acc[k][e] += p * ve[e];
        }
      }
    }
    __syncthreads();  // every thread has read the tile's sc before the next tile overwrites it
  }
  if (rg < groups) {
#pragma unroll
    for (int k = 0; k < G; ++k)
#pragma unroll
      for (int e = 0; e < kN; ++e)
        if (c * kN + e < HS) part[(rg * G + k) * HS + c * kN + e] = acc[k][e];
  }
  __syncthreads();

  const size_t out_row = size_t(bi) * a.NH * HS + size_t(h0) * HS;  // (G,HS) of out
  if (split.count == 1) {  // the chunk is the whole row
    for (int idx = threadIdx.x; idx < G * HS; idx += kThreads) {
      float o = 0.0f;
      for (int w = 0; w < groups; ++w) o += part[w * G * HS + idx];
      a.out[out_row + idx] = from_f<T>(o * (1.0f / pick(z, idx / HS)));
    }
    return;
  }
  const size_t first = (size_t(local) * a.NH + h0) * a.S;  // partials of head h0, chunk 0; head h0 + k at + k*S
  for (int idx = threadIdx.x; idx < G * HS; idx += kThreads) {
    float o = 0.0f;
    for (int w = 0; w < groups; ++w) o += part[w * G * HS + idx];
    a.partial_acc[(first + size_t(idx / HS) * a.S + s) * HS + idx % HS] = o;
  }
  if (threadIdx.x < G)
    a.partial_ml[first + size_t(threadIdx.x) * a.S + s] = make_float2(pick(m, threadIdx.x), pick(z, threadIdx.x));
  // the last block of the row combines (threadFenceReduction, CUDA samples): partials visible device-wide
  // before the count, the count before the last block reads them
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* counter = a.counters + size_t(local) * gridDim.y + blockIdx.y;
    last = atomicAdd(counter, 1u) == unsigned(split.count - 1);
    if (last) *counter = 0;  // every chunk has counted: ready for the next launch (a graph's replay)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  __shared__ float weight[G][kMaxSplits], inv_z[G];
  if (threadIdx.x < G) {
    const float2* ml = a.partial_ml + first + size_t(threadIdx.x) * a.S;
    float mm = -INFINITY, zz = 0.0f;
    for (int k = 0; k < split.count; ++k) mm = fmaxf(mm, __ldcg(ml + k).x);
    for (int k = 0; k < split.count; ++k) {
      const float2 p = __ldcg(ml + k);
      const float w = p.x == -INFINITY ? 0.0f : __expf(p.x - mm);  // a chunk of -inf scores adds nothing
      weight[threadIdx.x][k] = w;
      zz += p.y * w;
    }
    inv_z[threadIdx.x] = 1.0f / zz;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * HS; idx += kThreads) {
    const int k = idx / HS;
    const float* acc_k = a.partial_acc + (first + size_t(k) * a.S) * HS + idx % HS;
    float o = 0.0f;
    for (int ch = 0; ch < split.count; ++ch) o += __ldcg(acc_k + size_t(ch) * HS) * weight[k][ch];
    a.out[out_row + idx] = from_f<T>(o * inv_z[k]);
  }
}

// heads_per_block: G of decode_kernel for NH / KVH query heads per key/value head (a divisor of it).
int heads_per_block(int group) { return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1; }

}  // namespace

void attention_decode(const OpContext& ctx, void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn,
                      const int32_t* pos, int maxT, int NH, int KVH, int HS) {
  XT_CHECK(B >= 0 && HS > 0 && NH > 0 && KVH > 0 && NH % KVH == 0,
           "bad attention_decode shape B=" << B << " NH=" << NH << " KVH=" << KVH << " HS=" << HS);
  XT_CHECK(Tn >= 1 && Tn <= maxT, "attention_decode: " << Tn << " new positions do not fit the cache of " << maxT);
  XT_CHECK(ctx.split_counters != nullptr, "attention_decode: the OpContext has no split counters");
  if (B == 0) return;
  const int G = heads_per_block(NH / KVH), head_groups = NH / G, S = max_splits(maxT);
  const int rows = B * Tn;  // query rows (sequence, new position)
  // Rows per launch: a counter per (row, head group) of the kSplitCounters, and partials of at most
  // kPartialBytes; the launches run in order on the stream, each row's arithmetic the same in any of them.
  constexpr size_t kPartialBytes = size_t(64) << 20;
  const size_t row_partials = size_t(NH) * S * (HS + 2);  // floats: (max, sum) and HS outputs per head and chunk
  XT_CHECK(head_groups <= kSplitCounters, "attention_decode: " << head_groups << " head groups exceed the "
                                                               << kSplitCounters << " split counters");
  const int launch_rows = int(std::min<size_t>(
      {size_t(rows), size_t(kSplitCounters / head_groups), std::max<size_t>(1, kPartialBytes / (row_partials * 4))}));
  // with one chunk per position (maxT <= kMinRows) no block writes partials
  ScratchBuffer<float> partial(*ctx.alloc, S > 1 ? size_t(launch_rows) * row_partials : 0, "attention_decode partials");
  const float scale = 1.0f / sqrtf(float(HS));  // Vaswani et al. 2017, eq. 1
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kN = Pack<T>::kN;
    XT_CHECK(HS <= kThreads * kN, "attention_decode: head size " << HS << " exceeds " << kThreads * kN
                                                                 << " (a column pack per thread)");
    const size_t smem = size_t(decode_smem_floats(G, HS, kN)) * sizeof(float);
    XT_CHECK(smem <= 48 * 1024, "attention_decode: head size " << HS << " needs " << smem << " bytes of shared memory");
    const size_t ml_floats = size_t(launch_rows) * NH * S * 2;
    DecodeArgs<T> args{static_cast<T*>(out), static_cast<T*>(kcache), static_cast<T*>(vcache),
                       static_cast<const T*>(qkv), pos, reinterpret_cast<float2*>(partial.get()),
                       partial.get() + ml_floats, ctx.split_counters, ctx.error_flag, B, Tn, maxT, NH, KVH, HS,
                       S, 0, scale, decoding_rows(rows)};
    const bool vec = HS % kN == 0 && aligned16(kcache) && aligned16(vcache) && aligned16(qkv);
    using Kernel = void (*)(DecodeArgs<T>);
    const Kernel kernel = G == 4   ? (vec ? decode_kernel<T, 4, true> : decode_kernel<T, 4, false>)
                          : G == 2 ? (vec ? decode_kernel<T, 2, true> : decode_kernel<T, 2, false>)
                                   : (vec ? decode_kernel<T, 1, true> : decode_kernel<T, 1, false>);
    for (int row0 = 0; row0 < rows; row0 += launch_rows) {
      args.row0 = row0;
      const int n = std::min(launch_rows, rows - row0);
      launch_kernel(args.trigger, ctx.stream, dim3(unsigned(n) * S, unsigned(head_groups)), dim3(kThreads), smem, kernel,
                    args);
    }
  });
}

}  // namespace xtrain::cuda
