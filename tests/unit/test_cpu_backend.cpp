// The float CpuBackend, used through the virtual Backend interface and its own memory, against the
// double templates of src/backend/cpu/ops.h on the same (float-representable) inputs.
#include <cstdlib>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include "cpu_ops_test_util.h"

namespace cpu = xtrain::cpu;
using namespace xtrain::test;
using xtrain::QkvLayout;
using xtrain::Backend;
using xtrain::DeviceBuffer;

namespace {
// Float vs double on identical inputs: float intermediates (rounding 6e-8 each, a few dozen per output,
// saved mean/rstd/att rounded to float) give ~1e-6 relative; 1e-5 still catches any wrong index.
constexpr double kFloatTol = 1e-5;

constexpr int B = 2, T = 5, C = 8, V = 11, N = B * T, OC = 6, NH = 4, KVH = 2, HS = 4;

// rounded: random values rounded to float, so both precisions see exactly the same inputs.
Vec rounded(size_t n, uint64_t key, double lo = -1.0, double hi = 1.0) {
  return to_double(to_float(random_vec(n, key, lo, hi)));
}

struct Device {  // float copies of double vectors in the backend's memory
  Backend& be;
  DeviceBuffer<float> up(const Vec& v) {
    DeviceBuffer<float> d(be, v.size());
    const std::vector<float> f = to_float(v);
    be.copy_to_device(d.get(), f.data(), d.bytes());
    return d;
  }
  Vec down(const DeviceBuffer<float>& d) {
    std::vector<float> f(d.count());
    be.copy_to_host(f.data(), d.get(), d.bytes());
    return to_double(f);
  }
};

void check_close(const std::string& what, const Vec& got, const Vec& ref) {
  const double err = rel_err(got, ref);
  MESSAGE(what << ": float backend vs double, max rel err " << err);
  CHECK(err < kFloatTol);
}
}  // namespace

TEST_CASE("--device, --dtype and --attention parse once into enums; make_backend resolves automatic on the CPU") {
  namespace xt = xtrain;
  for (const char* d : {"auto", "cpu", "cuda"}) CHECK(std::string(xt::to_string(xt::parse_device(d))) == d);
  for (const char* t : {"auto", "fp32", "bf16"}) CHECK(std::string(xt::to_string(xt::parse_dtype(t))) == t);
  CHECK_THROWS_AS(xt::parse_device("gpu"), xt::UsageError);
  CHECK_THROWS_AS(xt::parse_dtype("fp16"), xt::UsageError);
  auto be = xt::make_backend(xt::BackendOptions{xt::Device::cpu, 0, 1, xt::DType::automatic});
  CHECK(be->kind() == xt::Device::cpu);
  CHECK(be->dtype() == xt::DType::fp32);
  CHECK(be->activation_bytes() == 4);
  CHECK_THROWS_AS(xt::make_backend(xt::BackendOptions{xt::Device::cpu, 0, 1, xt::DType::bf16}), xt::UsageError);
  // --attention: the words round-trip; the CPU backend (one route, the oracle) takes auto only
  for (const char* a : {"auto", "flash", "gemm", "cudnn"})
    CHECK(std::string(xt::to_string(xt::parse_attention(a))) == a);
  CHECK_THROWS_AS(xt::parse_attention("fast"), xt::UsageError);
  CHECK(xt::make_backend(xt::BackendOptions{xt::Device::cpu, 0, 1, xt::DType::fp32, xt::Attention::automatic}));
  CHECK_THROWS_AS(xt::make_backend(xt::BackendOptions{xt::Device::cpu, 0, 1, xt::DType::fp32, xt::Attention::cudnn}),
                  xt::UsageError);
}

// a DYNAMIC_ARCH OpenBLAS exports it (cpu_backend.cpp declares it the same way)
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));

