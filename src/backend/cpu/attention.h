// CPU reference causal grouped-query attention (included by ops.h). Plain loops over (b, t, h) with
// scores, softmax and dot products accumulated in double; the clarity of an oracle, not a fast kernel.
// Layout and offsets: QkvLayout (src/backend/qkv_layout.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/cpu/exp_table.h"
#include <xtrain/backend/qkv_layout.h>

namespace xtrain::cpu {

namespace detail {
// att_row: offset of row t of attention probabilities (B,NH,T,T) for batch b, query head h.
inline size_t att_row(const QkvLayout& L, int b, int h, int t) { return ((size_t(b) * L.NH + h) * L.T + t) * L.T; }
// causal_softmax_row: p[t2] = exp(q . key(t2) * scale - max) for t2 in [0, t], accumulated in double, exp by
// exp_table (exp_table.h: vec_ops' attention takes the same exponentials a vector at a time);
// returns their sum z (so the probabilities are p / z). key(t2) gives the key vector of position t2.
// The one score + softmax of the CPU oracle, shared by attention_forward and attention_decode.
template <typename Real, typename KeyAt>
double causal_softmax_row(double* p, const Real* q, KeyAt key, int t, int HS, double scale) {
  double mx = -INFINITY;
  for (int t2 = 0; t2 <= t; ++t2) {
    const Real* k = key(t2);
    double s = 0.0;
    for (int i = 0; i < HS; ++i) s += double(q[i]) * k[i];
    p[t2] = s * scale;
    mx = std::fmax(mx, p[t2]);
  }
  double z = 0.0;  // softmax shifted by the row max: no overflow
  for (int t2 = 0; t2 <= t; ++t2) z += (p[t2] = exp_table(p[t2] - mx));
  return z;
}
}  // namespace detail

// attention_forward: qkv (B,T,(NH+2*KVH)*HS) -> out (B,T,NH*HS), att (B,NH,T,T)
//   att[b,h,t,:] = softmax_{t2<=t}(q_t . k_t2 / sqrt(HS)), 0 for t2 > t; out_t = sum_t2 att[t2] v_t2.
// Scale 1/sqrt(HS): Vaswani et al. 2017, eq. 1. Throws Error when NH is not a multiple of KVH.
template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int NH, int KVH, int HS) {
  const QkvLayout L = qkv_layout(B, T, NH, KVH, HS);
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> p(size_t(T) + 1), acc(HS);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const int kh = L.kv_head(h);
        const Real* q = qkv + L.q(b, t, h);
        const double z =
            detail::causal_softmax_row(p.data(), q, [&](int t2) { return qkv + L.k(b, t2, kh); }, t, HS, scale);
        Real* a = att + detail::att_row(L, b, h, t);
        for (int t2 = 0; t2 < T; ++t2) a[t2] = t2 <= t ? Real(p[t2] /= z) : Real(0);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int t2 = 0; t2 <= t; ++t2) {
          const Real* v = qkv + L.v(b, t2, kh);
          for (int i = 0; i < HS; ++i) acc[i] += p[t2] * v[i];
        }
        Real* o = out + L.out(b, t, h);
        for (int i = 0; i < HS; ++i) o[i] = Real(acc[i]);
      }
}

// attention_backward: dout (B,T,NH*HS), qkv, att (from attention_forward) -> dqkv (B,T,(NH+2*KVH)*HS) +=
// Per (b, h, t), with s = q.k/sqrt(HS) and P = att row:
//   dv_t2 += P_t2 dout_t;  dP_t2 = dout_t . v_t2;  dS_t2 = P_t2 (dP_t2 - sum_j P_j dP_j)  (softmax);
//   dq_t += dS_t2 k_t2 / sqrt(HS);  dk_t2 += dS_t2 q_t / sqrt(HS).
// A kv head shared by several query heads receives the sum of their gradients.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T, int NH,
                        int KVH, int HS) {
  const QkvLayout L = qkv_layout(B, T, NH, KVH, HS);
  const double scale = 1.0 / std::sqrt(double(HS));
  std::vector<double> dp(size_t(T) + 1), dq(HS);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const int kh = L.kv_head(h);
        const Real* q = qkv + L.q(b, t, h);
        const Real* a = att + detail::att_row(L, b, h, t);
        const Real* dy = dout + L.out(b, t, h);
        double dot = 0.0;  // sum_j P_j dP_j
        for (int t2 = 0; t2 <= t; ++t2) {
          const Real* v = qkv + L.v(b, t2, kh);
          Real* dv = dqkv + L.v(b, t2, kh);
          double s = 0.0;
          for (int i = 0; i < HS; ++i) {
            s += double(dy[i]) * v[i];
            dv[i] += Real(double(a[t2]) * dy[i]);
          }
          dp[t2] = s;
          dot += double(a[t2]) * s;
        }
        std::fill(dq.begin(), dq.end(), 0.0);
        for (int t2 = 0; t2 <= t; ++t2) {
          const double ds = double(a[t2]) * (dp[t2] - dot) * scale;
          const Real* k = qkv + L.k(b, t2, kh);
          Real* dk = dqkv + L.k(b, t2, kh);
          for (int i = 0; i < HS; ++i) {
            dq[i] += ds * k[i];
            dk[i] += Real(ds * q[i]);
          }
        }
        Real* dqo = dqkv + L.q(b, t, h);
        for (int i = 0; i < HS; ++i) dqo[i] += Real(dq[i]);
      }
}

}  // namespace xtrain::cpu
