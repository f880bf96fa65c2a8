// What the row-normalizing kernels (layernorm.cu, rmsnorm.cu) share: one launch shape for every norm
// (ggml-cuda's norm.cu keeps one too), a lane's walk over a row's vectors in trips of slots (for_row_slots;
// the backwards' loads of x, dout and w per slot: for_backward_slots), the read of a row's input that, in
// their fused residual forms, is the residual add itself, and their backwards' blocks of rows that also sum
// the weight gradients per block (block_column_partial), finished in a fixed order by column_finish
// (column_reduce.cuh).
#pragma once

#include <initializer_list>

#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

// residual_row_vec: the kN elements at element offset `at` of a row's input. kAdd (residual_layernorm_forward,
// residual_rmsnorm_forward): inp + inp2 rounded to T as residual_forward rounds it, stored to res as well, so
// the statistics see exactly what the unfused norm would read from res; the caller's later passes read res
// back in the same lane. Otherwise inp's elements (inp2 and res unused). residual_sum: that sum.
template <typename T, int kN>
__device__ __forceinline__ Vec<T, kN> residual_sum(const Vec<T, kN>& a, const Vec<T, kN>& b) {
  Vec<T, kN> v;
#pragma unroll
  for (int k = 0; k < kN; ++k) v.v[k] = from_f<T>(to_f(a.v[k]) + to_f(b.v[k]));
  return v;
}
template <typename T, int kN, bool kAdd>
__device__ __forceinline__ Vec<T, kN> residual_row_vec(const T* inp, const T* inp2, T* res, size_t at) {
  if constexpr (kAdd) {
    const Vec<T, kN> v = residual_sum<T, kN>(load_vec<T, kN>(inp + at), load_vec<T, kN>(inp2 + at));
    store_vec<T, kN>(res + at, v);
    return v;
  } else {
    (void)inp2;
    (void)res;
    return load_vec<T, kN>(inp + at);
  }
}

// A lane's walk over a row of nv vectors (kN elements each) in trips of kSlots: trip p0 = lane, lane +
// 32 kSlots, ... holds the vectors p = p0 + 32 i, i < kSlots, p < nv (slot i). for_trip_slots: f(i, p) for the
// slots of trip p0, in slot order; for_row_slots: every trip in order, so a lane meets its vectors in the order
// p = lane, lane + 32, ... (what the norms' statistics and fused column sums add in). With kSlots fixed and
// the slots unrolled, a caller's per-slot arrays (v[i], sums[i]) stay in registers.
template <int kSlots, typename F>
__device__ __forceinline__ void for_trip_slots(int p0, int nv, F&& f) {
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int p = p0 + i * kWarp;
    if (p >= nv) continue;
    f(i, p);
  }
}
template <int kSlots, typename F>
__device__ __forceinline__ void for_row_slots(int lane, int nv, F&& f) {
  for (int p0 = lane; p0 < nv; p0 += kSlots * kWarp) for_trip_slots<kSlots>(p0, nv, f);
}
// for_backward_slots: for_row_slots with what a norm backward reads per slot: f(i, p, xv, dv, wv), xv and dv
// the vector p of the row's input x and gradient dy (T), wv that of the weight w (fp32), loaded in that order
// (layernorm_backward_kernel, rmsnorm_backward_kernel: both passes over a row).
template <typename T, int kN, int kSlots, typename F>
__device__ __forceinline__ void for_backward_slots(const T* x, const T* dy, const float* w, int lane, int nv, F&& f) {
  for_row_slots<kSlots>(lane, nv, [&](int i, int p) {
    const Vec<T, kN> xv = load_vec<T, kN>(x + p * kN), dv = load_vec<T, kN>(dy + p * kN);
    const Vec<float, kN> wv = load_vec<float, kN>(w + p * kN);
    f(i, p, xv, dv, wv);
  });
}

