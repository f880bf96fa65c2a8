// The Llama family's CPU ops (src/backend/cpu/ops_llama.h): every backward against central finite
// differences in double, rotary against a hand-computed case and as an orthogonal map (its backward is
// its transpose), rotary at a position held in backend memory (the decoder's call) against the training
// call, and the fused residual_rmsnorm against its two ops.
#include <doctest/doctest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_llama.h"
#include <xtrain/backend/qkv_layout.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::QkvLayout;

namespace {
// Shapes: small, every dimension distinct, so a swapped index shows up as a wrong gradient.
constexpr int B = 2, T = 5, C = 8, N = B * T;
constexpr float kEps = 1e-5f, kTheta = 10000.0f;
}  // namespace

TEST_CASE("rmsnorm_backward matches finite differences") {
  Vec inp = random_vec(size_t(N) * C, 100, -1.0, 3.0);
  Vec w = random_vec(C, 101, 0.5, 1.5);
  const Vec R = random_vec(size_t(N) * C, 102);
  Vec out(size_t(N) * C), rstd(N);
  auto loss = [&] {
    cpu::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, kEps);
    return dot(out, R);
  };
  loss();
  const Vec saved_rstd = rstd;
  const Vec dinp0 = random_vec(inp.size(), 103), dw0 = random_vec(C, 104);  // backward accumulates
  Vec dinp = dinp0, dw = dw0;
  cpu::rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), saved_rstd.data(), N, C);
  check_grad("rmsnorm dinp", minus(dinp, dinp0), fd_gradient(inp, loss));
  check_grad("rmsnorm dw", minus(dw, dw0), fd_gradient(w, loss));
  // no mean subtracted: a row of constant value c normalizes to sign(c) * w (up to eps)
  Vec row(C, 3.0), one_out(C), one_rstd(1);
  cpu::rmsnorm_forward(one_out.data(), one_rstd.data(), row.data(), w.data(), 1, C, 0.0f);
  for (int c = 0; c < C; ++c) CHECK(one_out[c] == doctest::Approx(w[c]).epsilon(1e-12));
}

TEST_CASE("residual_rmsnorm: the sum and its RMSNorm; gradients to both summands match finite differences") {
  Vec a = random_vec(size_t(N) * C, 110, -2.0, 2.0), b = random_vec(size_t(N) * C, 111);
  Vec w = random_vec(C, 112, 0.5, 1.5);
  const Vec R = random_vec(size_t(N) * C, 113);
  Vec res(size_t(N) * C), out(size_t(N) * C), rstd(N);
  auto loss = [&] {
    cpu::residual_forward(res.data(), a.data(), b.data(), res.size());
    cpu::rmsnorm_forward(out.data(), rstd.data(), res.data(), w.data(), N, C, kEps);
    return dot(out, R);
  };
  loss();
  const Vec saved_res = res, saved_rstd = rstd;
  Vec dres(res.size(), 0.0), dw(C, 0.0);
  cpu::rmsnorm_backward(dres.data(), dw.data(), R.data(), saved_res.data(), w.data(), saved_rstd.data(), N, C);
  check_grad("residual_rmsnorm da", dres, fd_gradient(a, loss));
  check_grad("residual_rmsnorm db", dres, fd_gradient(b, loss));

  // the Backend's op (default: the two ops), res aliasing a as in the block, gives their bits
  auto be = xtrain::make_cpu_backend();
  const std::vector<float> af = to_float(a), bf = to_float(b), wf = to_float(w);
  std::vector<float> res1(af.size()), out1(af.size()), rstd1(N), out2(af.size()), rstd2(N), alias = af;
  be->residual_forward(res1.data(), af.data(), bf.data(), af.size());
  be->rmsnorm_forward(out1.data(), rstd1.data(), res1.data(), wf.data(), N, C, kEps);
  be->residual_rmsnorm_forward(alias.data(), out2.data(), rstd2.data(), alias.data(), bf.data(), wf.data(), N, C, kEps);
  CHECK(alias == res1);
  CHECK(out2 == out1);
  CHECK(rstd2 == rstd1);
}

TEST_CASE("rotary: backward matches finite differences and is the transpose of the forward (MHA, GQA)") {
  const int NH = 4, HS = 6;
  for (int KVH : {4, 2}) {
    CAPTURE(KVH);
    const size_t row = QkvLayout::row_width(NH, KVH, HS), count = size_t(N) * row;
    for (int pos : {0, 7}) {  // the backward always starts at 0 (training); the forward also elsewhere
      CAPTURE(pos);
      Vec x = random_vec(count, 120 + KVH), y = random_vec(count, 130 + KVH);
      Vec Rx = x;
      cpu::rotate_heads(Rx.data(), B, T, pos, NH, KVH, HS, kTheta, +1);
      Vec RTy = y;
      cpu::rotate_heads(RTy.data(), B, T, pos, NH, KVH, HS, kTheta, -1);
      CHECK(dot(Rx, y) == doctest::Approx(dot(x, RTy)).epsilon(1e-12));  // <R x, y> = <x, R^T y>
      CHECK(dot(Rx, Rx) == doctest::Approx(dot(x, x)).epsilon(1e-12));    // a rotation keeps the norm
      // v is untouched: the last KVH*HS channels of each row
      for (int n = 0; n < N; ++n)
        for (size_t j = row - size_t(KVH) * HS; j < row; ++j) CHECK(Rx[n * row + j] == x[n * row + j]);
    }
    // finite differences of L = <rotary(x), R> against rotary_backward (positions from 0)
    Vec x = random_vec(count, 140 + KVH);
    const Vec R = random_vec(count, 150 + KVH);
    auto loss = [&] {
      Vec y = x;
      cpu::rotate_heads(y.data(), B, T, 0, NH, KVH, HS, kTheta, +1);
      return dot(y, R);
    };
    Vec dx = R;
    cpu::rotate_heads(dx.data(), B, T, 0, NH, KVH, HS, kTheta, -1);
    check_grad("rotary dqkv", dx, fd_gradient(x, loss));
  }
}

