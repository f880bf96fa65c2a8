// The CPU backend's vectorized kernels (src/backend/cpu/vec_ops.h) at sizes that leave vector tails (T, HS, counts
// not multiples of 8; grouped-query heads): the float reference's bits where they keep its arithmetic (attention,
// AdamW, the matmul's assigned dinp and bias sums), and correctly rounded to float (against long double and the double
// reference) where they replace a libm call (the cross-entropy over GPT-2's vocabulary, GELU over the whole float
// range); their exponential, exp_table, within its stated bound against expl.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/exp_table.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vec_ops.h"
#include <xtrain/backend/qkv_layout.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::Backend;
using xtrain::DeviceBuffer;
using xtrain::Grad;

namespace {
using Floats = std::vector<float>;

Floats random_floats(size_t n, uint64_t key, double lo = -1.0, double hi = 1.0) {
  return to_float(random_vec(n, key, lo, hi));
}

DeviceBuffer<float> up(Backend& be, const Floats& v) {
  DeviceBuffer<float> d(be, v.size());
  be.copy_to_device(d.get(), v.data(), d.bytes());
  return d;
}
Floats down(Backend& be, const DeviceBuffer<float>& d) {
  Floats f(d.count());
  be.copy_to_host(f.data(), d.get(), d.bytes());
  return f;
}
// check_same_bits: a and b equal element by element (a NaN equals nothing); reports the count and the first.
void check_same_bits(const std::string& what, const Floats& a, const Floats& b) {
  REQUIRE(a.size() == b.size());
  size_t diff = 0, first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) diff++, first = std::min(first, i);
  MESSAGE(what << ": " << diff << " of " << a.size() << " elements differ from the reference"
               << (diff ? " (first at " + std::to_string(first) + ")" : ""));
  CHECK(diff == 0);
}
// The kernels' float results are the exact values rounded to nearest: within half a float ulp of a value computed in
// double or long double, up to the double errors of kernel and reference (a few 2^-53 relative, 1e-8 of a float
// ulp; 0.501 leaves room for those, while one float ulp off is 1.0). Below the smallest normal float the ulp is the
// subnormal spacing (1.4e-45).
constexpr double kUlps = 0.501;
void check_ulps(const std::string& what, const Floats& got, const std::vector<long double>& ref) {
  REQUIRE(got.size() == ref.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float r = float(ref[i]);
    const double ulp = double(std::nextafter(std::fabs(r), INFINITY)) - std::fabs(r);
    const double e = double(std::fabs((long double)got[i] - ref[i])) / ulp;
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  MESSAGE(what << ": largest error " << worst << " float ulps");
  CHECK(worst <= kUlps);
}
}  // namespace

TEST_CASE("vectorized CPU kernels keep the float reference's bits: attention, AdamW, the assigned matmul gradient") {
  auto be = xtrain::make_cpu_backend();
  constexpr int B = 2, T = 19, NH = 4, KVH = 2, HS = 12;  // T and HS leave vector tails; two query heads per kv head
  const xtrain::QkvLayout L = xtrain::qkv_layout(B, T, NH, KVH, HS);
  const Floats qkv = random_floats(L.qkv_count(), 1, -2.0, 2.0), dout = random_floats(size_t(B) * T * NH * HS, 2);
  const Floats dqkv0 = random_floats(L.qkv_count(), 3);  // the backward accumulates onto this
  Floats out(dout.size()), att(size_t(B) * NH * T * T), dqkv = dqkv0;
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH, KVH, HS);
  auto qkv_d = up(*be, qkv), dout_d = up(*be, dout), out_d = up(*be, Floats(out.size())),
       att_d = up(*be, Floats(att.size())), dqkv_d = up(*be, dqkv0);
  be->attention_forward(out_d.get(), att_d.get(), qkv_d.get(), B, T, NH, KVH, HS);
  be->attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), att_d.get(), B, T, NH, KVH, HS);
  check_same_bits("attention out", down(*be, out_d), out);
  check_same_bits("attention probabilities", down(*be, att_d), att);
  check_same_bits("attention dqkv (accumulated)", down(*be, dqkv_d), dqkv);

  // AdamW over 1003 elements (a tail of 3 at every width), three steps, decay on
  constexpr size_t P = 1003;
  Floats param = random_floats(P, 4), m(P), v(P);
  auto param_d = up(*be, param), m_d = up(*be, m), v_d = up(*be, v);
  for (int t = 1; t <= 3; ++t) {
    const Floats g = random_floats(P, 10 + t);
    auto g_d = up(*be, g);
    cpu::adamw_update(param.data(), g.data(), m.data(), v.data(), P, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    be->adamw_update(param_d.get(), g_d.get(), m_d.get(), v_d.get(), {{0, P, true}}, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     0.7f, t);
  }
  check_same_bits("adamw param", down(*be, param_d), param);
  check_same_bits("adamw m", down(*be, m_d), m);
  check_same_bits("adamw v", down(*be, v_d), v);

  // matmul_backward with Grad::assign (the GEMM's beta 0) over a dinp full of NaN: the bits of += into zeros; the
  // bias gradient is each column of dout summed over the rows in order, in double
  constexpr int N = 37, IC = 20, OC = 13;
  const Floats x = random_floats(size_t(N) * IC, 5), w = random_floats(size_t(OC) * IC, 6),
               dy = random_floats(size_t(N) * OC, 7);
  Floats dinp(size_t(N) * IC, 0.0f), dw(size_t(OC) * IC, 0.0f), dbias(OC, 0.0f);
  cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), dy.data(), x.data(), w.data(), N, IC, OC);
  auto x_d = up(*be, x), w_d = up(*be, w), dy_d = up(*be, dy), dw_d = up(*be, Floats(dw.size())),
       dbias_d = up(*be, Floats(OC)), dinp_d = up(*be, Floats(dinp.size(), std::numeric_limits<float>::quiet_NaN()));
  be->matmul_backward(dinp_d.get(), dw_d.get(), dbias_d.get(), dy_d.get(), x_d.get(), w_d.get(), N, IC, OC,
                      Grad::assign);
  check_same_bits("matmul dinp (assigned over NaN)", down(*be, dinp_d), dinp);
  check_same_bits("matmul dw", down(*be, dw_d), dw);
  Floats column_sums(OC);
  for (int o = 0; o < OC; ++o) {
    double s = 0.0;
    for (int n = 0; n < N; ++n) s += dy[size_t(n) * OC + o];
    column_sums[o] = float(s);
  }
  check_same_bits("matmul dbias", down(*be, dbias_d), column_sums);
}

