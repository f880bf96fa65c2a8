// CPU reference ops, forward values: each op against a direct naive definition or hand-computed numbers
// (double instantiations). Gradients: test_cpu_ops_grad.cpp; dropout/AdamW/accumulation:
// test_cpu_ops_train.cpp; the float CpuBackend through the Backend interface: test_cpu_backend.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>

#include "backend/cpu/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/core/error.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::QkvLayout;

namespace {
// Forward values in double against naive double loops: only summation order differs (~1e-16 each).
constexpr double kExactTol = 1e-12;

// naive_mha: textbook causal multi-head attention, qkv (B,T,3*NH*HS) -> out (B,T,NH*HS).
// Written as matrices per (b, h): S = Q K^T / sqrt(HS), S[t][t2] = -inf for t2 > t, P = softmax rows,
// O = P V; independent of the loop structure in src/backend/cpu/attention.h.
Vec naive_mha(const Vec& qkv, int B, int T, int NH, int HS) {
  const int row = 3 * NH * HS;
  Vec out(size_t(B) * T * NH * HS);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      auto at = [&](int t, int part, int i) {
        return qkv[(size_t(b) * T + t) * row + (part * NH + h) * HS + i];
      };
      std::vector<Vec> S(T, Vec(T));
      for (int t = 0; t < T; ++t)
        for (int t2 = 0; t2 < T; ++t2) {
          double s = 0.0;
          for (int i = 0; i < HS; ++i) s += at(t, 0, i) * at(t2, 1, i);
          S[t][t2] = t2 <= t ? s / std::sqrt(double(HS)) : -INFINITY;
        }
      for (int t = 0; t < T; ++t) {
        double mx = -INFINITY, z = 0.0;
        for (double s : S[t]) mx = std::max(mx, s);
        for (double& s : S[t]) z += (s = std::exp(s - mx));
        for (int i = 0; i < HS; ++i) {
          double o = 0.0;
          for (int t2 = 0; t2 < T; ++t2) o += S[t][t2] / z * at(t2, 2, i);
          out[(size_t(b) * T + t) * NH * HS + size_t(h) * HS + i] = o;
        }
      }
    }
  return out;
}

// expand_kv: GQA qkv (N,(NH+2*KVH)*HS) -> MHA qkv (N,3*NH*HS), query head h given kv head h/(NH/KVH).
Vec expand_kv(const Vec& qkv, int N, int NH, int KVH, int HS) {
  const int in_row = QkvLayout::row_width(NH, KVH, HS), out_row = QkvLayout::row_width(NH, NH, HS);
  Vec out(size_t(N) * out_row);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < HS; ++i) {
        const double* r = &qkv[size_t(n) * in_row];
        double* o = &out[size_t(n) * out_row];
        const int kh = h / (NH / KVH);
        o[h * HS + i] = r[h * HS + i];
        o[(NH + h) * HS + i] = r[(NH + kh) * HS + i];
        o[(2 * NH + h) * HS + i] = r[(NH + KVH + kh) * HS + i];
      }
  return out;
}
}  // namespace

// The comparison helper itself: a NaN anywhere must fail `err <= tol` (std::max would skip it), and an
// all-zero reference must not pass vacuously.
TEST_CASE("rel_err reports NaN entries and vacuous comparisons") {
  CHECK(std::isnan(xtrain::test::rel_err({NAN, 1.0}, {1.0, 1.0})));
  CHECK(std::isnan(xtrain::test::rel_err({1.0, 1.0}, {1.0, NAN})));
  CHECK(std::isinf(xtrain::test::rel_err({0.0}, {0.0})));
  CHECK(xtrain::test::rel_err({1.0, 2.5}, {1.0, 2.0}) == doctest::Approx(0.25));
}

TEST_CASE("matmul_forward equals the triple loop, with and without bias") {
  const int N = 3, IC = 4, OC = 5;
  const Vec inp = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), bias = random_vec(OC, 3);
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    Vec out(N * OC, 99.0), ref(N * OC);  // 99: the op must overwrite, not accumulate
    cpu::matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double s = with_bias ? bias[o] : 0.0;
        for (int i = 0; i < IC; ++i) s += inp[n * IC + i] * w[o * IC + i];
        ref[n * OC + o] = s;
      }
    CHECK(rel_err(out, ref) < kExactTol);
  }
}

