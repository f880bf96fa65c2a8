// vec_ops.h's kernels, written with GCC/Clang vector extensions of W doubles: each kernel is a template over W,
// built three times, for AVX-512 (W = 8), AVX2 (W = 4) and the x86-64 baseline (SSE2, W = 2), and the widest the
// CPU runs is used (g_build; use_build for tests). Elements are independent across lanes, except the cross-entropy's
// sum of exponentials, which keeps 8 partial sums at every W, so the width changes no bits. The file is compiled with
// -ffp-contract=off (src/CMakeLists.txt): no a*b+c is fused into one rounding unless written so (fma_lanes, the
// exponential's: one FMA instruction in the wide builds, std::fma in the baseline's), so every build, and the scalar
// tails of a row, give each element the same bits; and with -fno-math-errno, so that a lane's sqrt is one
// instruction (the correctly rounded root all the same).
#include "backend/cpu/vec_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/cpu/exp_table.h"
#include "backend/cpu/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/core/error.h>

// Every helper taking or returning a vector is inlined into its caller, so no vector crosses a call between
// code built for different instruction sets (whose calling conventions for wide vectors differ).
#define XT_LANES_INLINE inline __attribute__((always_inline))

namespace xtrain::cpu::vec {
namespace {

// Lanes<W>: vectors of W doubles, W int64 and W floats (vector_size needs a constant, hence one per W).
template <int W>
struct Lanes;
template <>
struct Lanes<2> {
  using D = double __attribute__((vector_size(16)));
  using I = int64_t __attribute__((vector_size(16)));
  using F = float __attribute__((vector_size(8)));
};
template <>
struct Lanes<4> {
  using D = double __attribute__((vector_size(32)));
  using I = int64_t __attribute__((vector_size(32)));
  using F = float __attribute__((vector_size(16)));
};
template <>
struct Lanes<8> {
  using D = double __attribute__((vector_size(64)));
  using I = int64_t __attribute__((vector_size(64)));
  using F = float __attribute__((vector_size(32)));
};
template <int W>
using D = typename Lanes<W>::D;

constexpr size_t kPad = 8;  // rows of the attention's copies padded to whole vectors of the widest W
size_t round_up(size_t n) { return (n + kPad - 1) / kPad * kPad; }

template <int W>
XT_LANES_INLINE D<W> splat(double x) {
  return D<W>{} + x;
}
// load / store: W floats as doubles and back (rounded to nearest, as a scalar conversion); the counted forms
// touch only the first n < W (the rest of the vector is `fill`).
template <int W>
XT_LANES_INLINE D<W> load(const float* p) {
  typename Lanes<W>::F f;
  std::memcpy(&f, p, sizeof f);
  return __builtin_convertvector(f, D<W>);
}
template <int W>
XT_LANES_INLINE D<W> load(const float* p, size_t n, double fill) {
  D<W> x = splat<W>(fill);
  for (size_t j = 0; j < n; ++j) x[j] = p[j];
  return x;
}
template <int W>
XT_LANES_INLINE D<W> load(const double* p) {
  D<W> x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
template <int W>
XT_LANES_INLINE void store(float* p, D<W> x) {
  const auto f = __builtin_convertvector(x, typename Lanes<W>::F);
  std::memcpy(p, &f, sizeof f);
}
template <int W>
XT_LANES_INLINE void store(float* p, D<W> x, size_t n) {
  for (size_t j = 0; j < n; ++j) p[j] = float(x[j]);
}
template <int W>
XT_LANES_INLINE void store(double* p, D<W> x) {
  std::memcpy(p, &x, sizeof x);
}
// add_rounded: p[j] += float(x[j]) for the first n lanes (a float add of the rounded term, as the reference's
// `dst += Real(term)`).
template <int W>
XT_LANES_INLINE void add_rounded(float* p, D<W> x, size_t n) {
  if (n == W) {
    typename Lanes<W>::F f;
    std::memcpy(&f, p, sizeof f);
    f += __builtin_convertvector(x, typename Lanes<W>::F);
    std::memcpy(p, &f, sizeof f);
    return;
  }
  for (size_t j = 0; j < n; ++j) p[j] += float(x[j]);
}

// fma_lanes: a * b + c in each lane with one rounding (the same bits as std::fma): one instruction in the AVX-512
// and AVX2 builds (which need FMA3), std::fma per lane in the baseline's. The wide ones are plain inline functions
// of their target, inlined into the builds that call them (XT_VEC_BUILDS's flatten), never across targets. GCC
// only: clang refuses a wide vector argument in the untargeted fma_lanes (an ABI error), so a clang build (the
// sanitizer build) takes std::fma per lane everywhere: the same bits, slower.
#if defined(__x86_64__) && !defined(__clang__)
#define XT_FMA_INSTRUCTIONS 1
__attribute__((target("avx512f,fma"))) inline D<8> fma8(D<8> a, D<8> b, D<8> c) {
  return (D<8>)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
}
__attribute__((target("avx2,fma"))) inline D<4> fma4(D<4> a, D<4> b, D<4> c) {
  return (D<4>)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
}
#endif
template <int W>
XT_LANES_INLINE D<W> fma_lanes(D<W> a, D<W> b, D<W> c) {
#if defined(XT_FMA_INSTRUCTIONS)
  if constexpr (W == 8) return fma8(a, b, c);
  if constexpr (W == 4) return fma4(a, b, c);
#endif
  for (int j = 0; j < W; ++j) a[j] = std::fma(a[j], b[j], c[j]);
  return a;
}
template <int W>
XT_LANES_INLINE D<W> fma_lanes(D<W> a, double b, double c) {
  return fma_lanes<W>(a, splat<W>(b), splat<W>(c));
}

// exp2_sixteenths: 2^(j/16) in each lane, j in [0, 16) (exp_table.h's kExp2Sixteenths): for W = 8 one permute
// across the table's two vectors (GCC's __builtin_shuffle; clang, e.g. the sanitizer build, has no shuffle by a
// variable index), else one load per lane (the same values either way).
template <int W>
XT_LANES_INLINE D<W> exp2_sixteenths(typename Lanes<W>::I j) {
#if defined(__GNUC__) && !defined(__clang__)
  if constexpr (W == 8) return __builtin_shuffle(load<8>(kExp2Sixteenths), load<8>(kExp2Sixteenths + 8), j);
#endif
  D<W> x;
  for (int l = 0; l < W; ++l) x[l] = kExp2Sixteenths[j[l]];
  return x;
}

// exp_lanes: exp_table (exp_table.h) in each lane, the same operations in the same order: the same bits, relative
// error below 3 * 2^-53; the float results built on it are the exact values rounded to nearest (test_cpu_vec_ops).
template <int W>
XT_LANES_INLINE D<W> exp_lanes(D<W> x) {
  using I = typename Lanes<W>::I;
  x = x < kExpLo ? splat<W>(kExpLo) : x;
  x = x > kExpHi ? splat<W>(kExpHi) : x;
  const D<W> t = fma_lanes<W>(x, kExpSixteenOverLn2, kExpShifter);
  const D<W> kd = t - kExpShifter;
  const D<W> r = fma_lanes<W>(-kd, splat<W>(kExpLn2LoOver16), fma_lanes<W>(-kd, splat<W>(kExpLn2HiOver16), x));
  D<W> p = splat<W>(kExpTaylor[0]);
  for (int c = 1; c < 8; ++c) p = fma_lanes<W>(p, r, splat<W>(kExpTaylor[c]));
  const I k = (I)t - (I)splat<W>(kExpShifter);
  const I scale = ((k >> 4) + 1023) << 52;
  return p * (exp2_sixteenths<W>(k & 15) * (D<W>)scale);
}

// gelu_y: y = k (x + a x^3), the tanh argument, in the reference's order of operations.
template <int W>
XT_LANES_INLINE D<W> gelu_y(D<W> x) {
  return kGeluK * (x + kGeluA * x * x * x);
}
template <int W>
XT_LANES_INLINE D<W> gelu_lanes(D<W> x) {
  return x / (splat<W>(1.0) + exp_lanes<W>(-2.0 * gelu_y<W>(x)));
}
template <int W>
XT_LANES_INLINE D<W> gelu_grad_lanes(D<W> x) {
  const D<W> e = exp_lanes<W>(-2.0 * gelu_y<W>(x));
  const D<W> s = splat<W>(1.0) / (splat<W>(1.0) + e);  // (1 + tanh y) / 2; e s = 1 - s without the cancellation
  return s + 2.0 * kGeluK * x * s * (e * s) * (splat<W>(1.0) + 3.0 * kGeluA * x * x);
}

template <int W>
XT_LANES_INLINE D<W> sqrt_lanes(D<W> x) {
  for (int j = 0; j < W; ++j) x[j] = std::sqrt(x[j]);
  return x;
}

// row_max: the largest of x[0, n) (NaN ignored, as std::fmax; -inf for none), exact in float (in any order: four
// running maxima, so that consecutive vectors do not wait on one another).
template <int W>
XT_LANES_INLINE float row_max(const float* x, size_t n) {
  using F = typename Lanes<W>::F;
  F m[4] = {F{} - INFINITY, F{} - INFINITY, F{} - INFINITY, F{} - INFINITY};
  size_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int k = 0; k < 4; ++k) {
      F f;
      std::memcpy(&f, x + i + k * W, sizeof f);
      m[k] = f > m[k] ? f : m[k];
    }
  for (; i + W <= n; i += W) {
    F f;
    std::memcpy(&f, x + i, sizeof f);
    m[0] = f > m[0] ? f : m[0];
  }
  float mx = -INFINITY;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < W; ++j) mx = std::fmax(mx, m[k][j]);
  for (; i < n; ++i) mx = std::fmax(mx, x[i]);
  return mx;
}

// ---- the kernels, as templates over W; vec_ops.h's functions below dispatch to their builds ----

template <int W>
XT_LANES_INLINE void cross_entropy_impl(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                        double dloss, int N, int V, int Vp) {
  XT_CHECK(N >= 0 && V > 0 && Vp >= V, "bad cross entropy shape N=" << N << " V=" << V << " Vp=" << Vp);
  for (size_t n = 0; n < size_t(N); ++n)
    XT_CHECK(targets[n] >= 0 && targets[n] < V,
             "target " << targets[n] << " at row " << n << " outside vocabulary [0, " << V << ")");
  constexpr int kSums = 8;  // partial sums of a row's exponentials: element i goes to sum i % 8, whatever W
  const size_t Vs = size_t(V), full = Vs / kSums * kSums;
  std::vector<double> e(Vs);  // a row's exponentials e^(l - max), read again for its probabilities
  for (size_t n = 0; n < size_t(N); ++n) {
    const float* l = logits + n * Vp;
    const double mx = row_max<W>(l, Vs);
    const D<W> shift = splat<W>(mx);
    D<W> acc[kSums / W] = {};
    // the next row's logits are fetched into cache while this row's exponentials keep the core busy (the row
    // max alone would wait on memory): one 64-byte line every 16 logits
    const char* next = n + 1 < size_t(N) ? reinterpret_cast<const char*>(l + Vp) : nullptr;
    for (size_t i = 0; i < full; i += kSums) {
      if (next && i % 16 == 0) __builtin_prefetch(next + i * sizeof(float));
      for (int k = 0; k < kSums / W; ++k) {
        const D<W> x = exp_lanes<W>(load<W>(l + i + k * W) - shift);
        store<W>(e.data() + i + k * W, x);
        acc[k] += x;
      }
    }
    double part[kSums];
    for (int k = 0; k < kSums / W; ++k) store<W>(part + k * W, acc[k]);
    for (size_t i = full; i < Vs; ++i) {  // the last V % 8 elements, one lane each
      e[i] = exp_lanes<W>(splat<W>(double(l[i]) - mx))[0];
      part[i - full] += e[i];
    }
    double s = 0.0;
    for (const double x : part) s += x;
    const int tgt = targets[n];
    losses[n] = float(std::log(s) + mx - l[tgt]);  // l[tgt] read before d (maybe l itself) is written
    if (!dlogits) continue;
    // dlogits = (softmax - onehot) dloss, softmax dloss = e (dloss / s): one product a logit, not a division
    // (a vector division takes as long as the exponential); two roundings in double, 2^-52 relative.
    // d may be l: each element was read before.
    float* d = dlogits + n * Vp;
    const double f = dloss / s;
    const D<W> fv = splat<W>(f);
    size_t i = 0;
    for (; i + W <= Vs; i += W) store<W>(d + i, load<W>(e.data() + i) * fv);
    for (; i < Vs; ++i) d[i] = float(e[i] * f);
    d[tgt] = float((e[tgt] / s - 1.0) * dloss);
    std::fill(d + Vs, d + Vp, 0.0f);
  }
}

template <int W>
XT_LANES_INLINE void gelu_forward_impl(float* out, const float* inp, size_t count) {
  size_t i = 0;
  for (; i + W <= count; i += W) store<W>(out + i, gelu_lanes<W>(load<W>(inp + i)));
  if (i < count) store<W>(out + i, gelu_lanes<W>(load<W>(inp + i, count - i, 0.0)), count - i);
}

template <int W>
XT_LANES_INLINE void gelu_backward_impl(float* dinp, const float* inp, const float* dout, size_t count, bool assign) {
  for (size_t i = 0; i < count; i += W) {
    const size_t n = std::min(size_t(W), count - i);
    const bool whole = n == W;
    const D<W> x = whole ? load<W>(inp + i) : load<W>(inp + i, n, 0.0);
    const D<W> dy = whole ? load<W>(dout + i) : load<W>(dout + i, n, 0.0);
    const D<W> g = gelu_grad_lanes<W>(x) * dy;
    if (!assign)
      add_rounded<W>(dinp + i, g, n);
    else if (whole)
      store<W>(dinp + i, g);
    else
      store<W>(dinp + i, g, n);
  }
}

// position_dots: out[t2] = (sum over i in order of x[i] tr[i][t2]) * post for t2 in [0, n) rounded up to whole
// vectors (tr: HS rows of stride Tp, each padded to whole vectors): the scores q . k and the dP = dout . v of
// one query row. Four vectors of positions at a time: each lane's sum is one chain of dependent adds, and four
// independent chains keep the core busy where one waits on each add (the same operations per lane: the same bits).
template <int W, typename X>
XT_LANES_INLINE void position_dots(double* out, const X* x, const double* tr, size_t Tp, int HS, size_t n,
                                   double post) {
  constexpr int kChains = 4;
  size_t t0 = 0;
  for (; t0 + kChains * W <= n; t0 += kChains * W) {
    D<W> s[kChains] = {};
    for (int i = 0; i < HS; ++i) {
      const D<W> xi = splat<W>(double(x[i]));
      for (int k = 0; k < kChains; ++k) s[k] += xi * load<W>(tr + size_t(i) * Tp + t0 + k * W);
    }
    for (int k = 0; k < kChains; ++k) store<W>(out + t0 + k * W, s[k] * post);
  }
  for (; t0 < n; t0 += W) {
    D<W> s = {};
    for (int i = 0; i < HS; ++i) s += double(x[i]) * load<W>(tr + size_t(i) * Tp + t0);
    store<W>(out + t0, s * post);
  }
}

// pack_kv: batch row b's keys and values of every key/value head, in double (exact copies of the floats):
// one of them transposed, tr[kh][i][t2] (row stride Tp), the other as rows, rows[kh][t2][i] (row stride HSp);
// keys_transposed picks which (the forward's scores read keys by position, the backward's dP values). The
// padding is left as it is (zero).
void pack_kv(const float* qkv, const QkvLayout& L, int b, int T, int KVH, int HS, size_t Tp, size_t HSp,
             bool keys_transposed, double* tr, double* rows) {
  for (int kh = 0; kh < KVH; ++kh)
    for (int t2 = 0; t2 < T; ++t2) {
      const float* k = qkv + L.k(b, t2, kh);
      const float* v = qkv + L.v(b, t2, kh);
      const float* x = keys_transposed ? k : v;
      const float* y = keys_transposed ? v : k;
      for (int i = 0; i < HS; ++i) {
        tr[(size_t(kh) * HS + i) * Tp + t2] = x[i];
        rows[(size_t(kh) * T + t2) * HSp + i] = y[i];
      }
    }
}

template <int W>
XT_LANES_INLINE void attention_forward_impl(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                                            int HS) {
  const QkvLayout L = qkv_layout(B, T, NH, KVH, HS);
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t Tp = round_up(size_t(T)), HSp = round_up(size_t(HS));
  // per batch row: keys transposed, kt[kh][i][t2] (so W positions' scores are one vector), values as rows
  // vr[kh][t2][i]; both in double (exact copies of the floats), zero-padded to whole vectors
  std::vector<double> kt(size_t(KVH) * HS * Tp, 0.0), vr(size_t(KVH) * T * HSp, 0.0), p(Tp), acc(HSp);
  for (int b = 0; b < B; ++b) {
    pack_kv(qkv, L, b, T, KVH, HS, Tp, HSp, /*keys_transposed=*/true, kt.data(), vr.data());
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const int kh = L.kv_head(h);
        const float* q = qkv + L.q(b, t, h);
        const double* ktb = kt.data() + size_t(kh) * HS * Tp;
        // the scores of positions [0, t], each q . k summed over i in order (causal_softmax_row's s)
        position_dots<W>(p.data(), q, ktb, Tp, HS, size_t(t) + 1, scale);
        // causal_softmax_row's softmax: the max (exact in any order), exponentials a vector at a time
        // (exp_lanes, exp_table's bits), their sum z in order, the probabilities p / z; the lanes past t (the
        // last vector's) are computed and left unused
        double mx = -INFINITY;
        for (int t2 = 0; t2 <= t; ++t2) mx = std::fmax(mx, p[t2]);
        const D<W> shift = splat<W>(mx);
        for (size_t t0 = 0; t0 <= size_t(t); t0 += W)
          store<W>(p.data() + t0, exp_lanes<W>(load<W>(p.data() + t0) - shift));
        double z = 0.0;
        for (int t2 = 0; t2 <= t; ++t2) z += p[t2];
        const D<W> zv = splat<W>(z);
        for (size_t t0 = 0; t0 <= size_t(t); t0 += W) store<W>(p.data() + t0, load<W>(p.data() + t0) / zv);
        float* a = att + ((size_t(b) * NH + h) * T + t) * T;
        for (int t2 = 0; t2 < T; ++t2) a[t2] = t2 <= t ? float(p[t2]) : 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0);
        const double* vb = vr.data() + size_t(kh) * T * HSp;
        for (int t2 = 0; t2 <= t; ++t2)
          for (size_t c = 0; c < HSp; c += W)
            store<W>(&acc[c], load<W>(&acc[c]) + p[t2] * load<W>(vb + size_t(t2) * HSp + c));
        float* o = out + L.out(b, t, h);
        for (int i = 0; i < HS; ++i) o[i] = float(acc[i]);
      }
  }
}