TEST_CASE("vectorized cross-entropy over GPT-2's vocabulary and GELU: the exact values rounded to float") {
  auto be = xtrain::make_cpu_backend();
  // three rows of V = 50257 logits (V % 8 = 1) in a padded stride of 50304: moderate logits, a wide spread whose
  // exponentials underflow, and one whose target is the last column (the scalar tail)
  constexpr int N = 3, V = 50257, Vp = 50304;
  Floats logits(size_t(N) * Vp, 7.0f);  // padded columns: must change nothing
  const Floats r0 = random_floats(V, 20, -8.0, 8.0), r1 = random_floats(V, 21, -1000.0, 30.0),
               r2 = random_floats(V, 22, -3.0, 3.0);
  for (int i = 0; i < V; ++i) logits[i] = r0[i], logits[Vp + i] = r1[i], logits[2 * size_t(Vp) + i] = r2[i];
  const std::vector<int32_t> targets = {12345, 77, V - 1};
  const double dloss = double(1.0f / 3.0f);  // the float the backend receives
  Vec ref_losses(N), ref_d(size_t(N) * Vp);
  cpu::cross_entropy_forward_backward(ref_losses.data(), ref_d.data(), to_double(logits).data(), targets.data(), dloss,
                                      N, V, Vp);
  DeviceBuffer<int32_t> tgt_d(*be, N);
  be->copy_to_device(tgt_d.get(), targets.data(), tgt_d.bytes());
  auto logits_d = up(*be, logits), losses_d = up(*be, Floats(N)), d_d = up(*be, Floats(logits.size()));
  be->cross_entropy_forward_backward(losses_d.get(), d_d.get(), logits_d.get(), tgt_d.get(), float(dloss), N, V, Vp);
  check_ulps("cross entropy losses", down(*be, losses_d),
             std::vector<long double>(ref_losses.begin(), ref_losses.end()));
  const Floats d = down(*be, d_d);
  check_ulps("cross entropy dlogits", d, std::vector<long double>(ref_d.begin(), ref_d.end()));
  for (int n = 0; n < N; ++n) CHECK(d[size_t(n) * Vp + V] == 0.0f);  // padded columns
  // in place (dlogits over logits): the same bits
  auto inplace_d = up(*be, logits), losses2_d = up(*be, Floats(N));
  be->cross_entropy_forward_backward(losses2_d.get(), inplace_d.get(), inplace_d.get(), tgt_d.get(), float(dloss), N, V,
                                     Vp);
  check_same_bits("cross entropy dlogits in place", down(*be, inplace_d), d);
  check_same_bits("cross entropy losses in place", down(*be, losses2_d), down(*be, losses_d));

  // GELU over [-30, 30] and beyond, 1003 elements and 8 special values. The exact values in long double, through
  // 1 + tanh(y) = 2 s and 1 - tanh(y)^2 = 4 s (1 - s) with s = 1 / (1 + e^{-2y}): no cancellation where tanh(y)
  // nears -1 (at x = -15, 1 + tanh(y) ~ 1e-20, below long double's resolution next to 1)
  Floats x = random_floats(1003, 30, -30.0, 30.0);
  for (float e : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e4f, -1e4f, 3e38f, -3e38f}) x.push_back(e);
  const Floats dy = random_floats(x.size(), 31);
  std::vector<long double> ref_y(x.size()), ref_dx(x.size());
  const long double k = cpu::kGeluK, a = cpu::kGeluA;
  for (size_t i = 0; i < x.size(); ++i) {
    const long double xi = x[i], e = std::exp(-2.0L * k * (xi + a * xi * xi * xi)), s = 1.0L / (1.0L + e);
    const long double es = std::isinf(e) ? 1.0L : e * s;  // 1 - s
    ref_y[i] = xi * s;
    ref_dx[i] = (s + 2.0L * xi * s * es * k * (1.0L + 3.0L * a * xi * xi)) * dy[i];
  }
  auto x_d = up(*be, x), y_d = up(*be, Floats(x.size())), dy_d = up(*be, dy), dx_d = up(*be, Floats(x.size(), NAN));
  be->gelu_forward(y_d.get(), x_d.get(), x.size());
  be->gelu_backward(dx_d.get(), x_d.get(), dy_d.get(), x.size(), Grad::assign);
  check_ulps("gelu", down(*be, y_d), ref_y);
  check_ulps("gelu backward", down(*be, dx_d), ref_dx);
}

