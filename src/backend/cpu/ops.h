// CPU reference ops: every Backend op as a function template over Real (float for training, double for
// the finite-difference tests). This is the test oracle for every other backend, so it is written to
// be obviously correct: plain loops, reductions accumulated in double, GEMMs through CBLAS.
// Contracts (shapes, accumulation) are those of src/backend/backend.h; attention is in attention.h.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>

namespace xtrain::cpu {

// gemm: row-major C (M,N) = alpha op(A) op(B) + beta C; op(A) (M,K), op(B) (K,N). One overload per
// precision so the op templates stay generic (cblas_sgemm / cblas_dgemm, OpenBLAS CBLAS interface).
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
                 int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha, const double* A,
                 int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// encoder_forward: tokens (B,T) int32, wte (V,C), wpe (maxT,C) -> out (B,T,C) = wte[tok] + wpe[t];
// wpe null (no learned positions, the Llama family): out = wte[tok]
template <typename Real>
void encoder_forward(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe, int B, int T,
                     int C) {
  for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
    XT_CHECK(tokens[bt] >= 0, "negative token id " << tokens[bt]);
    const Real* e = wte + size_t(tokens[bt]) * C;
    Real* o = out + bt * C;
    if (!wpe) {
      for (int c = 0; c < C; ++c) o[c] = e[c];
      continue;
    }
    const Real* p = wpe + (bt % T) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

// encoder_backward: dout (B,T,C) -> dwte (V,C) +=, dwpe (maxT,C) += (dwpe null: no learned positions)
template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens, int B, int T, int C) {
  for (size_t bt = 0; bt < size_t(B) * T; ++bt) {
    XT_CHECK(tokens[bt] >= 0, "negative token id " << tokens[bt]);
    Real* de = dwte + size_t(tokens[bt]) * C;
    const Real* d = dout + bt * C;
    if (!dwpe) {
      for (int c = 0; c < C; ++c) de[c] += d[c];
      continue;
    }
    Real* dp = dwpe + (bt % T) * C;
    for (int c = 0; c < C; ++c) {
      de[c] += d[c];
      dp[c] += d[c];
    }
  }
}

// layernorm eps: 1e-5 (Ba et al. 2016; GPT-2 / PyTorch nn.LayerNorm default).
constexpr double kLayerNormEps = 1e-5;

// layernorm_forward: inp (N,C), w,b (C) -> out (N,C), mean,rstd (N)
// out = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var the biased (1/C) variance.
template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* w, const Real* b,
                       int N, int C) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* x = inp + n * C;
    double mu = 0.0;
    for (int c = 0; c < C; ++c) mu += x[c];
    mu /= C;
    double var = 0.0;  // two-pass variance: no cancellation for large means
    for (int c = 0; c < C; ++c) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    const double rs = 1.0 / std::sqrt(var + kLayerNormEps);
    Real* o = out + n * C;
    for (int c = 0; c < C; ++c) o[c] = Real((x[c] - mu) * rs * w[c] + b[c]);
    mean[n] = Real(mu);
    rstd[n] = Real(rs);
  }
}

// layernorm_backward: dout (N,C) -> dinp (N,C) +=, dw,db (C) +=
// With xhat = (x - mean) rstd and g = dout * w:
//   dinp = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), dw = sum_n dout * xhat, db = sum_n dout.
template <typename Real>
void layernorm_backward(Real* dinp, Real* dw, Real* db, const Real* dout, const Real* inp, const Real* w,
                        const Real* mean, const Real* rstd, int N, int C) {
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* x = inp + n * C;
    const Real* dy = dout + n * C;
    const double mu = mean[n], rs = rstd[n];
    double g_mean = 0.0, gx_mean = 0.0;
    for (int c = 0; c < C; ++c) {
      const double g = double(dy[c]) * w[c];
      g_mean += g;
      gx_mean += g * (x[c] - mu) * rs;
    }
    g_mean /= C;
    gx_mean /= C;
    Real* dx = dinp + n * C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[c] - mu) * rs;
      const double g = double(dy[c]) * w[c];
      db[c] += dy[c];
      dw[c] += Real(dy[c] * xhat);
      dx[c] += Real(rs * (g - g_mean - xhat * gx_mean));
    }
  }
}

