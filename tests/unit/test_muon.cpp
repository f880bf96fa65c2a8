// Muon and the schedules on the CPU backend (the oracle): the Newton-Schulz iteration's defining property,
// the momentum with Nesterov against a plain reference, a whole Muon step of a model against one written
// out in double, the fused matrices' parts, the learning-rate adjustments, the wsd / linear schedules and
// the checkpoint's optimizer fields.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "comm/solo_group.h"
#include "fixtures.h"
#include <xtrain/checkpoint/checkpoint.h>
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include <xtrain/model/model_params.h>
#include <xtrain/train/optim.h>

using namespace xtrain;

namespace {
using Mat = std::vector<double>;  // row-major

// householder: I - 2 v v^T / |v|^2 (n, n), v random: an orthogonal matrix
Mat householder(int n, uint64_t key) {
  std::vector<double> v(n);
  double vv = 0;
  for (int i = 0; i < n; ++i) v[i] = normal(key, i), vv += v[i] * v[i];
  Mat h(size_t(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) h[size_t(i) * n + j] = (i == j) - 2 * v[i] * v[j] / vv;
  return h;
}
Mat matmul(const Mat& a, const Mat& b, int m, int k, int n) {
  Mat c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) c[size_t(i) * n + j] += a[size_t(i) * k + p] * b[size_t(p) * n + j];
  return c;
}
Mat transpose(const Mat& a, int m, int n) {
  Mat t(a.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) t[size_t(j) * m + i] = a[size_t(i) * n + j];
  return t;
}
// orthogonal: a product of two Householder reflections (n, n)
Mat orthogonal(int n, uint64_t key) { return matmul(householder(n, key), householder(n, key + 1), n, n, n); }

// ns_scalar: the iteration on one singular value s of X / ||X||_F
double ns_scalar(double s, int steps) {
  const double a = kMuonNsCoefficients[0], b = kMuonNsCoefficients[1], c = kMuonNsCoefficients[2];
  for (int k = 0; k < steps; ++k) s = a * s + b * s * s * s + c * s * s * s * s * s;
  return s;
}

// ns_reference: torch.optim.Muon's _zeropower_via_newtonschulz of x (rows, cols), in double
Mat ns_reference(Mat x, int rows, int cols, int steps, double eps) {
  const bool tall = rows > cols;
  if (tall) x = transpose(x, rows, cols), std::swap(rows, cols);
  double ss = 0;
  for (double v : x) ss += v * v;
  const double norm = std::max(std::sqrt(ss), eps);
  for (double& v : x) v /= norm;
  const double a = kMuonNsCoefficients[0], b = kMuonNsCoefficients[1], c = kMuonNsCoefficients[2];
  for (int k = 0; k < steps; ++k) {
    const Mat A = matmul(x, transpose(x, rows, cols), rows, cols, rows);
    const Mat AA = matmul(A, A, rows, rows, rows);
    Mat B(A.size());
    for (size_t i = 0; i < B.size(); ++i) B[i] = b * A[i] + c * AA[i];
    const Mat BX = matmul(B, x, rows, rows, cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = a * x[i] + BX[i];
  }
  return tall ? transpose(x, rows, cols) : x;
}

// fp32 Newton-Schulz against the double one: 5 steps of products of O(1) entries (|a| + |b| + |c| ~ 10 per
// step on the spectrum) turn fp32's 6e-8 into a few 1e-6 at most.
constexpr double kNsTol = 2e-5;
}  // namespace

TEST_CASE("newton_schulz: each singular value of X/||X||_F goes through the scalar iteration, into the band") {
  auto be = make_cpu_backend();
  for (const std::pair<int, int>& shape : {std::pair{8, 24}, std::pair{24, 8}, std::pair{12, 12}}) {
    const int rows = shape.first, cols = shape.second;
    CAPTURE(rows);
    CAPTURE(cols);
    const int r = std::min(rows, cols);
    // X = U diag(s) V^T: U (rows, rows), V (cols, cols) orthogonal, s spread over two decades (scaled by 7:
    // the iteration sees X / ||X||_F, any scale)
    const Mat U = orthogonal(rows, 11), V = orthogonal(cols, 21);
    std::vector<double> s(r);
    for (int i = 0; i < r; ++i) s[i] = 7.0 * std::pow(10.0, -2.0 * i / (r - 1));
    Mat D(size_t(rows) * cols, 0.0);
    for (int i = 0; i < r; ++i) D[size_t(i) * cols + i] = s[i];
    const Mat X = matmul(matmul(U, D, rows, rows, cols), transpose(V, cols, cols), rows, cols, cols);
    double fro = 0;
    for (double v : s) fro += v * v;
    fro = std::sqrt(fro);
    const int batch = 2;  // the same matrix twice, and its negative: batched matrices are independent
    std::vector<float> x(size_t(batch) * rows * cols);
    for (size_t i = 0; i < X.size(); ++i) x[i] = static_cast<float>(X[i]), x[X.size() + i] = -static_cast<float>(X[i]);
    be->newton_schulz(x.data(), batch, rows, cols, 5, kMuonEps);
    // U^T Y V is diag(p(s / ||s||)), p the scalar iteration: the singular vectors stay, the values move
    Mat Y(x.begin(), x.begin() + X.size());
    const Mat S = matmul(matmul(transpose(U, rows, rows), Y, rows, rows, cols), V, rows, cols, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) {
        const double want = i == j ? ns_scalar(s[i] / fro, 5) : 0.0;
        CAPTURE(i);
        CAPTURE(j);
        CHECK(std::abs(S[size_t(i) * cols + j] - want) < kNsTol);
        if (i == j && s[i] / fro >= 0.003) {  // the band of kMuonNsBand
          CHECK(S[size_t(i) * cols + j] >= kMuonNsBand[0]);
          CHECK(S[size_t(i) * cols + j] <= kMuonNsBand[1]);
        }
      }
    // the second matrix: -X gives -Y
    for (size_t i = 0; i < X.size(); ++i) CHECK(x[X.size() + i] == -x[i]);
    // and the whole result against torch's algorithm written out in double
    const Mat ref = ns_reference(X, rows, cols, 5, kMuonEps);
    for (size_t i = 0; i < X.size(); ++i) CHECK(std::abs(x[i] - ref[i]) < kNsTol);
  }
  // a zero matrix stays zero (eps keeps the division finite), and 0 steps only normalize
  std::vector<float> z(6, 0.0f);
  be->newton_schulz(z.data(), 1, 2, 3, 5, kMuonEps);
  for (float v : z) CHECK(v == 0.0f);
  std::vector<float> one = {3.0f, 4.0f};
  be->newton_schulz(one.data(), 1, 1, 2, 0, kMuonEps);
  CHECK(one[0] == doctest::Approx(0.6).epsilon(1e-7));
  CHECK(one[1] == doctest::Approx(0.8).epsilon(1e-7));
  CHECK_THROWS(be->newton_schulz(one.data(), 1, 0, 2, 5, kMuonEps));
  CHECK_THROWS(be->newton_schulz(one.data(), 1, 1, 2, -1, kMuonEps));
}

TEST_CASE("muon_momentum: Nesterov momentum as torch.optim.Muon, against a plain reference") {
  auto be = make_cpu_backend();
  const size_t n = 37;
  const float mu = 0.95f, scale = 0.5f;
  std::vector<float> buf(n, 0.0f), out(n), grad(n);
  std::vector<double> rbuf(n, 0.0);
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < n; ++i) grad[i] = static_cast<float>(normal(7 + step, i));
    be->muon_momentum(buf.data(), out.data(), grad.data(), {{0, 0, 0, n}}, mu, true, scale);
    for (size_t i = 0; i < n; ++i) {
      const double g = double(grad[i]) * scale;
      rbuf[i] = mu * rbuf[i] + (1 - double(mu)) * g;  // B = mu B + (1 - mu) g
      const double want = (1 - double(mu)) * g + mu * rbuf[i];  // g + mu (B - g)
      CHECK(buf[i] == doctest::Approx(rbuf[i]).epsilon(1e-5));
      CHECK(out[i] == doctest::Approx(want).epsilon(1e-5));
    }
  }
  // without Nesterov the update is the buffer itself
  be->muon_momentum(buf.data(), out.data(), grad.data(), {{0, 0, 0, n}}, mu, false, scale);
  CHECK(std::equal(buf.begin(), buf.end(), out.begin()));
  // muon_apply: param * decay - lr * update
  std::vector<float> p = {1.0f, -2.0f}, u = {0.5f, 0.25f};
  be->muon_apply(p.data(), u.data(), {{0, 0, 0, 2}}, 0.9f, 0.1f);
  CHECK(p[0] == doctest::Approx(0.85f));
  CHECK(p[1] == doctest::Approx(-1.825f));
}