template <int W>
XT_LANES_INLINE void attention_backward_impl(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                                             int T, int NH, int KVH, int HS) {
  const QkvLayout L = qkv_layout(B, T, NH, KVH, HS);
  const double scale = 1.0 / std::sqrt(double(HS));
  const size_t Tp = round_up(size_t(T)), HSp = round_up(size_t(HS));
  // per batch row: values transposed, vt[kh][i][t2] (W positions' dP = dout . v as one vector), keys as rows
  // kr[kh][t2][i]; in double, zero-padded
  std::vector<double> vt(size_t(KVH) * HS * Tp, 0.0), kr(size_t(KVH) * T * HSp, 0.0), dp(Tp), dy(HSp), qd(HSp), dq(HSp);
  auto lanes = [&](size_t c) { return std::min(size_t(W), size_t(HS) - c); };  // of the vector at channel c
  for (int b = 0; b < B; ++b) {
    pack_kv(qkv, L, b, T, KVH, HS, Tp, HSp, /*keys_transposed=*/false, vt.data(), kr.data());
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < NH; ++h) {
        const int kh = L.kv_head(h);
        const float* q = qkv + L.q(b, t, h);
        const float* a = att + ((size_t(b) * NH + h) * T + t) * T;
        const float* y = dout + L.out(b, t, h);
        for (int i = 0; i < HS; ++i) dy[i] = y[i], qd[i] = q[i];  // the padding stays 0
        const double* vtb = vt.data() + size_t(kh) * HS * Tp;
        position_dots<W>(dp.data(), dy.data(), vtb, Tp, HS, size_t(t) + 1, 1.0);  // dP, each summed over i in order
        double dot = 0.0;  // sum_j P_j dP_j
        for (int t2 = 0; t2 <= t; ++t2) dot += double(a[t2]) * dp[t2];
        for (int t2 = 0; t2 <= t; ++t2) {
          float* dv = dqkv + L.v(b, t2, kh);
          for (size_t c = 0; c < size_t(HS); c += W) add_rounded<W>(dv + c, double(a[t2]) * load<W>(&dy[c]), lanes(c));
        }
        std::fill(dq.begin(), dq.end(), 0.0);
        const double* krb = kr.data() + size_t(kh) * T * HSp;
        for (int t2 = 0; t2 <= t; ++t2) {
          const double ds = double(a[t2]) * (dp[t2] - dot) * scale;
          float* dk = dqkv + L.k(b, t2, kh);
          for (size_t c = 0; c < size_t(HS); c += W) {
            store<W>(&dq[c], load<W>(&dq[c]) + ds * load<W>(krb + size_t(t2) * HSp + c));
            add_rounded<W>(dk + c, ds * load<W>(&qd[c]), lanes(c));
          }
        }
        float* dqo = dqkv + L.q(b, t, h);
        for (size_t c = 0; c < size_t(HS); c += W) add_rounded<W>(dqo + c, load<W>(&dq[c]), lanes(c));
      }
  }
}