TEST_CASE("rotary against a hand-computed case: HS=4 at position 3, rotate-half pairs (0,2) and (1,3)") {
  // one q head, one k head, one v head; theta 100: inv_freq = {1, 100^(-1/2)} = {1, 0.1}
  const int HS = 4;
  const float theta = 100.0f;
  Vec qkv = {1, 2, 3, 4, /*k*/ -1, 0.5, 2, -3, /*v*/ 9, 9, 9, 9};
  const Vec in = qkv;
  cpu::rotate_heads(qkv.data(), 1, 1, 3, 1, 1, HS, theta, +1);
  const double a0 = 3.0 * 1.0, a1 = 3.0 * double(float(1.0f / std::pow(100.0f, 0.5f)));
  for (int h = 0; h < 2; ++h) {
    const double* x = in.data() + h * HS;
    const double* y = qkv.data() + h * HS;
    CHECK(y[0] == doctest::Approx(x[0] * std::cos(a0) - x[2] * std::sin(a0)).epsilon(1e-6));
    CHECK(y[2] == doctest::Approx(x[2] * std::cos(a0) + x[0] * std::sin(a0)).epsilon(1e-6));
    CHECK(y[1] == doctest::Approx(x[1] * std::cos(a1) - x[3] * std::sin(a1)).epsilon(1e-6));
    CHECK(y[3] == doctest::Approx(x[3] * std::cos(a1) + x[1] * std::sin(a1)).epsilon(1e-6));
  }
  for (int j = 8; j < 12; ++j) CHECK(qkv[j] == 9.0);
  CHECK_THROWS(cpu::rotate_heads(qkv.data(), 1, 1, 0, 1, 1, 3, theta, +1));  // odd head size
}

TEST_CASE("rotary_forward at a position in backend memory equals row p of the training call (the decoder's case)") {
  auto be = xtrain::make_cpu_backend();
  const int NH = 4, KVH = 2, HS = 8, Tn = 6;
  const size_t row = QkvLayout::row_width(NH, KVH, HS);
  const std::vector<float> x = to_float(random_vec(size_t(Tn) * row, 160));
  std::vector<float> whole = x;
  be->rotary_forward(whole.data(), nullptr, 1, Tn, NH, KVH, HS, kTheta);  // null: positions from 0
  for (int32_t p = 0; p < Tn; ++p) {
    CAPTURE(p);
    std::vector<float> one(x.begin() + p * row, x.begin() + (p + 1) * row);
    be->rotary_forward(one.data(), &p, 1, 1, NH, KVH, HS, kTheta);
    CHECK(std::equal(one.begin(), one.end(), whole.begin() + p * row));  // bit for bit
    if (p > 0) CHECK(!std::equal(one.begin(), one.begin() + NH * HS, x.begin() + p * row));  // it did rotate
  }
}

TEST_CASE("swiglu_backward matches finite differences") {
  const int Fd = 7;
  Vec inp = random_vec(size_t(N) * 2 * Fd, 170, -4.0, 4.0);
  const Vec R = random_vec(size_t(N) * Fd, 171);
  auto loss = [&] {
    Vec out(size_t(N) * Fd);
    cpu::swiglu_forward(out.data(), inp.data(), N, Fd);
    return dot(out, R);
  };
  Vec dinp(inp.size(), 42.0);  // assigned: the 42s must go
  cpu::swiglu_backward(dinp.data(), R.data(), inp.data(), N, Fd);
  check_grad("swiglu dinp", dinp, fd_gradient(inp, loss));
  // silu(g) * u at one hand-computed point: g = 1, u = 2 -> 2 / (1 + e^-1)
  const Vec gu = {1.0, 2.0};
  Vec o(1);
  cpu::swiglu_forward(o.data(), gu.data(), 1, 1);
  CHECK(o[0] == doctest::Approx(2.0 / (1.0 + std::exp(-1.0))).epsilon(1e-14));
}

TEST_CASE("encoder without learned positions (wpe null): out = wte[tok], gradients into wte only") {
  const int V = 11;
  const std::vector<int32_t> tokens = random_tokens(N, V, 180);
  Vec wte = random_vec(size_t(V) * C, 181);
  const Vec R = random_vec(size_t(N) * C, 182);
  Vec out(size_t(N) * C);
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), static_cast<const double*>(nullptr), B, T, C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) CHECK(out[size_t(n) * C + c] == wte[size_t(tokens[n]) * C + c]);
  auto loss = [&] {
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), static_cast<const double*>(nullptr), B, T, C);
    return dot(out, R);
  };
  const Vec dwte0 = random_vec(wte.size(), 183);
  Vec dwte = dwte0;
  cpu::encoder_backward(dwte.data(), static_cast<double*>(nullptr), R.data(), tokens.data(), B, T, C);
  check_grad("encoder dwte (no wpe)", minus(dwte, dwte0), fd_gradient(wte, loss));
}