// The one layout of qkv rows (backend.h): [NH q heads | KVH k heads | KVH v heads] of HS channels.
TEST_CASE("QkvLayout offsets and counts") {
  const QkvLayout L{2, 3, 6, 2, 4};  // B, T, NH, KVH, HS: groups of 3 query heads
  CHECK(L.row() == 40);
  CHECK(QkvLayout::row_width(6, 2, 4) == 40);
  CHECK(L.out_row() == 24);
  CHECK(L.group() == 3);
  CHECK((L.kv_head(0) == 0 && L.kv_head(2) == 0 && L.kv_head(3) == 1 && L.kv_head(5) == 1));
  CHECK(L.q(1, 2, 5) == (1 * 3 + 2) * 40 + 5 * 4);
  CHECK(L.k(1, 2, 1) == (1 * 3 + 2) * 40 + 28);  // after the 6 q heads and k head 0
  CHECK(L.v(0, 1, 0) == 40 + 32);                // after the 6 q and 2 k heads
  CHECK(L.out(1, 0, 2) == 3 * 24 + 8);
  CHECK(L.qkv_count() == 2 * 3 * 40);
  CHECK(L.q_count() == 2 * 3 * 24);
  CHECK(L.kv_count() == 2 * 3 * 8);
  CHECK(L.q_count() + 2 * L.kv_count() == L.qkv_count());
  CHECK_THROWS_AS(xtrain::qkv_layout(2, 3, 6, 4, 4), xtrain::Error);  // 4 kv heads do not divide 6
  CHECK_THROWS_AS(xtrain::qkv_layout(2, 3, 6, 2, 0), xtrain::Error);
}

TEST_CASE("attention with T=1 returns v of the query head's kv group") {
  const int B = 2, T = 1, NH = 4, KVH = 2, HS = 3, row = QkvLayout::row_width(NH, KVH, HS);
  const Vec qkv = random_vec(B * row, 4, -3.0, 3.0);
  Vec out(B * NH * HS), att(B * NH);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      CHECK(att[b * NH + h] == 1.0);
      for (int i = 0; i < HS; ++i)
        CHECK(out[(b * NH + h) * HS + i] == qkv[b * row + (NH + KVH + h / 2) * HS + i]);  // 1.0 * v
    }
}

TEST_CASE("attention probabilities are causal rows that sum to 1") {
  const int B = 2, T = 5, NH = 4, KVH = 2, HS = 4;
  const Vec qkv = random_vec(QkvLayout{B, T, NH, KVH, HS}.qkv_count(), 5, -2.0, 2.0);
  Vec out(B * T * NH * HS), att(B * NH * T * T, 99.0);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
  for (int r = 0; r < B * NH * T; ++r) {
    const int t = r % T;
    double s = 0.0;
    for (int t2 = 0; t2 < T; ++t2) {
      const double a = att[size_t(r) * T + t2];
      if (t2 > t) CHECK(a == 0.0);
      if (t2 <= t) CHECK(a > 0.0);
      s += a;
    }
    CHECK(s == doctest::Approx(1.0).epsilon(kExactTol));
  }
}

TEST_CASE("GQA equals MHA: KVH=NH against a naive loop, KVH<NH against replicated kv heads") {
  const int B = 2, T = 5, NH = 4, HS = 4, N = B * T;
  for (int KVH : {4, 2, 1}) {
    CAPTURE(KVH);
    const Vec qkv = random_vec(QkvLayout{B, T, NH, KVH, HS}.qkv_count(), 6 + KVH, -2.0, 2.0);
    const Vec mha_qkv = expand_kv(qkv, N, NH, KVH, HS);
    Vec out(N * NH * HS), att(B * NH * T * T), mha_out(N * NH * HS), mha_att(att.size());
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
    cpu::attention_forward(mha_out.data(), mha_att.data(), mha_qkv.data(), B, T, NH, NH, HS);
    CHECK(rel_err(out, naive_mha(mha_qkv, B, T, NH, HS)) < kExactTol);
    CHECK(rel_err(out, mha_out) < kExactTol);

    // Backward: q gradients agree; a shared kv head gets the sum over its query heads' gradients.
    const Vec dout = random_vec(out.size(), 20 + KVH);
    Vec dqkv(qkv.size()), mha_dqkv(mha_qkv.size());
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH, KVH, HS);
    cpu::attention_backward(mha_dqkv.data(), dout.data(), mha_qkv.data(), mha_att.data(), B, T, NH, NH, HS);
    Vec folded(qkv.size(), 0.0);  // mha_dqkv folded back onto the GQA layout
    const int row = QkvLayout::row_width(NH, KVH, HS), mrow = QkvLayout::row_width(NH, NH, HS);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < HS; ++i) {
          const int kh = h / (NH / KVH);
          folded[n * row + h * HS + i] = mha_dqkv[n * mrow + h * HS + i];
          folded[n * row + (NH + kh) * HS + i] += mha_dqkv[n * mrow + (NH + h) * HS + i];
          folded[n * row + (NH + KVH + kh) * HS + i] += mha_dqkv[n * mrow + (2 * NH + h) * HS + i];
        }
    CHECK(rel_err(dqkv, folded) < kExactTol);
  }
  const Vec qkv = random_vec(2 * 3 * 3 * 4, 1);
  Vec out(2 * 3 * 3 * 4), att(2 * 3 * 3 * 3);
  CHECK_THROWS_AS(cpu::attention_forward(out.data(), att.data(), qkv.data(), 2, 3, 3, 2, 4), xtrain::Error);
}

