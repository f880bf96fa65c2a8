// Every CPU backward op against central finite differences, in double precision (the double
// instantiations of src/backend/cpu/ops.h). For a random projection loss L = sum(out * R), the backward op run
// with dout = R must give dL/d(input) for every input. Gradient buffers start from random values, so
// the checks also confirm that backward ops accumulate (+=) rather than overwrite.
#include <doctest/doctest.h>

#include "backend/cpu/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::QkvLayout;

namespace {
// Shapes: small but with every dimension distinct, so a swapped index shows up as a wrong gradient.
constexpr int B = 2, T = 5, C = 8, V = 11, N = B * T;
}  // namespace

TEST_CASE("encoder_backward matches finite differences") {
  const int max_t = T + 2;  // wpe rows beyond T must get no gradient
  std::vector<int32_t> tokens = random_tokens(N, V, 1);
  tokens[7] = tokens[2];  // a repeated token: its wte row gets the sum of both positions
  Vec wte = random_vec(size_t(V) * C, 2), wpe = random_vec(size_t(max_t) * C, 3);
  const Vec R = random_vec(size_t(N) * C, 4);
  auto loss = [&] {
    Vec out(size_t(N) * C);
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, R);
  };
  const Vec dwte0 = random_vec(wte.size(), 5), dwpe0 = random_vec(wpe.size(), 6);
  Vec dwte = dwte0, dwpe = dwpe0;
  cpu::encoder_backward(dwte.data(), dwpe.data(), R.data(), tokens.data(), B, T, C);
  check_grad("encoder dwte", minus(dwte, dwte0), fd_gradient(wte, loss));
  check_grad("encoder dwpe", minus(dwpe, dwpe0), fd_gradient(wpe, loss));
}

TEST_CASE("layernorm_backward matches finite differences") {
  Vec inp = random_vec(size_t(N) * C, 10, -1.0, 3.0);  // non-zero mean per row
  Vec w = random_vec(C, 11, 0.5, 1.5), b = random_vec(C, 12);
  const Vec R = random_vec(size_t(N) * C, 13);
  Vec out(size_t(N) * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, R);
  };
  loss();  // mean, rstd at the unperturbed point, as the training step saves them
  const Vec saved_mean = mean, saved_rstd = rstd;
  const Vec dinp0 = random_vec(inp.size(), 14), dw0 = random_vec(C, 15), db0 = random_vec(C, 16);
  Vec dinp = dinp0, dw = dw0, db = db0;
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), R.data(), inp.data(), w.data(),
                          saved_mean.data(), saved_rstd.data(), N, C);
  check_grad("layernorm dinp", minus(dinp, dinp0), fd_gradient(inp, loss));
  check_grad("layernorm dw", minus(dw, dw0), fd_gradient(w, loss));
  check_grad("layernorm db", minus(db, db0), fd_gradient(b, loss));
}

TEST_CASE("matmul_backward matches finite differences") {
  const int IC = C, OC = 6;
  Vec inp = random_vec(size_t(N) * IC, 20), w = random_vec(size_t(OC) * IC, 21), bias = random_vec(OC, 22);
  const Vec R = random_vec(size_t(N) * OC, 23);
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    auto loss = [&] {
      Vec out(size_t(N) * OC);
      cpu::matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
      return dot(out, R);
    };
    const Vec dinp0 = random_vec(inp.size(), 24), dw0 = random_vec(w.size(), 25), db0 = random_vec(OC, 26);
    Vec dinp = dinp0, dw = dw0, db = db0;
    cpu::matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(), inp.data(),
                         w.data(), N, IC, OC);
    check_grad("matmul dinp", minus(dinp, dinp0), fd_gradient(inp, loss));
    check_grad("matmul dw", minus(dw, dw0), fd_gradient(w, loss));
    if (with_bias) check_grad("matmul dbias", minus(db, db0), fd_gradient(bias, loss));
  }
}

TEST_CASE("attention_backward matches finite differences (MHA, GQA, MQA)") {
  const int NH = 4, HS = 4;
  for (int KVH : {4, 2, 1}) {
    CAPTURE(KVH);
    const size_t row = QkvLayout::row_width(NH, KVH, HS);
    Vec qkv = random_vec(size_t(N) * row, 30 + KVH, -2.0, 2.0);  // wide range: peaked, non-uniform softmax
    const Vec R = random_vec(size_t(N) * NH * HS, 40 + KVH);
    Vec out(size_t(N) * NH * HS), att(size_t(B) * NH * T * T);
    auto loss = [&] {
      cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
      return dot(out, R);
    };
    loss();
    const Vec saved_att = att;
    const Vec dqkv0 = random_vec(qkv.size(), 50 + KVH);
    Vec dqkv = dqkv0;
    cpu::attention_backward(dqkv.data(), R.data(), qkv.data(), saved_att.data(), B, T, NH, KVH, HS);
    check_grad("attention dqkv (KVH=" + std::to_string(KVH) + ")", minus(dqkv, dqkv0),
               fd_gradient(qkv, loss));
  }
}