TEST_CASE("muon_momentum and muon_apply over spans: each span's elements as a call of its own, at its lr") {
  auto be = make_cpu_backend();
  // two matrices, stored in a different order in each buffer, and a gap the ops must leave alone
  const std::vector<MuonSpan> spans = {{10, 0, 7, 5, 1.0}, {0, 5, 0, 7, 2.0}};
  std::vector<float> grad(15), buf(12, 0.5f), out(12, -9.0f), param(15);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(normal(31, i)), param[i] = float(i);
  std::vector<float> buf1 = buf, out1 = out, param1 = param;
  be->muon_momentum(buf.data(), out.data(), grad.data(), spans, 0.9f, true, 0.5f);
  be->muon_apply(param.data(), out.data(), spans, 0.99f, 0.1f);
  for (const MuonSpan& s : spans) {
    be->muon_momentum(buf1.data() + s.state_at, out1.data() + s.update_at, grad.data() + s.param_at,
                      {{0, 0, 0, s.count}}, 0.9f, true, 0.5f);
    be->muon_apply(param1.data() + s.param_at, out1.data() + s.update_at, {{0, 0, 0, s.count}}, 0.99f,
                   static_cast<float>(static_cast<double>(0.1f) * s.lr_ratio));
  }
  CHECK(buf == buf1);
  CHECK(out == out1);
  CHECK(param == param1);
  for (size_t i = 7; i < 10; ++i) CHECK(param[i] == float(i));  // the gap between the spans
  // spans overlapping in any buffer are refused (one launch would race)
  CHECK_THROWS(be->muon_momentum(buf.data(), out.data(), grad.data(), {{0, 0, 0, 4}, {3, 4, 4, 4}}, 0.9f, true, 1.0f));
  CHECK_THROWS(be->muon_apply(param.data(), out.data(), {{0, 0, 0, 4}, {4, 4, 2, 4}}, 0.9f, 0.1f));
  CHECK_NOTHROW(be->muon_apply(param.data(), out.data(), {{0, 0, 0, 4}, {4, 4, 4, 4}}, 0.9f, 0.1f));
}

