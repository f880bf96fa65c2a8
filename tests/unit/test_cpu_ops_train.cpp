// CPU reference ops used by the training step: backward accumulation, dropout masks and AdamW against
// hand-computed steps (double instantiations).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "backend/cpu/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/core/error.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::QkvLayout;

namespace {
// Double results of the same operations in a different order (BLAS blocking): ~1e-16 per term.
constexpr double kExactTol = 1e-12;

// expect_accumulates: run(grads) once from zero, then again; the second call must add the same amount.
void expect_accumulates(const std::string& op, std::vector<Vec*> grads, const std::function<void()>& run) {
  for (Vec* g : grads) std::fill(g->begin(), g->end(), 0.0);
  run();
  std::vector<Vec> once;
  for (Vec* g : grads) once.push_back(*g);
  run();
  for (size_t i = 0; i < grads.size(); ++i) {
    Vec twice = once[i];
    for (double& x : twice) x *= 2.0;
    CAPTURE(op);
    CAPTURE(i);
    CHECK(rel_err(*grads[i], twice) < kExactTol);
  }
}
}  // namespace

TEST_CASE("backward ops accumulate: calling twice doubles every gradient") {
  const int B = 2, T = 5, C = 8, V = 11, N = B * T, OC = 6, NH = 4, KVH = 2, HS = 4;
  const std::vector<int32_t> tokens = random_tokens(N, V, 1);
  const Vec dout = random_vec(N * C, 2), inp = random_vec(N * C, 3), w = random_vec(C, 4);
  Vec dwte(V * C), dwpe(T * C);
  expect_accumulates("encoder", {&dwte, &dwpe}, [&] {
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  });

  Vec out(N * C), mean(N), rstd(N), dinp(N * C), dw(C), db(C);
  const Vec b = random_vec(C, 5);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  expect_accumulates("layernorm", {&dinp, &dw, &db}, [&] {
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
  });

  const Vec mw = random_vec(OC * C, 6), mdout = random_vec(N * OC, 7);
  Vec mdw(OC * C), mdb(OC);
  expect_accumulates("matmul", {&dinp, &mdw, &mdb}, [&] {
    cpu::matmul_backward(dinp.data(), mdw.data(), mdb.data(), mdout.data(), inp.data(), mw.data(), N, C, OC);
  });

  const Vec qkv = random_vec(QkvLayout{B, T, NH, KVH, HS}.qkv_count(), 8), adout = random_vec(N * NH * HS, 9);
  Vec aout(N * NH * HS), att(B * NH * T * T), dqkv(qkv.size());
  cpu::attention_forward(aout.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
  expect_accumulates("attention", {&dqkv}, [&] {
    cpu::attention_backward(dqkv.data(), adout.data(), qkv.data(), att.data(), B, T, NH, KVH, HS);
  });

  expect_accumulates("gelu", {&dinp},
                     [&] { cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), N * C); });
  expect_accumulates("add_inplace", {&dinp}, [&] { cpu::add_inplace(dinp.data(), dout.data(), N * C); });
}

TEST_CASE("dropout_apply: the keyed mask of the contract") {
  const int B = 4;
  const size_t per_seq = 100000;
  const float p = 0.25f;
  // Keep fraction over B*per_seq = 4e5 Bernoulli(1-p) draws: sigma = sqrt(p(1-p)/n) = 6.8e-4, so 5e-3
  // is ~7 sigma (no false failures) yet far below any systematic error (e.g. keep when u < p: 0.5 off).
  constexpr double kFractionTol = 5e-3;
  const std::vector<uint64_t> keys = {11, 22, 33, 44};
  const Vec x = random_vec(B * per_seq, 1, 0.5, 1.5);  // never 0: a zero output means "dropped"

  Vec y = x;
  cpu::dropout_apply(y.data(), keys.data(), B, per_seq, 0.0f);
  CHECK(y == x);  // p = 0: identity

  y = x;
  cpu::dropout_apply(y.data(), keys.data(), B, per_seq, p);
  size_t kept = 0, wrong = 0;
  for (int b = 0; b < B; ++b)
    for (size_t j = 0; j < per_seq; ++j) {
      const size_t i = b * per_seq + j;
      const bool keep = xtrain::uniform01(keys[b], j) >= p;  // the contract, spelled out
      kept += keep;
      wrong += y[i] != (keep ? x[i] * (1.0 / (1.0 - 0.25)) : 0.0);
    }
  CHECK(wrong == 0);
  MESSAGE("dropout p=0.25 keep fraction " << double(kept) / (B * per_seq));
  CHECK(std::fabs(double(kept) / (B * per_seq) - (1.0 - p)) < kFractionTol);

  Vec y2 = x;  // same keys, same mask
  cpu::dropout_apply(y2.data(), keys.data(), B, per_seq, p);
  CHECK(y2 == y);

  // Different keys give independent masks: they disagree on a fraction 2p(1-p) = 0.375 of elements.
  const std::vector<uint64_t> other = {12, 23, 34, 45};
  Vec y3 = x;
  cpu::dropout_apply(y3.data(), other.data(), B, per_seq, p);
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += (y3[i] == 0.0) != (y[i] == 0.0);
  CHECK(std::fabs(double(differ) / x.size() - 2 * p * (1 - p)) < kFractionTol);
  size_t rows_differ = 0;  // sequences within one call use their own keys
  for (size_t j = 0; j < per_seq; ++j) rows_differ += (y[j] == 0.0) != (y[per_seq + j] == 0.0);
  CHECK(std::fabs(double(rows_differ) / per_seq - 2 * p * (1 - p)) < 4 * kFractionTol);  // n 4x smaller

  // Backward = the same call on the gradient: same elements zeroed, kept ones scaled by 1/(1-p).
  Vec g = random_vec(x.size(), 2, 0.5, 1.5), g0 = g;
  cpu::dropout_apply(g.data(), keys.data(), B, per_seq, p);
  size_t mismatched = 0;
  for (size_t i = 0; i < x.size(); ++i) mismatched += (g[i] == 0.0) != (y[i] == 0.0);
  CHECK(mismatched == 0);

  for (float bad : {1.0f, -0.1f})
    CHECK_THROWS_AS(cpu::dropout_apply(g0.data(), keys.data(), B, per_seq, bad), xtrain::Error);
}