// matmul_forward: inp (N,IC), w (OC,IC), bias (OC) or null -> out (N,OC) = inp w^T + bias
template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* w, const Real* bias, int N, int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;
  if (IC == 0) {  // empty sum: BLAS may not touch C when K == 0, so set it explicitly
    for (size_t i = 0; i < size_t(N) * OC; ++i) out[i] = Real(0);
  } else {
    gemm(CblasNoTrans, CblasTrans, N, OC, IC, Real(1), inp, IC, w, IC, Real(0), out, OC);
  }
  if (bias) {
    for (size_t n = 0; n < size_t(N); ++n)
      for (int o = 0; o < OC; ++o) out[n * OC + o] += bias[o];
  }
}

// matmul_backward: dout (N,OC) -> dinp (N,IC) += dout w (= when accumulate_dinp is false: the GEMM's beta 0, the
// same bits as += into zeros), dw (OC,IC) += dout^T inp, dbias (OC) += column sums of dout (dbias may be null; both
// = when accumulate_dw is false: beta 0 again, and the double sum stored instead of added to)
template <typename Real>
void matmul_backward(Real* dinp, Real* dw, Real* dbias, const Real* dout, const Real* inp, const Real* w,
                     int N, int IC, int OC, bool accumulate_dinp = true, bool accumulate_dw = true) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (OC == 0) {  // empty sums: BLAS may not touch C when K == 0
    if (!accumulate_dinp) std::fill(dinp, dinp + size_t(N) * IC, Real(0));
  } else if (N == 0) {  // dw's and dbias's empty sums (K == 0 again)
    if (!accumulate_dw) {
      std::fill(dw, dw + size_t(OC) * IC, Real(0));
      if (dbias) std::fill(dbias, dbias + OC, Real(0));
    }
  } else if (IC > 0) {
    gemm(CblasNoTrans, CblasNoTrans, N, IC, OC, Real(1), dout, OC, w, IC, Real(accumulate_dinp ? 1 : 0), dinp, IC);
    gemm(CblasTrans, CblasNoTrans, OC, IC, N, Real(1), dout, OC, inp, IC, Real(accumulate_dw ? 1 : 0), dw, IC);
  }
  if (dbias && N > 0 && OC > 0) {
    std::vector<double> s(size_t(OC), 0.0);  // row by row: each column summed over n in order, rows read once
    for (size_t n = 0; n < size_t(N); ++n)
      for (int o = 0; o < OC; ++o) s[o] += dout[n * OC + o];
    for (int o = 0; o < OC; ++o) dbias[o] = accumulate_dw ? dbias[o] + Real(s[o]) : Real(s[o]);
  }
}

// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2; as in GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi).
constexpr double kGeluK = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluA = 0.044715;

// gelu_forward: inp (count) -> out (count)
template <typename Real>
void gelu_forward(Real* out, const Real* inp, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const double x = inp[i];
    out[i] = Real(0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluA * x * x * x))));
  }
}

// gelu_backward: inp, dout (count) -> dinp (count) += gelu'(inp) * dout
//   gelu'(x) = 0.5 (1 + th) + 0.5 x (1 - th^2) k (1 + 3 a x^2), th = tanh(k (x + a x^3)).
template <typename Real>
void gelu_backward(Real* dinp, const Real* inp, const Real* dout, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const double x = inp[i];
    const double th = std::tanh(kGeluK * (x + kGeluA * x * x * x));
    const double d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluK * (1.0 + 3.0 * kGeluA * x * x);
    dinp[i] += Real(d * dout[i]);
  }
}

// residual_forward: a, b (count) -> out (count) = a + b (out may alias a or b)
template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