TEST_CASE("muon_matrices: the blocks' matrices, fused ones cut into q/k/v and gate/up") {
  GPTConfig c = test::tiny_gpt2();
  auto be = make_cpu_backend();
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    c.arch = arch;
    CAPTURE(c.describe());
    GPT model(c, *be);
    const std::vector<MuonMatrix> m = muon_matrices(model);
    // per block: q (16,16), k (8,16), v (8,16), proj (16,16), then fc: gpt2 one (24,16), llama gate and up
    // (24,16) each, then down (16,24)
    std::vector<std::pair<int, int>> want = {{16, 16}, {8, 16}, {8, 16}, {16, 16}};
    if (arch == Arch::llama) want.push_back({24, 16});
    want.push_back({24, 16}), want.push_back({16, 24});
    REQUIRE(m.size() == want.size() * c.L);
    for (int l = 0; l < c.L; ++l) {
      const ParamTensor& qkv = model.layout()[layer_param_index(l, kQkvW)];
      const ParamTensor& fc = model.layout()[layer_param_index(l, kFcW)];
      const size_t k = want.size() * l;
      CHECK(m[k].offset == qkv.offset);
      CHECK(m[k + 1].offset == qkv.offset + 16 * 16);  // k follows q's rows
      CHECK(m[k + 2].offset == qkv.offset + 24 * 16);
      CHECK(m[k + 4].offset == fc.offset);
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK(m[k + i].rows == want[i].first);
        CHECK(m[k + i].cols == want[i].second);
      }
    }
  }
}

