// CPU reference ops of the Llama family (RMSNorm, rotary position embeddings, SwiGLU), as function
// templates over Real like ops.h (float for training, double for the finite-difference tests): plain
// loops, reductions in double. Contracts are those of src/backend/backend.h.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <xtrain/backend/qkv_layout.h>
#include "backend/rotary.h"
#include <xtrain/core/error.h>

namespace xtrain::cpu {

// rmsnorm_forward: inp (N,C), w (C) -> out (N,C) = x * rstd * w, rstd (N) = 1 / sqrt(mean_c(x^2) + eps)
// (Zhang & Sennrich 2019, arXiv:1910.07467, eq. 4; transformers' LlamaRMSNorm: no mean, no bias).
template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* w, int N, int C, float eps) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* x = inp + n * C;
    double ms = 0.0;
    for (int c = 0; c < C; ++c) ms += double(x[c]) * x[c];
    const double rs = 1.0 / std::sqrt(ms / C + eps);
    Real* o = out + n * C;
    for (int c = 0; c < C; ++c) o[c] = Real(x[c] * rs * w[c]);
    rstd[n] = Real(rs);
  }
}

// rmsnorm_backward: dout (N,C) -> dinp (N,C) +=, dw (C) +=. With xhat = x rstd and g = dout * w:
//   dinp = rstd * (g - xhat * mean_c(g * xhat)), dw = sum_n dout * xhat.
template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dw, const Real* dout, const Real* inp, const Real* w, const Real* rstd, int N,
                      int C) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* x = inp + n * C;
    const Real* dy = dout + n * C;
    const double rs = rstd[n];
    double gx_mean = 0.0;
    for (int c = 0; c < C; ++c) gx_mean += double(dy[c]) * w[c] * x[c] * rs;
    gx_mean /= C;
    Real* dx = dinp + n * C;
    for (int c = 0; c < C; ++c) {
      const double xhat = x[c] * rs;
      dw[c] += Real(dy[c] * xhat);
      dx[c] += Real(rs * (double(dy[c]) * w[c] - xhat * gx_mean));
    }
  }
}

// rotate_heads: rotates the q and k heads of qkv (B,T,(NH+2*KVH)*HS) in place by sign * a(pos + t, i)
// (backend/rotary.h); v untouched. sign +1: the forward; -1: the backward (the rotation's transpose).
template <typename Real>
void rotate_heads(Real* qkv, int B, int T, int pos, int NH, int KVH, int HS, float theta, int sign) {
  XT_CHECK(HS % 2 == 0, "rotary embeddings need an even head size (HS=" << HS << ")");
  const QkvLayout s = qkv_layout(B, T, NH, KVH, HS);
  const int half = HS / 2;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH + KVH; ++h) {  // the q heads, then the k heads: contiguous in a row
        Real* x = qkv + s.q(b, t, 0) + size_t(h) * HS;
        for (int i = 0; i < half; ++i) {
          const double a = rotary_angle(pos + t, i, HS, theta);
          const double c = std::cos(a), sn = sign * std::sin(a);
          const double x0 = x[i], x1 = x[i + half];
          x[i] = Real(x0 * c - x1 * sn);
          x[i + half] = Real(x1 * c + x0 * sn);
        }
      }
}

// swiglu_forward: inp (N,2F) rows [gate (F) | up (F)] -> out (N,F) = silu(gate) * up, silu(x) = x / (1 + e^-x)
// (Shazeer 2020, "GLU Variants Improve Transformer", arXiv:2002.05202; transformers' LlamaMLP).
template <typename Real>
void swiglu_forward(Real* out, const Real* inp, int N, int F) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* g = inp + n * 2 * F;
    const Real* u = g + F;
    for (int j = 0; j < F; ++j) {
      const double x = g[j];
      out[n * F + j] = Real(x / (1.0 + std::exp(-x)) * u[j]);
    }
  }
}

// swiglu_backward: dout (N,F), inp (N,2F) -> dinp (N,2F) = [dgate | dup] (assigned), with s = sigmoid(gate):
//   dup = dout * gate * s,  dgate = dout * up * s * (1 + gate * (1 - s)).
template <typename Real>
void swiglu_backward(Real* dinp, const Real* dout, const Real* inp, int N, int F) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* g = inp + n * 2 * F;
    const Real* u = g + F;
    Real* dg = dinp + n * 2 * F;
    Real* du = dg + F;
    for (int j = 0; j < F; ++j) {
      const double x = g[j], s = 1.0 / (1.0 + std::exp(-x)), dy = dout[n * F + j];
      du[j] = Real(dy * x * s);
      dg[j] = Real(dy * u[j] * s * (1.0 + x * (1.0 - s)));
    }
  }
}

}  // namespace xtrain::cpu