template <int W>
XT_LANES_INLINE void adamw_impl(float* param, const float* grad, float* m, float* v, size_t count, double lr,
                                double beta1, double beta2, double eps, double weight_decay, double grad_scale, int t) {
  XT_CHECK(t >= 1, "AdamW step " << t << " must be >= 1");
  const double rbc1 = 1.0 / (1.0 - std::pow(beta1, t)), rbc2 = 1.0 / (1.0 - std::pow(beta2, t));
  for (size_t i = 0; i < count; i += W) {
    const size_t n = std::min(size_t(W), count - i);
    const bool whole = n == W;
    const D<W> g = (whole ? load<W>(grad + i) : load<W>(grad + i, n, 0.0)) * grad_scale;
    const D<W> mi = beta1 * (whole ? load<W>(m + i) : load<W>(m + i, n, 0.0)) + (1.0 - beta1) * g;
    const D<W> vi = beta2 * (whole ? load<W>(v + i) : load<W>(v + i, n, 0.0)) + (1.0 - beta2) * g * g;
    const D<W> p = whole ? load<W>(param + i) : load<W>(param + i, n, 0.0);
    const D<W> next = p - lr * ((mi * rbc1) / (sqrt_lanes<W>(vi * rbc2) + eps) + weight_decay * p);
    if (whole) {
      store<W>(m + i, mi), store<W>(v + i, vi), store<W>(param + i, next);
    } else {
      store<W>(m + i, mi, n), store<W>(v + i, vi, n), store<W>(param + i, next, n);
    }
  }
}