namespace {
// adam_steps: runs AdamW steps 1..grads.size() on (param, m, v) and checks param after each step.
void adam_steps(Vec param, const std::vector<Vec>& grads, const std::vector<Vec>& expected, double wd,
                double grad_scale, const Vec& m_after_1, const Vec& v_after_1) {
  const double lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  Vec m(param.size(), 0.0), v(param.size(), 0.0);
  for (size_t s = 0; s < grads.size(); ++s) {
    CAPTURE(s + 1);
    cpu::adamw_update(param.data(), grads[s].data(), m.data(), v.data(), param.size(), lr, beta1, beta2, eps,
                      wd, grad_scale, int(s) + 1);
    if (s == 0) {
      CHECK(rel_err(m, m_after_1) < kExactTol);
      CHECK(rel_err(v, v_after_1) < kExactTol);
    }
    for (size_t i = 0; i < param.size(); ++i)
      CHECK(param[i] == doctest::Approx(expected[s][i]).epsilon(kExactTol));
  }
}
}  // namespace

// Hand-written expectations for lr 0.1, beta1 0.9, beta2 0.999, eps 1e-8. Element 0: param 1, grads
// 0.5, -0.25, 0.1. Element 1: param -2, grad 0 (m = v = 0: only weight decay moves it).
// Step 1 with bias correction: mhat = g, vhat = g^2, so the update is lr * g / (|g| + eps), sign-like.
TEST_CASE("adamw_update: three hand-computed steps without weight decay") {
  // step 1: m = 0.1*0.5 = 0.05, v = 0.001*0.25 = 0.00025, bc1 = 0.1, bc2 = 0.001
  const double p1 = 1.0 - 0.1 * (0.5 / (0.5 + 1e-8));
  // step 2: m = 0.9*0.05 + 0.1*(-0.25) = 0.02, v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225,
  //         bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.998001 = 0.001999
  const double p2 = p1 - 0.1 * ((0.02 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8));
  // step 3: m = 0.9*0.02 + 0.1*0.1 = 0.028, v = 0.999*0.00031225 + 0.001*0.01 = 0.00032193775,
  //         bc1 = 1 - 0.729 = 0.271, bc2 = 1 - 0.997002999 = 0.002997001
  const double p3 = p2 - 0.1 * ((0.028 / 0.271) / (std::sqrt(0.00032193775 / 0.002997001) + 1e-8));
  adam_steps({1.0, -2.0}, {{0.5, 0.0}, {-0.25, 0.0}, {0.1, 0.0}}, {{p1, -2.0}, {p2, -2.0}, {p3, -2.0}}, 0.0,
             1.0, {0.05, 0.0}, {0.00025, 0.0});
}

TEST_CASE("adamw_update: weight decay is decoupled and scaled by lr") {
  const double p1 = 1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.1 * 1.0);
  const double p2 = p1 - 0.1 * ((0.02 / 0.19) / (std::sqrt(0.00031225 / 0.001999) + 1e-8) + 0.1 * p1);
  // element 1: param *= (1 - lr*wd) = 0.99 per step: -1.98, -1.9602
  adam_steps({1.0, -2.0}, {{0.5, 0.0}, {-0.25, 0.0}}, {{p1, -1.98}, {p2, -1.9602}}, 0.1, 1.0, {0.05, 0.0},
             {0.00025, 0.0});
}

TEST_CASE("adamw_update: grad_scale multiplies the gradient before the moments") {
  // grads 0.5, -0.5 scaled by 0.5 -> g = 0.25, -0.25
  // step 1: m = 0.025, v = 0.001*0.0625 = 0.0000625
  const double p1 = 1.0 - 0.1 * (0.25 / (0.25 + 1e-8));
  // step 2: m = 0.9*0.025 - 0.025 = -0.0025, v = 0.999*0.0000625 + 0.001*0.0625 = 0.0001249375
  const double p2 = p1 - 0.1 * ((-0.0025 / 0.19) / (std::sqrt(0.0001249375 / 0.001999) + 1e-8));
  adam_steps({1.0, -2.0}, {{0.5, 0.0}, {-0.5, 0.0}}, {{p1, -2.0}, {p2, -2.0}}, 0.0, 0.5, {0.025, 0.0},
             {0.0000625, 0.0});
  Vec p = {1.0}, g = {1.0}, m = {0.0}, v = {0.0};
  CHECK_THROWS_AS(
      cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), 1, 0.1, 0.9, 0.999, 1e-8, 0.0, 1.0, 0),
      xtrain::Error);
}