// residual_row_slots: the vectors p = p0 + 32 i (i < kSlots, p < nv) of a row's input, element offset `at`,
// into v, with residual_row_vec's values (kAdd: inp + inp2 rounded to T, stored to res), but every load issued
// before the first store to res, so a lane has the whole slice's loads in flight at once (a store between
// them would keep the compiler from moving a later load above it: res may alias inp or inp2). Each element
// is still read before the same lane overwrites it.
template <typename T, int kN, bool kAdd, int kSlots>
__device__ __forceinline__ void residual_row_slots(Vec<T, kN> (&v)[kSlots], const T* inp, const T* inp2, T* res,
                                                   size_t at, int p0, int nv) {
  [[maybe_unused]] Vec<T, kN> b[kSlots];
  for_trip_slots<kSlots>(p0, nv, [&](int i, int p) {
    v[i] = load_vec<T, kN>(inp + at + size_t(p) * kN);
    if constexpr (kAdd) b[i] = load_vec<T, kN>(inp2 + at + size_t(p) * kN);
  });
  if constexpr (kAdd) {
    for_trip_slots<kSlots>(p0, nv, [&](int i, int p) {
      v[i] = residual_sum<T, kN>(v[i], b[i]);
      store_vec<T, kN>(res + at + size_t(p) * kN, v[i]);
    });
  }
}

// The launch shape: one warp per row, kRowNormRows rows per block, so row = blockIdx.x * kRowNormRows +
// threadIdx.x / kWarp (row_norm_row). A kernel's instantiation is RowNorm<T, kN, kAdd>: T the activation
// type (with_act), kN = Pack<T>::kN when C and every row pointer allow 16-byte vectors (vec_rows), else 1;
// kAdd for a fused residual form (its inp2 and res given, and 16-byte aligned for kN > 1).
inline constexpr int kRowNormRows = 4;

// LayerNorm's epsilon (GPT-2 / PyTorch default): layernorm.cu and gemv.cu's fused LayerNorm prologue
inline constexpr float kLayerNormEps = 1e-5f;

__device__ __forceinline__ int row_norm_row() { return blockIdx.x * kRowNormRows + threadIdx.x / kWarp; }

template <typename T, int kN_, bool kAdd_>
struct RowNorm {
  using type = T;
  static constexpr int kN = kN_;
  static constexpr bool kAdd = kAdd_;
  dim3 grid, block;  // the launch's
};

// launch_row_norm: calls launch(RowNorm<T, kN, kAdd>{grid, block}) for the instantiation that fits
// (kAdd = inp2 and res given; `rows`: the (N,C) buffers and (C) vectors the kernel moves in vectors),
// which launches it <<<shape.grid, shape.block, 0, ctx.stream>>>; then checks the launch. No launch for
// N or C <= 0. A kernel without a fused form ignores kAdd (res null).
template <typename Launch>
void launch_row_norm(const OpContext& ctx, int N, int C, std::initializer_list<const void*> rows, const void* inp2,
                     void* res, Launch&& launch) {
  if (N <= 0 || C <= 0) return;
  const dim3 grid(unsigned((N + kRowNormRows - 1) / kRowNormRows)), block(kRowNormRows * kWarp);
  const bool add = res != nullptr;
  with_act(ctx, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kV = Pack<T>::kN;
    if (vec_rows<T>(C, rows) && (!add || (aligned16(inp2) && aligned16(res)))) {
      if (add) launch(RowNorm<T, kV, true>{grid, block});
      else launch(RowNorm<T, kV, false>{grid, block});
    } else {
      if (add) launch(RowNorm<T, 1, true>{grid, block});
      else launch(RowNorm<T, 1, false>{grid, block});
    }
  });
  XT_CUDA_LAUNCH_CHECK();
}

// The backwards' launch shape: blocks of kBackwardWarps warps, one warp per row at a time; with the weight
// gradients fused (launch_norm_backward), block b takes the rows of chunk b of row_chunks(N).
inline constexpr int kBackwardWarps = 8;
inline constexpr int kBackwardThreads = kBackwardWarps * kWarp;