TEST_CASE("CpuBackend: name, one BLAS thread, aligned memory") {
  auto be = xtrain::make_cpu_backend();
  CHECK(be->name() == "cpu");
  MESSAGE("device_name: " << be->device_name());
  CHECK(be->device_name().find("OpenBLAS") != std::string::npos);
  CHECK(be->device_name().find(", 1 thread)") != std::string::npos);
#if defined(__x86_64__)
  // OpenBLAS's generic fallback (Prescott, SSE3) replaced at load where the library can switch (a DYNAMIC_ARCH
  // build), the CPU has AVX2 and FMA and the user chose no kernels (cpu_backend.cpp: a library older than the CPU
  // falls back so, at a quarter of the GEMM speed); the environment is left as it was
  __builtin_cpu_init();
  if (gotoblas_dynamic_init != nullptr && std::getenv("OPENBLAS_CORETYPE") == nullptr &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    CHECK(be->device_name().find("Prescott") == std::string::npos);
#endif
  for (size_t bytes : {0, 1, 100, 4096}) {
    void* p = be->alloc(bytes);
    CHECK(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    be->zero(p, bytes);
    be->free(p);
  }
  be->free(nullptr);
}

TEST_CASE("CpuBackend float ops equal the double templates") {
  auto be = xtrain::make_cpu_backend();
  Device dev{*be};
  const std::vector<int32_t> tokens = random_tokens(N, V, 1);
  const Vec x = rounded(N * C, 2, -1.0, 3.0), w = rounded(C, 3, 0.5, 1.5), b = rounded(C, 4),
            dout = rounded(N * C, 5);
  DeviceBuffer<float> x_d = dev.up(x), w_d = dev.up(w), b_d = dev.up(b), dout_d = dev.up(dout);
  DeviceBuffer<int32_t> tok_d(*be, N);
  be->copy_to_device(tok_d.get(), tokens.data(), tok_d.bytes());

  SUBCASE("encoder") {
    const Vec wte = rounded(V * C, 6), wpe = rounded(T * C, 7);
    Vec out(N * C), dwte(V * C), dwpe(T * C);
    auto wte_d = dev.up(wte), wpe_d = dev.up(wpe), out_d = dev.up(out), dwte_d = dev.up(dwte),
         dwpe_d = dev.up(dwpe);
    cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    be->encoder_forward(out_d.get(), tok_d.get(), wte_d.get(), wpe_d.get(), B, T, C);
    be->encoder_backward(dwte_d.get(), dwpe_d.get(), dout_d.get(), tok_d.get(), B, T, C);
    check_close("encoder out", dev.down(out_d), out);
    check_close("encoder dwte", dev.down(dwte_d), dwte);
    check_close("encoder dwpe", dev.down(dwpe_d), dwpe);
  }
  SUBCASE("layernorm") {
    Vec out(N * C), mean(N), rstd(N), dinp(N * C), dw(C), db(C);
    auto out_d = dev.up(out), mean_d = dev.up(mean), rstd_d = dev.up(rstd), dinp_d = dev.up(dinp),
         dw_d = dev.up(dw), db_d = dev.up(db);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    be->layernorm_forward(out_d.get(), mean_d.get(), rstd_d.get(), x_d.get(), w_d.get(), b_d.get(), N, C);
    be->layernorm_backward(dinp_d.get(), dw_d.get(), db_d.get(), dout_d.get(), x_d.get(), w_d.get(),
                           mean_d.get(), rstd_d.get(), N, C);
    check_close("layernorm out", dev.down(out_d), out);
    check_close("layernorm rstd", dev.down(rstd_d), rstd);
    check_close("layernorm dinp", dev.down(dinp_d), dinp);
    check_close("layernorm dw", dev.down(dw_d), dw);
    check_close("layernorm db", dev.down(db_d), db);
  }
  SUBCASE("matmul") {
    const Vec mw = rounded(OC * C, 8), bias = rounded(OC, 9), mdout = rounded(N * OC, 10);
    Vec out(N * OC), dinp(N * C), dw(OC * C), dbias(OC);
    auto mw_d = dev.up(mw), bias_d = dev.up(bias), mdout_d = dev.up(mdout), out_d = dev.up(out),
         dinp_d = dev.up(dinp), dw_d = dev.up(dw), dbias_d = dev.up(dbias);
    cpu::matmul_forward(out.data(), x.data(), mw.data(), bias.data(), N, C, OC);
    cpu::matmul_backward(dinp.data(), dw.data(), dbias.data(), mdout.data(), x.data(), mw.data(), N, C, OC);
    be->matmul_forward(out_d.get(), x_d.get(), mw_d.get(), bias_d.get(), N, C, OC);
    be->matmul_backward(dinp_d.get(), dw_d.get(), dbias_d.get(), mdout_d.get(), x_d.get(), mw_d.get(), N, C,
                        OC);
    check_close("matmul out", dev.down(out_d), out);
    check_close("matmul dinp", dev.down(dinp_d), dinp);
    check_close("matmul dw", dev.down(dw_d), dw);
    check_close("matmul dbias", dev.down(dbias_d), dbias);
  }
  SUBCASE("attention") {
    const Vec qkv = rounded(QkvLayout{B, T, NH, KVH, HS}.qkv_count(), 11, -2.0, 2.0), adout = rounded(N * NH * HS, 12);
    Vec out(N * NH * HS), att(B * NH * T * T), dqkv(qkv.size());
    auto qkv_d = dev.up(qkv), adout_d = dev.up(adout), out_d = dev.up(out), att_d = dev.up(att),
         dqkv_d = dev.up(dqkv);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);
    cpu::attention_backward(dqkv.data(), adout.data(), qkv.data(), att.data(), B, T, NH, KVH, HS);
    be->attention_forward(out_d.get(), att_d.get(), qkv_d.get(), B, T, NH, KVH, HS);
    be->attention_backward(dqkv_d.get(), adout_d.get(), qkv_d.get(), out_d.get(), att_d.get(), B, T, NH, KVH, HS);
    check_close("attention out", dev.down(out_d), out);
    check_close("attention att", dev.down(att_d), att);
    check_close("attention dqkv", dev.down(dqkv_d), dqkv);
  }
  SUBCASE("gelu, residual, add_inplace, dropout, sum, sum_squares") {
    Vec out(N * C), dinp = rounded(N * C, 13), res(N * C), acc = rounded(N * C, 14), drop = x;
    auto out_d = dev.up(out), dinp_d = dev.up(dinp), res_d = dev.up(res), acc_d = dev.up(acc),
         drop_d = dev.up(drop);
    cpu::gelu_forward(out.data(), x.data(), N * C);
    cpu::gelu_backward(dinp.data(), x.data(), dout.data(), N * C);
    cpu::residual_forward(res.data(), x.data(), dout.data(), N * C);
    cpu::add_inplace(acc.data(), dout.data(), N * C);
    const std::vector<uint64_t> keys = {5, 6};
    cpu::dropout_apply(drop.data(), keys.data(), B, T * C, 0.3f);
    be->gelu_forward(out_d.get(), x_d.get(), N * C);
    be->gelu_backward(dinp_d.get(), x_d.get(), dout_d.get(), N * C);
    be->residual_forward(res_d.get(), x_d.get(), dout_d.get(), N * C);
    be->add_inplace(acc_d.get(), dout_d.get(), N * C);
    be->dropout_apply(drop_d.get(), keys.data(), B, T * C, 0.3f);
    check_close("gelu out", dev.down(out_d), out);
    check_close("gelu dinp", dev.down(dinp_d), dinp);
    check_close("residual", dev.down(res_d), res);
    check_close("add_inplace", dev.down(acc_d), acc);
    check_close("dropout", dev.down(drop_d), drop);
    CHECK(be->sum(x_d.get(), N * C) == cpu::sum(x.data(), N * C));  // same floats, same double sum
    CHECK(be->sum_squares(x_d.get(), N * C) == cpu::sum_squares(x.data(), N * C));
  }
  SUBCASE("cross entropy, fused in place") {
    const Vec logits = rounded(N * V, 15, -3.0, 3.0);
    const std::vector<int32_t> targets = random_tokens(N, V, 16);
    Vec losses(N), dlogits(N * V);
    auto logits_d = dev.up(logits), losses_d = dev.up(losses);
    DeviceBuffer<int32_t> tgt_d(*be, N);
    be->copy_to_device(tgt_d.get(), targets.data(), tgt_d.bytes());
    cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(), 0.25, N,
                                        V, V);
    be->cross_entropy_forward_backward(losses_d.get(), logits_d.get(), logits_d.get(), tgt_d.get(), 0.25f, N,
                                       V, V);
    check_close("cross entropy losses", dev.down(losses_d), losses);
    check_close("cross entropy dlogits", dev.down(logits_d), dlogits);
  }
  SUBCASE("adamw over spans") {
    // Three tensors with decay on, off, on, and 3 elements between the last two that belong to none.
    const std::vector<xtrain::ParamSpan> spans = {{0, 30, true}, {30, 20, false}, {53, N * C - 53, true}};
    Vec param = rounded(N * C, 17), m(N * C), v(N * C);
    const Vec param0 = param;
    auto param_d = dev.up(param), m_d = dev.up(m), v_d = dev.up(v);
    // Hyperparameters as the float values the backend receives.
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.7f;
    for (int t = 1; t <= 3; ++t) {
      const Vec g = rounded(N * C, 100 + t);
      auto g_d = dev.up(g);
      for (const auto& sp : spans)
        cpu::adamw_update(param.data() + sp.offset, g.data() + sp.offset, m.data() + sp.offset, v.data() + sp.offset,
                          sp.count, lr, b1, b2, eps, sp.decay ? wd : 0.0f, scale, t);
      be->adamw_update(param_d.get(), g_d.get(), m_d.get(), v_d.get(), spans, lr, b1, b2, eps, wd, scale, t);
    }
    const Vec got = dev.down(param_d);
    check_close("adamw param", got, param);
    check_close("adamw m", dev.down(m_d), m);
    check_close("adamw v", dev.down(v_d), v);
    for (size_t i = 50; i < 53; ++i) CHECK(got[i] == param0[i]);  // outside every span: untouched
  }
  SUBCASE("adamw refuses overlapping or unordered spans") {
    DeviceBuffer<float> x(*be, 16);
    be->zero(x.get(), x.bytes());
    using Spans = std::vector<xtrain::ParamSpan>;
    for (const Spans& bad : {Spans{{0, 8, true}, {7, 4, false}}, Spans{{8, 4, true}, {0, 4, true}}})
      CHECK_THROWS_WITH_AS(be->adamw_update(x.get(), x.get(), x.get(), x.get(), bad, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                            1.0f, 1),
                           doctest::Contains("increasing order without overlap"), xtrain::Error);
    // a span whose end wraps around the address range would pass the order check without this one
    CHECK_THROWS_WITH_AS(be->adamw_update(x.get(), x.get(), x.get(), x.get(), Spans{{SIZE_MAX - 1, 2, true}, {0, 4, true}},
                                          1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1),
                         doctest::Contains("past the largest address"), xtrain::Error);
    // the step is checked even when there is nothing to update
    CHECK_THROWS_WITH_AS(be->adamw_update(x.get(), x.get(), x.get(), x.get(), Spans{}, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                          1.0f, 0),
                         doctest::Contains("must be >= 1"), xtrain::Error);
  }
}