template <int W>
XT_LANES_INLINE double sum_squares_impl(const float* x, size_t count) {
  constexpr int kSums = kSquareSums;  // ops.h's partial sums: element i into sum i % 8, whatever W
  D<W> acc[kSums / W] = {};
  size_t i = 0;
  for (; i + kSums <= count; i += kSums)
    for (int k = 0; k < kSums / W; ++k) {
      const D<W> v = load<W>(x + i + k * W);
      acc[k] += v * v;
    }
  double part[kSums];
  for (int k = 0; k < kSums / W; ++k) store<W>(part + k * W, acc[k]);
  for (; i < count; ++i) part[i % kSums] += double(x[i]) * x[i];
  double s = 0.0;
  for (const double p : part) s += p;
  return s;
}

// ---- the builds and the choice among them ----

// widest: the widest build this CPU runs.
Build widest() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // g_build's initializer may run before libgcc's own constructor has read the CPU
  if (!__builtin_cpu_supports("fma")) return Build::baseline;  // the wide builds fuse multiply-adds (fma_lanes)
  if (__builtin_cpu_supports("avx512f")) return Build::avx512;
  if (__builtin_cpu_supports("avx2")) return Build::avx2;
#endif
  return Build::baseline;
}
std::atomic<Build> g_build{widest()};  // what the kernels run (use_build)

}  // namespace

