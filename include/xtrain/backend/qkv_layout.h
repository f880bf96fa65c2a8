// QkvLayout: the one description of an attention batch's shape and of where q, k and v sit in the
// fused qkv activation, for host code (the CPU oracle, the model, the tests) and CUDA kernels alike.
// Layout (backend.h): qkv (B,T,(NH+2*KVH)*HS), each position's row is [NH q heads | KVH k heads |
// KVH v heads] of HS channels; the attention output is (B,T,NH*HS). Grouped-query attention (Ainslie
// et al. 2023): NH/KVH consecutive query heads share one key/value head.
#pragma once

#include <cstddef>

#include <xtrain/core/error.h>

#if defined(__CUDACC__)
#define XT_HOST_DEVICE __host__ __device__
#else
#define XT_HOST_DEVICE
#endif

namespace xtrain {

struct QkvLayout {
  int B, T, NH, KVH, HS;

  // row_width: elements per position of qkv, (NH + 2*KVH) * HS (also GPTConfig::qkv_width).
  XT_HOST_DEVICE static constexpr int row_width(int NH, int KVH, int HS) { return (NH + 2 * KVH) * HS; }
  XT_HOST_DEVICE int row() const { return row_width(NH, KVH, HS); }
  XT_HOST_DEVICE int out_row() const { return NH * HS; }  // elements per position of the output
  XT_HOST_DEVICE int group() const { return NH / KVH; }   // query heads per kv head
  XT_HOST_DEVICE int kv_head(int h) const { return h / (NH / KVH); }  // the kv head query head h reads
  // Column offsets within a qkv row (elements): query head h, key / value head kh.
  XT_HOST_DEVICE int q_col(int h) const { return h * HS; }
  XT_HOST_DEVICE int k_col(int kh) const { return (NH + kh) * HS; }
  XT_HOST_DEVICE int v_col(int kh) const { return (NH + KVH + kh) * HS; }
  // Element offsets for batch b, position t: into qkv (q, k, v) and into the output (out).
  XT_HOST_DEVICE size_t pos(int b, int t) const { return size_t(b) * T + t; }
  XT_HOST_DEVICE size_t q(int b, int t, int h) const { return pos(b, t) * row() + size_t(q_col(h)); }
  XT_HOST_DEVICE size_t k(int b, int t, int kh) const { return pos(b, t) * row() + size_t(k_col(kh)); }
  XT_HOST_DEVICE size_t v(int b, int t, int kh) const { return pos(b, t) * row() + size_t(v_col(kh)); }
  XT_HOST_DEVICE size_t out(int b, int t, int h) const { return pos(b, t) * out_row() + size_t(q_col(h)); }
  // Element counts: qkv (B,T,row), the output (B,T,NH*HS) = all q heads, the k (or v) heads alone.
  XT_HOST_DEVICE size_t qkv_count() const { return size_t(B) * T * row(); }
  XT_HOST_DEVICE size_t q_count() const { return size_t(B) * T * out_row(); }
  XT_HOST_DEVICE size_t kv_count() const { return size_t(B) * T * KVH * HS; }
};

// qkv_layout: the checked layout; throws Error for negative sizes, HS <= 0, or NH not a positive
// multiple of KVH.
inline QkvLayout qkv_layout(int B, int T, int NH, int KVH, int HS) {
  XT_CHECK(B >= 0 && T >= 0 && HS > 0, "bad attention shape B=" << B << " T=" << T << " HS=" << HS);
  XT_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
           "query heads NH=" << NH << " must be a positive multiple of kv heads KVH=" << KVH);
  return QkvLayout{B, T, NH, KVH, HS};
}

}  // namespace xtrain