// add_inplace: dst (count) += src (count)
template <typename Real>
void add_inplace(Real* dst, const Real* src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

// dropout_apply: x (B, per_seq) *= keep / (1 - p), keep = uniform01(seq_keys[b], j) >= p with j the
// element index within sequence b; seq_keys (B) host memory; p in [0, 1). Same call for forward and
// backward (the mask is recomputed from the keys). Throws Error for p outside [0, 1).
template <typename Real>
void dropout_apply(Real* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) {
  XT_CHECK(p >= 0.0f && p < 1.0f, "dropout probability " << p << " not in [0, 1)");
  if (p == 0.0f) return;  // uniform01 >= 0 always: every element kept with scale 1
  const Real scale = Real(1) / (Real(1) - Real(p));
  for (int b = 0; b < B; ++b) {
    Real* xb = x + size_t(b) * per_seq;
    for (size_t j = 0; j < per_seq; ++j) xb[j] *= (uniform01(seq_keys[b], j) >= p) ? scale : Real(0);
  }
}

// cross_entropy_forward_backward: logits (N,Vp), targets (N) -> losses (N) = -log softmax(logits[:, :V])[target];
// if dlogits (N,Vp) is non-null: dlogits[:, :V] = (softmax - onehot(target)) * dloss and dlogits[:, V:] = 0
// (padded vocabulary columns, Vp >= V, take no part). dlogits may alias logits.
// Softmax is shifted by the row max (no overflow). Throws Error (before writing anything) when a
// target is outside [0, V) or Vp < V.
template <typename Real>
void cross_entropy_forward_backward(Real* losses, Real* dlogits, const Real* logits, const int32_t* targets,
                                    double dloss, int N, int V, int Vp) {
  XT_CHECK(N >= 0 && V > 0 && Vp >= V, "bad cross entropy shape N=" << N << " V=" << V << " Vp=" << Vp);
  for (size_t n = 0; n < size_t(N); ++n)
    XT_CHECK(targets[n] >= 0 && targets[n] < V,
            "target " << targets[n] << " at row " << n << " outside vocabulary [0, " << V << ")");
  for (size_t n = 0; n < size_t(N); ++n) {
    const Real* l = logits + n * Vp;
    double mx = l[0];
    for (int i = 1; i < V; ++i) mx = std::fmax(mx, double(l[i]));
    double s = 0.0;
    for (int i = 0; i < V; ++i) s += std::exp(l[i] - mx);
    const double log_s = std::log(s);
    losses[n] = Real(log_s + mx - l[targets[n]]);
    if (dlogits) {
      Real* d = dlogits + n * Vp;  // may be l: each element is read before it is overwritten
      for (int i = 0; i < V; ++i) {
        const double prob = std::exp(l[i] - mx - log_s);
        d[i] = Real((prob - (i == targets[n] ? 1.0 : 0.0)) * dloss);
      }
      for (int i = V; i < Vp; ++i) d[i] = Real(0);
    }
  }
}

// sum / sum_squares: x (count) -> sum of x / sum of x^2, accumulated in double.
template <typename Real>
double sum(const Real* x, size_t count) {
  double s = 0.0;
  for (size_t i = 0; i < count; ++i) s += x[i];
  return s;
}
// sum_squares takes 8 partial sums, x[i]^2 into sum i % 8, added in order at the end: vec_ops' kernel, the same
// bits with one vector of partial sums (one running sum waits on the add before it: 3.6x slower over the default
// model's gradients).
constexpr int kSquareSums = 8;
template <typename Real>
double sum_squares(const Real* x, size_t count) {
  double part[kSquareSums] = {};
  for (size_t i = 0; i < count; ++i) part[i % kSquareSums] += double(x[i]) * x[i];
  double s = 0.0;
  for (const double p : part) s += p;
  return s;
}

// adamw_update: param, grad, m, v (count); AdamW (Loshchilov & Hutter 2019, Alg. 2) with bias
// correction at step t >= 1, decoupled weight decay scaled by lr (as in PyTorch AdamW):
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   param -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + weight_decay * param )
// Computed in double, stored in Real; the bias corrections as products with their reciprocals 1/(1-b^t) (a
// vector division costs as much as the rest of the update: vec_ops' AdamW, the same arithmetic, 1.7x faster).
// Throws Error for t < 1.
template <typename Real>
void adamw_update(Real* param, const Real* grad, Real* m, Real* v, size_t count, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double grad_scale, int t) {
  XT_CHECK(t >= 1, "AdamW step " << t << " must be >= 1");
  const double rbc1 = 1.0 / (1.0 - std::pow(beta1, t)), rbc2 = 1.0 / (1.0 - std::pow(beta2, t));
  for (size_t i = 0; i < count; ++i) {
    const double g = double(grad[i]) * grad_scale;
    const double mi = beta1 * m[i] + (1.0 - beta1) * g;
    const double vi = beta2 * v[i] + (1.0 - beta2) * g * g;
    m[i] = Real(mi);
    v[i] = Real(vi);
    const double p = param[i];
    param[i] = Real(p - lr * ((mi * rbc1) / (std::sqrt(vi * rbc2) + eps) + weight_decay * p));
  }
}