TEST_CASE("gelu_backward matches finite differences") {
  Vec inp = random_vec(size_t(N) * C, 60, -4.0, 4.0);
  const Vec R = random_vec(inp.size(), 61);
  auto loss = [&] {
    Vec out(inp.size());
    cpu::gelu_forward(out.data(), inp.data(), inp.size());
    return dot(out, R);
  };
  const Vec dinp0 = random_vec(inp.size(), 62);
  Vec dinp = dinp0;
  cpu::gelu_backward(dinp.data(), inp.data(), R.data(), inp.size());
  check_grad("gelu dinp", minus(dinp, dinp0), fd_gradient(inp, loss));
}

TEST_CASE("cross_entropy dlogits matches finite differences, also in place") {
  const double dloss = 0.37;  // != 1: dlogits must be scaled by it
  Vec logits = random_vec(size_t(N) * V, 70, -3.0, 3.0);
  const std::vector<int32_t> targets = random_tokens(N, V, 71);
  // The op's gradient is d(dloss * sum_n loss_n) / dlogits.
  auto loss = [&] {
    Vec losses(N);
    cpu::cross_entropy_forward_backward(losses.data(), static_cast<double*>(nullptr), logits.data(),
                                        targets.data(), dloss, N, V, V);
    double s = 0.0;
    for (double l : losses) s += l;
    return dloss * s;
  };
  Vec losses(N), dlogits(logits.size());
  cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N,
                                      V, V);
  check_grad("cross entropy dlogits", dlogits, fd_gradient(logits, loss));

  Vec fused = logits, fused_losses(N);  // dlogits aliasing logits: same losses, same gradient
  cpu::cross_entropy_forward_backward(fused_losses.data(), fused.data(), fused.data(), targets.data(), dloss,
                                      N, V, V);
  CHECK(fused_losses == losses);
  CHECK(fused == dlogits);
}

TEST_CASE("cross_entropy over a padded row stride: padded columns change nothing and get zero gradient") {
  const double dloss = 0.37;
  const int Vp = V + 5;  // padded vocabulary (GPTConfig::Vp rounds to 64; any Vp >= V is allowed)
  Vec padded = random_vec(size_t(N) * Vp, 72, -3.0, 3.0);
  const std::vector<int32_t> targets = random_tokens(N, V, 73);
  Vec dense(size_t(N) * V);  // the same first V columns, unpadded
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < V; ++i) dense[size_t(n) * V + i] = padded[size_t(n) * Vp + i];
  Vec losses_dense(N), d_dense(dense.size());
  cpu::cross_entropy_forward_backward(losses_dense.data(), d_dense.data(), dense.data(), targets.data(), dloss, N, V, V);
  auto loss = [&] {  // d(dloss * sum_n loss_n) / d(padded logits), padded columns included
    Vec losses(N);
    cpu::cross_entropy_forward_backward(losses.data(), static_cast<double*>(nullptr), padded.data(), targets.data(),
                                        dloss, N, V, Vp);
    double s = 0.0;
    for (double l : losses) s += l;
    return dloss * s;
  };
  Vec losses(N), dpadded(padded.size(), 42.0);  // 42: the zeros must be written
  cpu::cross_entropy_forward_backward(losses.data(), dpadded.data(), padded.data(), targets.data(), dloss, N, V, Vp);
  CHECK(losses == losses_dense);  // the padding values (random, up to 3) do not enter the loss
  check_grad("cross entropy dlogits (padded)", dpadded, fd_gradient(padded, loss));
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < Vp; ++i) {
      const double g = dpadded[size_t(n) * Vp + i];
      if (i >= V) CHECK(g == 0.0);
      else CHECK(g == d_dense[size_t(n) * V + i]);
    }
}

TEST_CASE("dropout backward (the same call on the gradient) matches finite differences") {
  const float p = 0.3f;
  const std::vector<uint64_t> keys = {0x1234u, 0xBEEFu};
  const size_t per_seq = size_t(T) * C;
  Vec x = random_vec(size_t(B) * per_seq, 80);
  const Vec R = random_vec(x.size(), 81);
  auto loss = [&] {
    Vec y = x;
    cpu::dropout_apply(y.data(), keys.data(), B, per_seq, p);
    return dot(y, R);
  };
  Vec dx = R;  // dL/dy = R; backward = dropout_apply on the gradient with the same keys
  cpu::dropout_apply(dx.data(), keys.data(), B, per_seq, p);
  check_grad("dropout dx", dx, fd_gradient(x, loss));
}
