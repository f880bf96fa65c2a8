// Causal scaled-dot-product attention with grouped-query heads (Ainslie et al. 2023): query head h
// reads key/value head h / (NH/KVH). The products run as cuBLAS strided-batched GEMMs (gemm.cpp) with
// one fused causal-softmax kernel in between; `att` holds the probabilities, as the Backend contract
// asks, and the backward reads them instead of recomputing the scores.
// Layout trick: q, k, v are first permuted to head-major (B,H,T,HS). The NH/KVH query heads of one
// kv group are then consecutive, so for batch b and kv head kh the group's queries are ONE matrix of
// R = (NH/KVH)*T rows, and every product is one GEMM per (b, kh): batch B*KVH, no atomics; the sum
// over the heads of a group (dk, dv) is part of the GEMM's inner dimension.
// On the cudnn route (OpContext::attention; auto's choice with bf16) both ops hand over to cuDNN's fused
// attention (cudnn_attention.h), on the flash route to the kernels of flash_attention.cu, for the shapes
// those take, and `att` holds what they need. attention_route / route_for are the one place that picks.
// The GEMMs compute the full T x T score matrix; the softmax writes exact zeros above the diagonal,
// so the masked half adds nothing (2x the causal FLOPs, simple and exact).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/flash_attention.h"
#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarp;  // softmax: one warp per row

enum class Copy { to_heads, to_rows, add_to_rows };

// Between row layout rows (B,T,W) (heads [head0, head0+H) of HS channels each) and head-major
// heads (B,H,T,HS). One thread per element, indexed in row order (coalesced on both sides in i).
__global__ void permute_kernel(float* heads, float* rows, int B, int T, int H, int HS, int W, int head0, Copy mode) {
  const size_t count = size_t(B) * T * H * HS;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < count; idx += size_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % HS);
    const int h = int(idx / HS % H);
    const size_t bt = idx / (size_t(HS) * H);
    const int t = int(bt % T), b = int(bt / T);
    const size_t r = bt * W + size_t(head0 + h) * HS + i;
    const size_t hd = ((size_t(b) * H + h) * T + t) * HS + i;
    if (mode == Copy::to_heads) heads[hd] = rows[r];
    else if (mode == Copy::to_rows) rows[r] = heads[hd];
    else rows[r] += heads[hd];
  }
}

// Online softmax state (max, sum of exp(x - max)) of two partial rows merged; an empty part has
// max -inf and sum 0 and must not produce exp(-inf - -inf) = NaN.
__device__ __forceinline__ void merge(float& mx, float& z, float omx, float oz) {
  if (omx == -INFINITY) return;
  if (mx == -INFINITY) {
    mx = omx, z = oz;
    return;
  }
  const float m = fmaxf(mx, omx);
  z = z * expf(mx - m) + oz * expf(omx - m);
  mx = m;
}