// lerp: torch.lerp's arithmetic (ATen's lerp, weight < 0.5 from a, else from b), in fp32.
inline float lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w); }

// muon_momentum: Backend::muon_momentum over count elements, fp32 as torch.optim.Muon's step.
inline void muon_momentum(float* buf, float* out, const float* grad, size_t count, float momentum, bool nesterov,
                          float grad_scale) {
  const float w = 1.0f - momentum;
  for (size_t i = 0; i < count; ++i) {
    const float g = grad[i] * grad_scale;
    buf[i] = lerp(buf[i], g, w);
    out[i] = nesterov ? lerp(g, buf[i], momentum) : buf[i];
  }
}

// newton_schulz: Backend::newton_schulz of one matrix x (rows, cols) in place, fp32 (OpenBLAS GEMMs).
// work: at least 2 r c + 2 r r floats, r = min(rows, cols), c = max(rows, cols).
inline void newton_schulz(float* x, int rows, int cols, int steps, float eps, float* work) {
  const bool tall = rows > cols;
  const int r = tall ? cols : rows, c = tall ? rows : cols;
  const size_t rc = size_t(r) * c;
  float* X = work;            // (r, c)
  float* Xn = X + rc;         // (r, c)
  float* A = Xn + rc;         // (r, r) X X^T
  float* Bm = A + size_t(r) * r;  // (r, r) b A + c A A
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) (tall ? X[size_t(j) * c + i] : X[size_t(i) * c + j]) = x[size_t(i) * cols + j];
  double ss = 0;
  for (size_t i = 0; i < rc; ++i) ss += double(X[i]) * X[i];
  const float norm = std::max(static_cast<float>(std::sqrt(ss)), eps);
  for (size_t i = 0; i < rc; ++i) X[i] /= norm;
  const float ca = kMuonNsCoefficients[0], cb = kMuonNsCoefficients[1], cc = kMuonNsCoefficients[2];
  for (int k = 0; k < steps; ++k) {
    gemm(CblasNoTrans, CblasTrans, r, r, c, 1.0f, X, c, X, c, 0.0f, A, r);
    std::copy(A, A + size_t(r) * r, Bm);
    gemm(CblasNoTrans, CblasNoTrans, r, r, r, cc, A, r, A, r, cb, Bm, r);
    std::copy(X, X + rc, Xn);
    gemm(CblasNoTrans, CblasNoTrans, r, c, r, 1.0f, Bm, r, X, c, ca, Xn, c);
    std::swap(X, Xn);
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) x[size_t(i) * cols + j] = tall ? X[size_t(j) * c + i] : X[size_t(i) * c + j];
}

// muon_apply: param = param * decay - lr * update (count), fp32 as torch's mul_ then add_(alpha=-lr).
inline void muon_apply(float* param, const float* update, size_t count, float decay, float lr) {
  for (size_t i = 0; i < count; ++i) {
    const float p = param[i] * decay;
    param[i] = p + (-lr) * update[i];
  }
}

}  // namespace xtrain::cpu

#include "attention.h"  // attention_forward / attention_backward