TEST_CASE("Optimizer muon: one step of a model equals torch.optim.Muon's written out, AdamW on the rest") {
  const GPTConfig c = test::tiny_llama(/*tie=*/0);
  auto be = make_cpu_backend();
  GPT model(c, *be);
  model.init_params(5);
  class One final : public SoloCollectives<Communicator> {  // a world of one rank: Muon runs no collective
   public:
    std::string name() const override { return "one"; }
    void all_reduce(float*, size_t, ReduceOp) override { FAIL("no collective at world 1"); }
    void broadcast(float*, size_t, int) override {}
  } comm;
  OptimConfig oc;
  oc.kind = OptimizerKind::muon, oc.warmup_steps = 0, oc.total_steps = 10, oc.min_lr_frac = 1.0f;
  oc.muon.lr = 0.02f, oc.muon.weight_decay = 0.1f, oc.muon.adjust = MuonAdjust::original;
  Optimizer opt(*be, comm, model, oc);
  REQUIRE(opt.muon() != nullptr);
  const size_t n = model.num_params();
  const std::vector<MuonMatrix> mats = muon_matrices(model);
  std::vector<double> ref_buf;
  for (const MuonMatrix& m : mats) ref_buf.resize(ref_buf.size() + m.count(), 0.0);
  for (int t = 1; t <= 2; ++t) {
    for (size_t i = 0; i < n; ++i) model.grads()[i] = static_cast<float>(0.01 * normal(100 + t, i));
    const std::vector<float> before(model.params(), model.params() + n);
    const float scale = 0.8f;  // as clipping would
    opt.step(model, t, scale, oc);
    size_t at = 0;
    std::vector<bool> muon_elem(n, false);
    for (const MuonMatrix& m : mats) {
      Mat upd(m.count());
      for (size_t i = 0; i < m.count(); ++i) {
        const double g = double(model.grads()[m.offset + i]) * scale;
        ref_buf[at + i] = 0.95 * ref_buf[at + i] + 0.05 * g;
        upd[i] = 0.05 * g + 0.95 * ref_buf[at + i];
        muon_elem[m.offset + i] = true;
      }
      const Mat o = ns_reference(upd, m.rows, m.cols, 5, kMuonEps);
      const double lr = 0.02, adj = lr * std::sqrt(std::max(1.0, double(m.rows) / m.cols));
      for (size_t i = 0; i < m.count(); ++i) {
        const double want = before[m.offset + i] * (1 - lr * 0.1) - adj * o[i];
        CAPTURE(t);
        CAPTURE(i);
        CHECK(std::abs(model.params()[m.offset + i] - want) < adj * kNsTol + 1e-7);
      }
      at += m.count();
    }
    // AdamW took every other tensor and left Muon's moments at zero
    size_t adam_moved = 0;
    for (size_t i = 0; i < n; ++i) {
      if (muon_elem[i]) CHECK(opt.adamw().m()[i] == 0.0f);
      else adam_moved += model.params()[i] != before[i];
    }
    CHECK(adam_moved > n / 10);
  }
  // the momentum buffers kept are the reference's, matrices in buffer order
  for (size_t i = 0; i < ref_buf.size(); ++i) CHECK(opt.muon()->momentum()[i] == doctest::Approx(ref_buf[i]).epsilon(1e-5));
}

TEST_CASE("muon_adjusted_lr: torch.optim.Muon's adjust_lr_fn") {
  CHECK(muon_adjusted_lr(MuonAdjust::original, 0.02f, 64, 16) == doctest::Approx(0.04f));  // sqrt(4)
  CHECK(muon_adjusted_lr(MuonAdjust::original, 0.02f, 16, 64) == doctest::Approx(0.02f));  // max(1, 1/4)
  CHECK(muon_adjusted_lr(MuonAdjust::match_rms_adamw, 0.02f, 16, 100) == doctest::Approx(0.04f));  // 0.2 * 10
}