TEST_CASE("exp_table: e^x within its stated 3 double ulps (relative) over its whole range, NaN kept") {
  // the bound exp_table.h states, against expl (64-bit mantissa: its own error is ~2^-63); a wrong table entry,
  // constant or polynomial degree is off by more (one degree fewer: 6.1 of these units)
  constexpr double kBound = 3.0;  // units of 2^-53, relative
  double worst = 0.0;
  for (const auto& [lo, hi, key] :
       {std::tuple{-708.0, 709.0, 40}, std::tuple{-104.0, 0.0, 41}, std::tuple{-1.0, 1.0, 42}})
    for (const double x : random_vec(200000, key, lo, hi)) {
      const long double r = expl((long double)x);
      worst = std::max(worst, double(fabsl(((long double)cpu::exp_table(x) - r) / r)) * 0x1p53);
    }
  MESSAGE("exp_table: largest relative error " << worst << " x 2^-53 over 600,000 arguments");
  CHECK(worst < kBound);
  CHECK(cpu::exp_table(0.0) == 1.0);
  CHECK(std::isnan(cpu::exp_table(std::numeric_limits<double>::quiet_NaN())));
}

TEST_CASE("every build of the vectorized kernels this CPU runs gives the same bits (AVX-512, AVX2, baseline)") {
  namespace vec = cpu::vec;
  constexpr int B = 2, T = 19, NH = 4, KVH = 2, HS = 12, N = 5, V = 1003, Vp = 1024;
  const xtrain::QkvLayout L = xtrain::qkv_layout(B, T, NH, KVH, HS);
  const Floats qkv = random_floats(L.qkv_count(), 1, -2.0, 2.0), dout = random_floats(size_t(B) * T * NH * HS, 2),
               logits = random_floats(size_t(N) * Vp, 3, -20.0, 20.0), x = random_floats(1003, 4, -10.0, 10.0);
  const std::vector<int32_t> targets = random_tokens(N, V, 5);
  // run: every kernel's outputs under the build in use, one after the other
  auto run = [&] {
    Floats out(dout.size()), att(size_t(B) * NH * T * T), dqkv(qkv.size(), 0.0f), losses(N), d(logits.size()),
        y(x.size()), dx(x.size(), 0.5f), p = x, m(x.size()), v(x.size());
    vec::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
    vec::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH, KVH, HS);
    vec::cross_entropy_forward_backward(losses.data(), d.data(), logits.data(), targets.data(), 0.25, N, V, Vp);
    vec::gelu_forward(y.data(), x.data(), x.size());
    vec::gelu_backward(dx.data(), x.data(), y.data(), x.size(), false);
    vec::adamw_update(p.data(), y.data(), m.data(), v.data(), x.size(), 1e-2, 0.9, 0.95, 1e-8, 0.1, 0.5, 1);
    Floats all;
    for (const Floats* f : {&out, &att, &dqkv, &losses, &d, &y, &dx, &p, &m, &v})
      all.insert(all.end(), f->begin(), f->end());
    return all;
  };
  // sum_squares over 1003 elements (a tail of 3 at every width): the reference's 8 partial sums, bit for bit
  const double squares = cpu::sum_squares(x.data(), x.size());
  const vec::Build widest = vec::use_build(vec::Build::automatic);
  const Floats ref = run();
  CHECK(vec::sum_squares(x.data(), x.size()) == squares);
  int builds = 1;
  for (const vec::Build b : {vec::Build::avx512, vec::Build::avx2, vec::Build::baseline}) {
    if (b == widest || (b == vec::Build::avx512 && widest != vec::Build::avx512) ||
        (b == vec::Build::avx2 && widest == vec::Build::baseline))
      continue;  // the reference itself, or one this CPU cannot run
    vec::use_build(b);
    check_same_bits("build " + std::to_string(int(b)) + " against the widest", run(), ref);
    CHECK(vec::sum_squares(x.data(), x.size()) == squares);
    ++builds;
  }
  vec::use_build(vec::Build::automatic);
  MESSAGE(builds << " builds compared");
  if (widest == vec::Build::baseline) CHECK_THROWS_AS(vec::use_build(vec::Build::avx2), xtrain::Error);
}
