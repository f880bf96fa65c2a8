// Helpers shared by the CPU op tests: deterministic random inputs, central finite differences and a
// norm-wise relative error, all in double precision.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <xtrain/core/rng.h>

namespace xtrain::test {

using Vec = std::vector<double>;

// Finite-difference step and tolerance (double precision). Central differences have truncation error
// O(h^2 |f'''|) ~ 1e-12 and cancellation error O(eps_mach |L| / h) ~ 1e-16 * 10 / 1e-6 = 1e-9 for the
// O(10) losses used here, so true gradients agree to ~1e-9 relative; 1e-6 leaves a 1000x margin, while
// a wrong index or formula gives O(1) relative error.
constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;

// random_vec: n values uniform in [lo, hi), a pure function of key (reproducible across runs).
inline Vec random_vec(size_t n, uint64_t key, double lo = -1.0, double hi = 1.0) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * double(uniform_u64(key, i) >> 11) * 0x1p-53;
  return v;
}

// random_tokens: n ids uniform in [0, V).
inline std::vector<int32_t> random_tokens(size_t n, int V, uint64_t key) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t(uniform_u64(key, i) % uint64_t(V));
  return t;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// fd_gradient: dL/dx by central differences, perturbing x in place (restored afterwards).
inline Vec fd_gradient(Vec& x, const std::function<double()>& loss) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kFdStep;
    const double lp = loss();
    x[i] = saved - kFdStep;
    const double lm = loss();
    x[i] = saved;
    g[i] = (lp - lm) / (2.0 * kFdStep);
  }
  return g;
}

// max_abs: max_i |a_i|, or NaN when an entry is NaN (std::max(m, NaN) returns m, which would hide it).
inline double max_abs(const Vec& a) {
  double m = 0.0;
  for (double x : a) {
    if (std::isnan(x)) return NAN;
    m = std::max(m, std::fabs(x));
  }
  return m;
}

// rel_err: max_i |a_i - b_i| / max_i |b_i| (norm-wise in the max norm: well defined when single
// entries are 0, e.g. attention above the diagonal, yet any entry wrong by more than kFdTol * max|b|
// fails). Returns +inf when b is all zero, so a vacuous comparison never passes, and NaN when any entry
// of a or b is NaN, which fails every `err <= tol` check.
inline double rel_err(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    if (std::isnan(e)) return NAN;
    d = std::max(d, e);
  }
  const double scale = max_abs(b);
  return scale > 0.0 ? d / scale : (std::isnan(scale) ? NAN : INFINITY);
}

// minus: a - b (the amount a backward op accumulated onto a prefilled gradient b).
inline Vec minus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

// check_grad: analytic vs finite-difference gradient of one input, reported in the log.
inline void check_grad(const std::string& what, const Vec& analytic, const Vec& numeric) {
  const double err = rel_err(analytic, numeric);
  MESSAGE(what << ": max rel err vs finite differences " << err);
  CHECK(err < kFdTol);
}

inline std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }
inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// bf16 <-> fp32 on the host, for every GPU test, written out here as an oracle independent of the CUDA
// headers: bf16 is the upper 16 bits of an IEEE fp32; rounding to nearest even adds 0x7fff plus the
// lowest kept bit.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace xtrain::test