TEST_CASE("schedules: cosine, linear and wsd; a wsd run extended in its stable phase plans its decay again") {
  OptimConfig c;
  c.lr = 1.0f, c.min_lr_frac = 0.1f, c.warmup_steps = 10, c.total_steps = 110;
  // warmup is the same for all three
  for (LrSchedule s : {LrSchedule::cosine, LrSchedule::linear, LrSchedule::wsd}) {
    c.schedule = s;
    CHECK(lr_at(c, 5) == doctest::Approx(0.5f));
    CHECK(lr_at(c, 10) == doctest::Approx(1.0f));
    CHECK(lr_at(c, 110) == doctest::Approx(0.1f));
    CHECK(lr_at(c, 500) == doctest::Approx(0.1f));  // past the schedule: its final rate
    CHECK(lr_at(c, 5, 0.02f) == doctest::Approx(0.01f));  // Muon's peak, the same shape
  }
  c.schedule = LrSchedule::cosine;
  CHECK(lr_at(c, 60) == doctest::Approx(0.55f));  // half way: the mean of peak and floor
  c.schedule = LrSchedule::linear;
  CHECK(lr_at(c, 60) == doctest::Approx(0.55f));
  CHECK(lr_at(c, 35) == doctest::Approx(0.1f + 0.9f * 0.75f));
  c.schedule = LrSchedule::wsd, c.decay_frac = 0.2f;  // decay over the last 22 steps: stable to step 88
  CHECK(wsd_decay_start(110, 10, 0.2f) == 88);
  CHECK(lr_at(c, 60) == 1.0f);
  CHECK(lr_at(c, 88) == 1.0f);
  CHECK(lr_at(c, 99) == doctest::Approx(0.1f + 0.9f * 0.5f));
  CHECK(wsd_decay_start(110, 100, 0.2f) == 100);  // never before the warmup's end
  // extension: from step 80 (stable) to 220 steps: planned again, stable to step 176; from step 90 (decaying): not
  CHECK(wsd_replans(LrSchedule::wsd, 80, 110, 10, 0.2f, 220));
  CHECK(wsd_replans(LrSchedule::wsd, 88, 110, 10, 0.2f, 220));
  CHECK_FALSE(wsd_replans(LrSchedule::wsd, 89, 110, 10, 0.2f, 220));
  CHECK_FALSE(wsd_replans(LrSchedule::wsd, 80, 110, 10, 0.2f, 110));  // not longer
  CHECK_FALSE(wsd_replans(LrSchedule::cosine, 80, 110, 10, 0.2f, 220));
  c.total_steps = 220;
  CHECK(lr_at(c, 176) == 1.0f);
  CHECK(lr_at(c, 177) < 1.0f);
  // options' words
  CHECK(parse_optimizer("muon") == OptimizerKind::muon);
  CHECK(parse_lr_schedule("wsd") == LrSchedule::wsd);
  CHECK(parse_muon_adjust("match_rms_adamw") == MuonAdjust::match_rms_adamw);
  CHECK_THROWS_AS(parse_optimizer("sgd"), UsageError);
  CHECK(std::string(to_string(LrSchedule::linear)) == "linear");
}

TEST_CASE("checkpoint format 04: the optimizer's fields and Muon's momentum round-trip, for both families") {
  for (Arch arch : {Arch::gpt2, Arch::llama}) {
    CheckpointState st;
    GPTConfig& mc = st.meta.model;  // a real (tiny) model: a header's parameter count must be its model's
    mc = test::model_config(16, 4, 8, 1, 2, 2, 4, 16), mc.arch = arch;
    const size_t n = mc.num_params();
    st.meta.step = 3, st.meta.batch = 4, st.meta.total_steps = 10, st.meta.num_params = n;
    st.meta.optimizer = 1, st.meta.lr_schedule = 1, st.meta.decay_frac = 0.25f, st.meta.beta2 = 0.99f;
    st.meta.muon_lr = 0.02f, st.meta.muon_momentum = 0.95f, st.meta.muon_ns_steps = 5, st.meta.muon_adjust = 1;
    st.meta.muon_matrices = 1, st.meta.muon_count = 4;
    st.params.assign(n, 1.5f), st.m.assign(n, 0.0f), st.v.assign(n, 2.0f);
    st.params[0] = 1, st.params[n - 1] = 6, st.m[n - 1] = 1;
    st.momentum = {0.5f, -0.5f, 0.25f, 8.0f};
    const std::string path = "test_muon_" + std::string(arch == Arch::gpt2 ? "gpt2" : "llama") + ".ckpt";
    save_checkpoint(path, st);
    const CheckpointState back = load_checkpoint(path);
    CHECK(back.meta.optimizer == 1);
    CHECK(back.meta.lr_schedule == 1);
    CHECK(back.meta.decay_frac == 0.25f);
    CHECK(back.meta.beta2 == 0.99f);
    CHECK(back.meta.muon_adjust == 1);
    CHECK(back.meta.muon_count == 4);
    CHECK(back.momentum == st.momentum);
    CHECK(back.params == st.params);
    CHECK(back.v == st.v);
    CHECK(back.meta.model.arch == arch);
    // a momentum count past the parameters is refused in one line, before any size arithmetic
    st.meta.muon_count = n + 1, st.momentum.resize(n + 1);
    save_checkpoint(path, st);
    const std::string why = "muon_count = " + std::to_string(n + 1) + " is out of range";
    CHECK_THROWS_WITH_AS(load_checkpoint(path), doctest::Contains(why.c_str()), Error);
    std::remove(path.c_str());
  }
}