// XT_VEC_BUILDS(ret, name, impl, params, args): name's three builds (impl<8> for AVX-512, impl<4> for AVX2, impl<2>
// for the baseline) and name itself, returning ret, which calls the one in use (g_build).
#if defined(__x86_64__)
#define XT_VEC_BUILDS(ret, name, impl, params, args)                                                \
  namespace {                                                                                       \
  __attribute__((target("avx512f,fma"), flatten)) ret name##_avx512 params { return impl<8> args; } \
  __attribute__((target("avx2,fma"), flatten)) ret name##_avx2 params { return impl<4> args; }      \
  ret name##_baseline params { return impl<2> args; }                                               \
  }                                                                                                 \
  ret name params {                                                                                 \
    switch (g_build.load(std::memory_order_relaxed)) {                                              \
      case Build::avx512:                                                                           \
        return name##_avx512 args;                                                                  \
      case Build::avx2:                                                                             \
        return name##_avx2 args;                                                                    \
      default:                                                                                      \
        break;                                                                                      \
    }                                                                                               \
    return name##_baseline args;                                                                    \
  }
#else
#define XT_VEC_BUILDS(ret, name, impl, params, args) \
  ret name params { return impl<2> args; }
#endif

XT_VEC_BUILDS(void, cross_entropy_forward_backward, cross_entropy_impl,
              (float* losses, float* dlogits, const float* logits, const int32_t* targets, double dloss, int N, int V,
               int Vp),
              (losses, dlogits, logits, targets, dloss, N, V, Vp))