TEST_CASE("layernorm with w=1, b=0 gives mean 0 and variance var/(var+eps)") {
  const int N = 4, C = 16;
  const Vec inp = random_vec(N * C, 7, -5.0, 15.0);  // large mean: exercises the two-pass variance
  const Vec w(C, 1.0), b(C, 0.0);
  Vec out(N * C), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double mu = 0.0, var = 0.0, m_out = 0.0, v_out = 0.0;
    for (int c = 0; c < C; ++c) mu += inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) var += (inp[n * C + c] - mu) * (inp[n * C + c] - mu) / C;
    for (int c = 0; c < C; ++c) m_out += out[n * C + c] / C;
    for (int c = 0; c < C; ++c) v_out += out[n * C + c] * out[n * C + c] / C;
    CHECK(mean[n] == doctest::Approx(mu).epsilon(kExactTol));
    CHECK(rstd[n] == doctest::Approx(1.0 / std::sqrt(var + 1e-5)).epsilon(kExactTol));
    CHECK(std::fabs(m_out) < kExactTol);
    CHECK(v_out == doctest::Approx(var / (var + 1e-5)).epsilon(kExactTol));  // eps = 1e-5
  }
}

TEST_CASE("cross entropy: uniform logits give log V; a hand case; stability; bad targets throw") {
  const int N = 3, V = 11;
  const Vec zeros(N * V, 0.7);
  const std::vector<int32_t> targets = {0, 5, 10};
  Vec losses(N);
  cpu::cross_entropy_forward_backward(losses.data(), static_cast<double*>(nullptr), zeros.data(),
                                      targets.data(), 1.0, N, V, V);
  for (double l : losses) CHECK(l == doctest::Approx(std::log(11.0)).epsilon(kExactTol));

  // logits (0, 0, ln 2) + 1000 -> softmax (1/4, 1/4, 1/2); the shift by 1000 would overflow exp().
  const Vec logits = {1000.0, 1000.0, 1000.0 + std::log(2.0)};
  const std::vector<int32_t> tgt = {2};
  Vec loss(1), d(3);
  cpu::cross_entropy_forward_backward(loss.data(), d.data(), logits.data(), tgt.data(), 2.0, 1, 3, 3);
  CHECK(loss[0] == doctest::Approx(std::log(2.0)).epsilon(kExactTol));
  CHECK(rel_err(d, Vec{0.5, 0.5, -1.0}) < kExactTol);  // (softmax - onehot) * dloss, dloss = 2

  for (int32_t bad : {-1, 3}) {
    Vec dl(3, 42.0), ls(1, 42.0);
    const std::vector<int32_t> t = {bad};
    CHECK_THROWS_AS(
        cpu::cross_entropy_forward_backward(ls.data(), dl.data(), logits.data(), t.data(), 1.0, 1, 3, 3),
        xtrain::Error);
    CHECK(ls[0] == 42.0);  // nothing written before the error
  }
}

TEST_CASE("gelu: tanh approximation values") {
  // Reference values of 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) from Python's math module.
  const Vec x = {0.0, 1.0, -2.0, 3.0};
  const Vec ref = {0.0, 0.8411919906082768, -0.04540230591222494, 2.996362607918227};
  Vec out(4);
  cpu::gelu_forward(out.data(), x.data(), 4);
  CHECK(rel_err(out, ref) < kExactTol);
}

TEST_CASE("encoder, residual, add_inplace, sum, sum_squares on hand values") {
  const int B = 1, T = 2, C = 2;
  const std::vector<int32_t> tokens = {2, 0};
  const Vec wte = {1, 2, 3, 4, 5, 6}, wpe = {10, 20, 30, 40, 50, 60};  // V=3, maxT=3
  Vec out(4);
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  CHECK(out == Vec{15, 26, 31, 42});

  Vec a = {1, 2, 3}, r(3);
  const Vec b = {0.5, -2, 10};
  cpu::residual_forward(r.data(), a.data(), b.data(), 3);
  CHECK(r == Vec{1.5, 0, 13});
  cpu::add_inplace(a.data(), b.data(), 3);
  CHECK(a == Vec{1.5, 0, 13});

  // Double accumulation: float accumulation would lose every +1 next to 1e8 (float ulp there is 8).
  std::vector<float> x(1001, 1.0f);
  x[0] = 1e8f;
  CHECK(cpu::sum(x.data(), x.size()) == 1e8 + 1000.0);
  x[0] = 1e4f;
  CHECK(cpu::sum_squares(x.data(), x.size()) == 1e8 + 1000.0);
  const Vec y = {1.5, -2, 3};
  CHECK(cpu::sum(y.data(), 3) == 2.5);
  CHECK(cpu::sum_squares(y.data(), 3) == 15.25);
}