// The weight-gradient writers with Grad::assign (the first micro-step's backward, GPT::backward): over a buffer of
// NaNs they give the bits of accumulating into zeros (nothing reads the old values; OpenBLAS scales C by beta 0
// before adding the product, as into zeros), the activation gradient untouched by the mode; an empty sum (N == 0)
// assigned writes zeros, accumulated leaves the buffer as it was.
TEST_CASE("weight gradients assigned over NaNs: the bits of += into zeros; empty sums assigned are zeros") {
  auto be = xtrain::make_cpu_backend();
  using xtrain::Grad;
  Device dev{*be};
  const Vec x = rounded(N * C, 21), w = rounded(OC * C, 22), dout = rounded(N * OC, 23), ndout = rounded(N * C, 24),
            nw = rounded(C, 25), pre = rounded(N * C, 26);
  auto x_d = dev.up(x), w_d = dev.up(w), dout_d = dev.up(dout), ndout_d = dev.up(ndout), nw_d = dev.up(nw),
       pre_d = dev.up(pre);
  const Vec nans(OC * C, std::nan("")), zeros(OC * C, 0.0);
  // writes(fill, mode, rows): every weight-gradient writer into buffers filled with `fill`, over `rows` rows;
  // returns their outputs one after another
  auto writes = [&](const Vec& fill, Grad mode, int rows) {
    auto part = [&](size_t n) { return dev.up(Vec(fill.begin(), fill.begin() + n)); };
    auto dw = part(OC * C), db = part(OC), ln_dw = part(C), ln_db = part(C), rms_dw = part(C), g_dw = part(OC * C),
         g_db = part(OC);
    auto dinp = dev.up(Vec(N * C, 0.0)), mean = dev.up(Vec(N, 0.5)), rstd = dev.up(Vec(N, 2.0)),
         dpre = dev.up(Vec(N * C, 0.0)), scratch = dev.up(Vec(N * C, 0.0));
    be->matmul_backward(dinp.get(), dw.get(), db.get(), dout_d.get(), x_d.get(), w_d.get(), rows, C, OC,
                        Grad::assign, mode);
    be->layernorm_backward(dinp.get(), ln_dw.get(), ln_db.get(), ndout_d.get(), x_d.get(), nw_d.get(), mean.get(),
                           rstd.get(), rows, C, mode);
    be->rmsnorm_backward(dinp.get(), rms_dw.get(), ndout_d.get(), x_d.get(), nw_d.get(), rstd.get(), rows, C, mode);
    be->gelu_matmul_backward(dpre.get(), g_dw.get(), g_db.get(), dout_d.get(), x_d.get(), pre_d.get(), w_d.get(),
                             scratch.get(), rows, C, OC, mode);
    Vec all;
    for (const DeviceBuffer<float>* b : {&dw, &db, &ln_dw, &ln_db, &rms_dw, &g_dw, &g_db, &dinp, &dpre}) {
      const Vec v = dev.down(*b);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const Vec assigned = writes(nans, Grad::assign, N), added = writes(zeros, Grad::accumulate, N);
  REQUIRE(assigned.size() == added.size());
  size_t differ = 0, nan_count = 0;
  for (size_t i = 0; i < added.size(); ++i) {
    differ += std::memcmp(&assigned[i], &added[i], sizeof(double)) != 0;  // bit for bit (floats widened exactly)
    nan_count += std::isnan(assigned[i]);
  }
  CHECK(nan_count == 0);
  CHECK(differ == 0);
  const Vec empty = writes(nans, Grad::assign, 0), kept = writes(nans, Grad::accumulate, 0);
  const size_t grads = 2 * (OC * C + OC) + 3 * C;  // the weight gradients, before dinp and dpre
  for (size_t i = 0; i < grads; ++i) {
    CHECK(empty[i] == 0.0);
    CHECK(std::isnan(kept[i]));
  }
}