// att rows (rows, T), row r is query position t = r % T: softmax over columns <= t, zeros above.
__global__ void causal_softmax_kernel(float* att, size_t rows, int T) {
  const size_t row = blockIdx.x * size_t(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = int(row % T);
  float* a = att + row * T;
  float mx = -INFINITY, z = 0.0f;
  for (int j = lane; j <= t; j += kWarp) {  // one exp per element: rescale z only when the max moves
    const float x = a[j];
    if (x > mx) {
      z = z * expf(mx - x) + 1.0f;  // first element: 0 * exp(-inf) + 1
      mx = x;
    } else {
      z += expf(x - mx);
    }
  }
  for (int off = kWarp / 2; off > 0; off /= 2) {
    const float omx = __shfl_xor_sync(0xffffffffu, mx, off), oz = __shfl_xor_sync(0xffffffffu, z, off);
    merge(mx, z, omx, oz);
  }
  const float inv = 1.0f / z;  // z >= 1: the row max contributes exp(0)
  for (int j = lane; j < T; j += kWarp) a[j] = j <= t ? expf(a[j] - mx) * inv : 0.0f;
}

// Softmax backward in place over dp (rows, T): dS = P (dP - sum_j P_j dP_j) * scale, zeros above
// the diagonal (scale folds the 1/sqrt(HS) of the scores into dS).
__global__ void causal_softmax_backward_kernel(float* dp, const float* att, size_t rows, int T, float scale) {
  const size_t row = blockIdx.x * size_t(kRowsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = int(row % T);
  const float* p = att + row * T;
  float* d = dp + row * T;
  float D = 0.0f;
  for (int j = lane; j <= t; j += kWarp) D += p[j] * d[j];
  D = warp_sum(D);
  for (int j = lane; j < T; j += kWarp) d[j] = j <= t ? p[j] * (d[j] - D) * scale : 0.0f;
}

// The GEMM batch over (b, kh) with head-major q (B,NH,T,HS), k and v (B,KVH,T,HS), scores (B,NH,T,T):
// per batch entry, R = (NH/KVH)*T query rows; strides between entries, in elements.
int group_rows(const QkvLayout& s) { return s.group() * s.T; }
long long q_stride(const QkvLayout& s) { return (long long)group_rows(s) * s.HS; }
long long kv_stride(const QkvLayout& s) { return (long long)s.T * s.HS; }
long long att_stride(const QkvLayout& s) { return (long long)group_rows(s) * s.T; }
int gemm_batch(const QkvLayout& s) { return s.B * s.KVH; }

// permute: `rows` is read-only when mode is Copy::to_heads (the only caller passing a const source).
void permute(const OpContext& ctx, float* heads, const float* rows, const QkvLayout& s, int H, int W, int head0,
             Copy mode) {
  const size_t count = size_t(s.B) * s.T * H * s.HS;
  permute_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(heads, const_cast<float*>(rows), s.B,
                                                                           s.T, H, s.HS, W, head0, mode);
  XT_CUDA_LAUNCH_CHECK();
}

// qkv rows -> head-major [q (B,NH,T,HS) | k (B,KVH,T,HS) | v (B,KVH,T,HS)] in one buffer.
void split_qkv(const OpContext& ctx, float* qkvp, const float* qkv, const QkvLayout& s) {
  permute(ctx, qkvp, qkv, s, s.NH, s.row(), 0, Copy::to_heads);  // head offsets: QkvLayout::q_col etc.
  permute(ctx, qkvp + s.q_count(), qkv, s, s.KVH, s.row(), s.NH, Copy::to_heads);
  permute(ctx, qkvp + s.q_count() + s.kv_count(), qkv, s, s.KVH, s.row(), s.NH + s.KVH, Copy::to_heads);
}

unsigned softmax_blocks(size_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// The GEMM route on fp32 activations (with bf16 activations, attention_forward/backward convert).
void gemm_attention_forward(const OpContext& ctx, float* out, float* att, const float* qkv, const QkvLayout& s) {
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS;
  const float scale = float(1.0 / std::sqrt(double(HS)));  // Vaswani et al. 2017, eq. 1
  ScratchBuffer<float> qkvp(*ctx.alloc, s.qkv_count(), "attention GEMM route"), outp(*ctx.alloc, s.q_count(), "attention GEMM route");
  split_qkv(ctx, qkvp.get(), qkv, s);
  const float *q = qkvp.get(), *k = q + s.q_count(), *v = k + s.kv_count();
  // scores (R,T) = scale * q (R,HS) k^T, per (b, kh)
  gemm(ctx, false, true, group_rows(s), T, HS, scale, q, HS, q_stride(s), k, HS, kv_stride(s), 0.0f, att, T,
       att_stride(s), gemm_batch(s));
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_kernel<<<softmax_blocks(rows), kThreads, 0, ctx.stream>>>(att, rows, T);
  XT_CUDA_LAUNCH_CHECK();
  // out (R,HS) = P (R,T) v (T,HS)
  gemm(ctx, false, false, group_rows(s), HS, T, 1.0f, att, T, att_stride(s), v, HS, kv_stride(s), 0.0f, outp.get(),
       HS, q_stride(s), gemm_batch(s));
  permute(ctx, outp.get(), out, s, NH, NH * HS, 0, Copy::to_rows);
}

void gemm_attention_backward(const OpContext& ctx, float* dqkv, const float* dout, const float* qkv, const float* att,
                             const QkvLayout& s, bool accumulate) {
  const int B = s.B, T = s.T, NH = s.NH, KVH = s.KVH, HS = s.HS;
  const float scale = float(1.0 / std::sqrt(double(HS)));
  const size_t qkv_count = s.qkv_count();
  ScratchBuffer<float> qkvp(*ctx.alloc, qkv_count, "attention GEMM route"), dqkvp(*ctx.alloc, qkv_count, "attention GEMM route"), doutp(*ctx.alloc, s.q_count(), "attention GEMM route"),
      dp(*ctx.alloc, size_t(B) * NH * T * T, "attention GEMM route");
  split_qkv(ctx, qkvp.get(), qkv, s);
  permute(ctx, doutp.get(), dout, s, NH, NH * HS, 0, Copy::to_heads);
  const float *q = qkvp.get(), *k = q + s.q_count(), *v = k + s.kv_count();
  float *dq = dqkvp.get(), *dk = dq + s.q_count(), *dv = dk + s.kv_count();
  const int R = group_rows(s), batch = gemm_batch(s);
  const long long sq = q_stride(s), skv = kv_stride(s), sa = att_stride(s);
  // dv (T,HS) = P^T (T,R) dout (R,HS): sums over the group's heads and the query positions
  gemm(ctx, true, false, T, HS, R, 1.0f, att, T, sa, doutp.get(), HS, sq, 0.0f, dv, HS, skv, batch);
  // dP (R,T) = dout (R,HS) v^T, then dS in place
  gemm(ctx, false, true, R, T, HS, 1.0f, doutp.get(), HS, sq, v, HS, skv, 0.0f, dp.get(), T, sa, batch);
  const size_t rows = size_t(B) * NH * T;
  causal_softmax_backward_kernel<<<softmax_blocks(rows), kThreads, 0, ctx.stream>>>(dp.get(), att, rows, T, scale);
  XT_CUDA_LAUNCH_CHECK();
  // dq (R,HS) = dS (R,T) k (T,HS);  dk (T,HS) = dS^T (T,R) q (R,HS)
  gemm(ctx, false, false, R, HS, T, 1.0f, dp.get(), T, sa, k, HS, skv, 0.0f, dq, HS, sq, batch);
  gemm(ctx, true, false, T, HS, R, 1.0f, dp.get(), T, sa, q, HS, sq, 0.0f, dk, HS, skv, batch);
  // dqkv += (Grad::accumulate) or = (Grad::assign); q, k, v parts together cover every element once
  const int W = s.row();
  const Copy mode = accumulate ? Copy::add_to_rows : Copy::to_rows;
  permute(ctx, dq, dqkv, s, NH, W, 0, mode);
  permute(ctx, dk, dqkv, s, KVH, W, NH, mode);
  permute(ctx, dv, dqkv, s, KVH, W, NH + KVH, mode);
}

}  // namespace

Attention attention_route(const OpContext& ctx, int T, int HS) {
  if (ctx.attention == Attention::cudnn && cudnn_attention_supported(ctx.bf16, T, HS)) return Attention::cudnn;
  if (ctx.attention != Attention::gemm && flash_attention_supported(T, HS)) return Attention::flash;
  return Attention::gemm;
}

size_t attention_scratch_count(const OpContext& ctx, int B, int T, int NH, int KVH, int HS) {
  const size_t flash = size_t(B) * NH * T * (size_t(HS) + 1);  // flash_attention.h
  switch (attention_route(ctx, T, HS)) {
    case Attention::cudnn:  // another route's room only where a non-strict cuDNN route falls back to it (route_for)
      if (ctx.cudnn->strict() || ctx.cudnn->usable(qkv_layout(B, T, NH, KVH, HS)))
        return cudnn_attention_scratch_count(B, NH, T, HS);
      if (flash_attention_supported(T, HS)) return flash;
      return ctx.cudnn->unavailable() ? size_t(B) * NH * T * T : cudnn_attention_scratch_count(B, NH, T, HS);
    case Attention::flash: return flash;
    default: return size_t(B) * NH * T * T;
  }
}

namespace {
// route_for: attention_route, with the cuDNN route's run-time check of shape s (CudnnAttention::usable): a
// shape cuDNN refuses takes the flash kernels; where cuDNN cannot be initialized at all (its handle is made at
// first use), every shape takes the route --attention flash gives it (flash, else the GEMM route).
Attention route_for(const OpContext& ctx, const QkvLayout& s) {
  const Attention route = attention_route(ctx, s.T, s.HS);
  if (route != Attention::cudnn || ctx.cudnn->usable(s)) return route;
  if (ctx.cudnn->unavailable() && !flash_attention_supported(s.T, s.HS)) return Attention::gemm;
  XT_CHECK(flash_attention_supported(s.T, s.HS), "cuDNN attention unavailable for T=" << s.T << " HS=" << s.HS
                                                    << " and the flash kernels do not take the shape");
  return Attention::flash;
}
}  // namespace

void attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, int B, int T, int NH,
                       int KVH, int HS) {
  const QkvLayout s = qkv_layout(B, T, NH, KVH, HS);
  if (B == 0 || T == 0) return;
  const Attention route = route_for(ctx, s);
  if (route == Attention::cudnn) return cudnn_attention_forward(ctx, out, att, qkv, s);
  if (route == Attention::flash) return flash_attention_forward(ctx, out, att, qkv, s);
  if (!ctx.bf16) return gemm_attention_forward(ctx, static_cast<float*>(out), att, static_cast<const float*>(qkv), s);
  // bf16 activations on the GEMM route (shapes the flash kernels do not take, or
  // --attention gemm): through fp32 copies, the products still bf16 via ctx.gemm_compute.
  const size_t qkv_count = s.qkv_count();
  ScratchBuffer<float> qkv32(*ctx.alloc, qkv_count, "attention GEMM route"), out32(*ctx.alloc, s.q_count(), "attention GEMM route");
  to_f32(ctx, qkv32.get(), static_cast<const __nv_bfloat16*>(qkv), qkv_count);
  gemm_attention_forward(ctx, out32.get(), att, qkv32.get(), s);
  from_f32(ctx, static_cast<__nv_bfloat16*>(out), out32.get(), s.q_count(), false);
}

void attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                        const float* att, int B, int T, int NH, int KVH, int HS, bool accumulate) {
  const QkvLayout s = qkv_layout(B, T, NH, KVH, HS);
  if (B == 0 || T == 0) return;
  const Attention route = route_for(ctx, s);
  if (route == Attention::cudnn) return cudnn_attention_backward(ctx, dqkv, dout, qkv, out, att, s, accumulate);
  if (route == Attention::flash) return flash_attention_backward(ctx, dqkv, dout, qkv, att, s, accumulate);
  if (!ctx.bf16)
    return gemm_attention_backward(ctx, static_cast<float*>(dqkv), static_cast<const float*>(dout),
                                   static_cast<const float*>(qkv), att, s, accumulate);
  const size_t qkv_count = s.qkv_count();
  ScratchBuffer<float> qkv32(*ctx.alloc, qkv_count, "attention GEMM route"), dqkv32(*ctx.alloc, qkv_count, "attention GEMM route"), dout32(*ctx.alloc, s.q_count(), "attention GEMM route");
  to_f32(ctx, qkv32.get(), static_cast<const __nv_bfloat16*>(qkv), qkv_count);
  to_f32(ctx, dout32.get(), static_cast<const __nv_bfloat16*>(dout), s.q_count());
  gemm_attention_backward(ctx, dqkv32.get(), dout32.get(), qkv32.get(), att, s, /*accumulate=*/false);
  from_f32(ctx, static_cast<__nv_bfloat16*>(dqkv), dqkv32.get(), qkv_count, accumulate);  // dqkv += or =
}

}  // namespace xtrain::cuda
