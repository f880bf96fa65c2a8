// CPU reference of attention against a key/value cache (inference; contract in src/backend/backend.h,
// Backend::attention_decode). Same arithmetic as attention_forward in attention.h (one score + softmax,
// detail::causal_softmax_row; weighted sum in double), so prefill through the cache gives the training forward's attention output.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/attention.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/core/error.h>

namespace xtrain::cpu {

// check_decode_shape: the preconditions of Backend::attention_decode; throws Error naming the bad value.
inline void check_decode_shape(int B, int Tn, int pos, int maxT, int NH, int KVH, int HS) {
  XT_CHECK(B >= 0 && HS > 0, "bad attention_decode shape B=" << B << " HS=" << HS);
  XT_CHECK(NH > 0 && KVH > 0 && NH % KVH == 0,
           "query heads NH=" << NH << " must be a positive multiple of kv heads KVH=" << KVH);
  XT_CHECK(pos >= 0 && Tn >= 1 && Tn <= maxT && pos <= maxT - Tn,  // not pos + Tn <= maxT: no int overflow
           "attention_decode: positions [" << pos << ", " << int64_t(pos) + Tn << ") do not fit the cache of " << maxT);
}

// attention_decode: qkv (B,Tn,(NH+2*KVH)*HS) -> kcache, vcache (B,maxT,KVH*HS) rows [pos, pos+Tn) written,
// out (B,Tn,NH*HS); query head h reads kv head h / (NH/KVH) (Ainslie et al. 2023), scale 1/sqrt(HS)
// (Vaswani et al. 2017, eq. 1).
template <typename Real>
void attention_decode(Real* out, Real* kcache, Real* vcache, const Real* qkv, int B, int Tn, int pos, int maxT,
                      int NH, int KVH, int HS) {
  check_decode_shape(B, Tn, pos, maxT, NH, KVH, HS);
  const QkvLayout L = qkv_layout(B, Tn, NH, KVH, HS);  // the Tn new positions
  const size_t kv_row = size_t(KVH) * HS;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tn; ++i) {
      const size_t dst = (size_t(b) * maxT + pos + i) * kv_row;
      std::memcpy(kcache + dst, qkv + L.k(b, i, 0), kv_row * sizeof(Real));
      std::memcpy(vcache + dst, qkv + L.v(b, i, 0), kv_row * sizeof(Real));
    }
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> p(size_t(pos) + Tn), acc(HS);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tn; ++i)
      for (int h = 0; h < NH; ++h) {
        const int t = pos + i, kh = L.kv_head(h);
        const Real* q = qkv + L.q(b, i, h);
        const Real* kb = kcache + size_t(b) * maxT * kv_row + size_t(kh) * HS;
        const Real* vb = vcache + size_t(b) * maxT * kv_row + size_t(kh) * HS;
        const double z =
            detail::causal_softmax_row(p.data(), q, [&](int t2) { return kb + size_t(t2) * kv_row; }, t, HS, scale);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t2 = 0; t2 <= t; ++t2) {
          const double w = p[t2] / z;
          const Real* v = vb + size_t(t2) * kv_row;
          for (int j = 0; j < HS; ++j) acc[j] += w * v[j];
        }
        Real* o = out + L.out(b, i, h);
        for (int j = 0; j < HS; ++j) o[j] = Real(acc[j]);
      }
}

}  // namespace xtrain::cpu