// The fused column sums stay in registers: kLaneSumRegs fp32 per lane hold a lane's columns of all K sums in
// one trip over the row, so C <= fused_norm_max_c(K): 1024 for LayerNorm's dw and db (GPT-2 124M and 350M),
// 2048 for RMSNorm's dw (Llama-3.2-1B). Wider rows take the separate column reduction (column_reduce.cuh),
// which reads dout and inp again.
inline constexpr int kLaneSumRegs = 64;
__host__ __device__ constexpr int lane_cols(int K) { return kLaneSumRegs / K; }
__host__ __device__ constexpr int fused_norm_max_c(int K) { return lane_cols(K) * kWarp; }

// block_column_partial stages the sums of norm_stage_warps(K) warps at a time in shared memory: up to
// 8192 floats (32 KiB, within the 48 KiB a block gets without opting in) at C = fused_norm_max_c(K), so all 8
// warps in one round for LayerNorm, 4 in two rounds for RMSNorm.
__host__ __device__ constexpr int norm_stage_warps(int K) { return 8192 / fused_norm_max_c(K); }

// block_column_partial: partial (C) = the sum over the block's warps, in warp order and in double, of the
// warps' per-lane fp32 sums acc (lane l holds the columns of the vectors p = l + 32 i, i < kSlots, of kN
// elements each). stage: kStageWarps * C floats of shared memory, filled by kStageWarps warps at a time (a
// divisor of kBackwardWarps); between rounds the running double sum waits in partial (each column's thread
// reads back its own store), so the order is that of one round. Synchronizes the block.
template <int kStageWarps, int kN, int kSlots>
__device__ void block_column_partial(double* partial, const Vec<float, kN> (&acc)[kSlots], float* stage, int C) {
  static_assert(kBackwardWarps % kStageWarps == 0, "rounds of whole warps");
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nv = C / kN;
#pragma unroll
  for (int first = 0; first < kBackwardWarps; first += kStageWarps) {
    if (kStageWarps == kBackwardWarps || (warp >= first && warp < first + kStageWarps)) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int p = lane + i * kWarp;
        if (p < nv) store_vec<float, kN>(stage + (warp - first) * C + p * kN, acc[i]);
      }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      double s = first == 0 ? 0.0 : partial[c];
#pragma unroll
      for (int j = 0; j < kStageWarps; ++j) s += double(stage[j * C + c]);
      partial[c] = s;
    }
    __syncthreads();  // the next round or call reuses stage
  }
}

// NormBackwardShape: what launch_norm_backward hands the kernel's launch: grid (one block per chunk of rows),
// dynamic shared memory bytes (block_column_partial's stage), rows per block (the chunk), and partial
// (K, chunks, C), where block b writes its sums [k][b][c].
struct NormBackwardShape {
  unsigned grid;
  size_t smem;
  int rows_per_block;
  double* partial;
};

// launch_norm_backward: a row kernel that also writes the per-block column sums of the K weight gradients
// (C <= fused_norm_max_c(K)), then column_finish adds them into out: out.dst[k] (C) += sum over blocks (= when
// accumulate is false), in a fixed order (the same bits on every run; no atomics). launch(shape) launches the
// kernel <<<shape.grid, kBackwardThreads, shape.smem, ctx.stream>>>. Scratch: K * min(N, 256) * C doubles.
template <int K, typename Launch>
void launch_norm_backward(const OpContext& ctx, ColumnOut<K> out, int N, int C, bool accumulate, Launch&& launch) {
  const RowChunks rc = row_chunks(N);
  ScratchBuffer<double> partial(*ctx.alloc, size_t(K) * rc.chunks * C, "column sums");
  launch(NormBackwardShape{unsigned(rc.chunks), sizeof(float) * norm_stage_warps(K) * C, rc.rows_per_chunk,
                           partial.get()});
  XT_CUDA_LAUNCH_CHECK();
  column_finish<K>(ctx, out, partial.get(), rc.chunks, C, accumulate);
}

}  // namespace xtrain::cuda