XT_VEC_BUILDS(void, gelu_forward, gelu_forward_impl, (float* out, const float* inp, size_t count), (out, inp, count))
XT_VEC_BUILDS(void, gelu_backward, gelu_backward_impl,
              (float* dinp, const float* inp, const float* dout, size_t count, bool assign),
              (dinp, inp, dout, count, assign))
XT_VEC_BUILDS(void, attention_forward, attention_forward_impl,
              (float* out, float* att, const float* qkv, int B, int T, int NH, int KVH, int HS),
              (out, att, qkv, B, T, NH, KVH, HS))
XT_VEC_BUILDS(void, attention_backward, attention_backward_impl,
              (float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int NH, int KVH,
               int HS),
              (dqkv, dout, qkv, att, B, T, NH, KVH, HS))
XT_VEC_BUILDS(void, adamw_update, adamw_impl,
              (float* param, const float* grad, float* m, float* v, size_t count, double lr, double beta1, double beta2,
               double eps, double weight_decay, double grad_scale, int t),
              (param, grad, m, v, count, lr, beta1, beta2, eps, weight_decay, grad_scale, t))
XT_VEC_BUILDS(double, sum_squares, sum_squares_impl, (const float* x, size_t count), (x, count))

Build use_build(Build b) {
  const Build top = widest();
  if (b == Build::automatic) b = top;
  XT_CHECK(top == Build::avx512 || b != Build::avx512,
           "the AVX-512 build of the CPU kernels needs a CPU with AVX-512F and FMA");
  XT_CHECK(top != Build::baseline || b == Build::baseline,
           "the AVX2 build of the CPU kernels needs a CPU with AVX2 and FMA");
  g_build.store(b);
  return b;
}

}  // namespace xtrain::cpu::vec
