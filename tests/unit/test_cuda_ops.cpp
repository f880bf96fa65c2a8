// Every CUDA op against the CPU backend (the oracle) on the same seeded random float inputs, plus the
// caching allocator's steady state and the device-side input checks. Label gpu; exits 77 (skipped)
// when the CUDA runtime sees no device, before doctest runs (gpu_test_main.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include <xtrain/backend/qkv_layout.h>
#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include "cpu_ops_test_util.h"
#include "cuda_ops_test_util.h"

using namespace xtrain;
using xtrain::test::bf16_bits;
using xtrain::test::bf16_value;
using xtrain::test::rel_err;
using xtrain::test::to_double;
using namespace xtrain::test::gpu;

namespace {

// Attention with bf16 activations (flash kernels, or the GEMM route through fp32 copies) vs the fp32 CPU
// oracle on the same bf16-representable q, k, v, dout (Act): the probabilities P and dS are rounded to
// bf16 before the tensor-core products (GEMM route: FAST_16BF rounds the operands), and out / dqkv once
// more when stored: each rounding is at most 2^-8 = 3.9e-3 relative (half an ulp of 8 significant bits),
// and they average over the 64..300 terms of random sign of each product. 2e-2 (norm-wise, 5 x 2^-8)
// bounds that, while a wrong index, mask, missing rescale or a tile read twice gives O(1) (measured:
// <= 3.8e-3). The fp32 route is held to kFp32Rel.
constexpr double kFlashBf16Rel = 2e-2;
// sum / sum_squares accumulate in double on both sides; only the summation order differs.
constexpr double kDoubleSumRel = 1e-12;

}  // namespace

TEST_CASE("device name names the GPU and its PCI bus id") {
  const std::string name = be().gpu->device_name();
  MESSAGE("device: " << name);
  CHECK(be().gpu->name() == "cuda");
  CHECK(name.find(" (") != std::string::npos);
  CHECK(name.find(':') != std::string::npos);  // bus id domain:bus:device.function
}

TEST_CASE("encoder forward and backward match the CPU exactly") {
  const int B = 3, T = 17, C = 40, V = 9;  // small V: many repeated tokens in the scatter
  Twin<int32_t> tok(test::random_tokens(size_t(B) * T, V, 11));
  Twin<float> wte(rnd(size_t(V) * C, 12)), wpe(rnd(size_t(T) * C, 13)), out(filled(size_t(B) * T * C));
  be().cpu->encoder_forward(out.c.get(), tok.c.get(), wte.c.get(), wpe.c.get(), B, T, C);
  be().gpu->encoder_forward(out.g.get(), tok.g.get(), wte.g.get(), wpe.g.get(), B, T, C);
  expect_close("encoder_forward out", out, kExact);
  Twin<float> dout(rnd(size_t(B) * T * C, 14)), dwte(rnd(size_t(V) * C, 15)), dwpe(rnd(size_t(T) * C, 16));
  be().cpu->encoder_backward(dwte.c.get(), dwpe.c.get(), dout.c.get(), tok.c.get(), B, T, C);
  be().gpu->encoder_backward(dwte.g.get(), dwpe.g.get(), dout.g.get(), tok.g.get(), B, T, C);
  expect_close("encoder_backward dwte", dwte, kExact);
  expect_close("encoder_backward dwpe", dwpe, kExact);
}

TEST_CASE("layernorm forward and backward") {
  for (int C : {96, 768, 50}) {  // 50: rows not 16-byte aligned, the element-by-element kernels
    const int N = 70;
    CAPTURE(C);
    Twin<float> inp(rnd(size_t(N) * C, 21, 1.0, 3.0)), w(rnd(C, 22)), b(rnd(C, 23));
    Twin<float> out(filled(size_t(N) * C)), mean(filled(N)), rstd(filled(N));
    be().cpu->layernorm_forward(out.c.get(), mean.c.get(), rstd.c.get(), inp.c.get(), w.c.get(), b.c.get(), N, C);
    be().gpu->layernorm_forward(out.g.get(), mean.g.get(), rstd.g.get(), inp.g.get(), w.g.get(), b.g.get(), N, C);
    expect_close("layernorm_forward out", out, kFp32Rel);
    expect_close("layernorm_forward mean", mean, kFp32Rel);
    expect_close("layernorm_forward rstd", rstd, kFp32Rel);
    Twin<float> dout(rnd(size_t(N) * C, 24)), dinp(rnd(size_t(N) * C, 25)), dw(rnd(C, 26)), db(rnd(C, 27));
    be().cpu->layernorm_backward(dinp.c.get(), dw.c.get(), db.c.get(), dout.c.get(), inp.c.get(), w.c.get(),
                                 mean.c.get(), rstd.c.get(), N, C);
    be().gpu->layernorm_backward(dinp.g.get(), dw.g.get(), db.g.get(), dout.g.get(), inp.g.get(), w.g.get(),
                                 mean.g.get(), rstd.g.get(), N, C);
    expect_close("layernorm_backward dinp", dinp, kFp32Rel);
    expect_close("layernorm_backward dw", dw, kFp32Rel);
    expect_close("layernorm_backward db", db, kFp32Rel);
  }
}

// The deterministic column sums behind dw and db: rows split into at most 256 chunks (column_reduce.cuh
// row_chunks); for C <= 1024 the row kernel sums each chunk itself (per lane in fp32 over its warp's
// rows, then the block's 8 warps in double), wider rows take the column reduction's partial kernel; then
// 16 row-lanes per column add the chunks in a fixed order. N = 5: fewer chunks than lanes, most warps
// without a row; 1000 and 4099: several rows per chunk, the last chunk short; 70001: 274 rows per chunk,
// 35 fp32 terms per lane; C = 33: a partial warp of columns (element path); 1023 (element path) and
// 1024: the widest fused rows, 32 columns per lane; 1025 (element path) and 4096: the column reduction
// route. fp32 and bf16 activations; a rerun adds bitwise the same increments (deterministic).
TEST_CASE("layernorm backward dw, db: the deterministic column reduction's edges") {
  struct Shape { int C, N; };
  const Shape shapes[] = {{33, 5},      {33, 1000},   {33, 4099},   {768, 5},     {768, 1000},  {768, 4099},
                          {33, 70001},  {1023, 1000}, {1024, 4099}, {1025, 1000}, {4096, 1000}};
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (const Shape s : shapes) {
      const int C = s.C, N = s.N;
      CAPTURE(g->activation_bytes());
      CAPTURE(C);
      CAPTURE(N);
      Act inp(*g, rnd(size_t(N) * C, 261, 1.0, 3.0)), dout(*g, rnd(size_t(N) * C, 262));
      Act out(*g, filled(size_t(N) * C)), dinp(*g, filled(size_t(N) * C));
      Twin<float> w(rnd(C, 263), g), mean(filled(N), g), rstd(filled(N), g), dw(rnd(C, 264), g), db(rnd(C, 265), g);
      be().cpu->layernorm_forward(out.cp(), mean.c.get(), rstd.c.get(), inp.cp(), w.c.get(), w.c.get(), N, C);
      g->layernorm_forward(out.gp(), mean.g.get(), rstd.g.get(), inp.gp(), w.g.get(), w.g.get(), N, C);
      be().cpu->layernorm_backward(dinp.cp(), dw.c.get(), db.c.get(), dout.cp(), inp.cp(), w.c.get(), mean.c.get(),
                                   rstd.c.get(), N, C);
      g->layernorm_backward(dinp.gp(), dw.g.get(), db.g.get(), dout.gp(), inp.gp(), w.g.get(), mean.g.get(),
                            rstd.g.get(), N, C);
      // every row reaches its warp: dinp as in the other layernorm tests
      expect_close("layernorm_backward dinp", dinp, g->activation_bytes() == 2 ? kBf16StoreRel : kFp32Rel);
      expect_close("layernorm_backward dw", dw, kFp32Rel);
      expect_close("layernorm_backward db", db, kFp32Rel);
      Twin<float> dw2(rnd(C, 264), g), db2(rnd(C, 265), g);
      g->layernorm_backward(dinp.gp(), dw2.g.get(), db2.g.get(), dout.gp(), inp.gp(), w.g.get(), mean.g.get(),
                            rstd.g.get(), N, C);
      CHECK(down(*g, dw2.g) == down(*g, dw.g));
      CHECK(down(*g, db2.g) == down(*g, db.g));
    }
  }
}

TEST_CASE("matmul forward and backward (cuBLAS fp32, no TF32)") {
  struct Shape { int N, IC, OC; bool bias; };
  for (Shape s : {Shape{64, 96, 160, true}, Shape{33, 768, 50, false}, Shape{130, 256, 1024, true},
                  Shape{17, 40, 30, true}}) {
    CAPTURE(s.N);
    CAPTURE(s.IC);
    CAPTURE(s.OC);
    Twin<float> inp(rnd(size_t(s.N) * s.IC, 31)), w(rnd(size_t(s.OC) * s.IC, 32)), bias(rnd(s.OC, 33));
    Twin<float> out(filled(size_t(s.N) * s.OC));
    be().cpu->matmul_forward(out.c.get(), inp.c.get(), w.c.get(), s.bias ? bias.c.get() : nullptr, s.N, s.IC, s.OC);
    be().gpu->matmul_forward(out.g.get(), inp.g.get(), w.g.get(), s.bias ? bias.g.get() : nullptr, s.N, s.IC, s.OC);
    expect_close("matmul_forward out", out, kFp32Rel);
    Twin<float> dout(rnd(size_t(s.N) * s.OC, 34)), dinp(rnd(size_t(s.N) * s.IC, 35)),
        dw(rnd(size_t(s.OC) * s.IC, 36)), dbias(rnd(s.OC, 37));
    be().cpu->matmul_backward(dinp.c.get(), dw.c.get(), s.bias ? dbias.c.get() : nullptr, dout.c.get(), inp.c.get(),
                              w.c.get(), s.N, s.IC, s.OC);
    be().gpu->matmul_backward(dinp.g.get(), dw.g.get(), s.bias ? dbias.g.get() : nullptr, dout.g.get(), inp.g.get(),
                              w.g.get(), s.N, s.IC, s.OC);
    expect_close("matmul_backward dinp", dinp, kFp32Rel);
    expect_close("matmul_backward dw", dw, kFp32Rel);
    expect_close("matmul_backward dbias", dbias, kFp32Rel);
  }
}

// --dtype bf16 matmul (bf16 activations; the fp32 weights rounded into bf16 copies; bias in a cuBLASLt
// epilogue, dbias a column sum of the bf16 dout) vs the fp32 CPU oracle on the same bf16-rounded
// activations, within kBf16GemmRel (cuda_ops_test_util.h).
TEST_CASE("matmul forward and backward with --dtype bf16 (bf16 activations, cuBLASLt bias epilogues)") {
  Backend& g = g16();
  struct Shape { int N, IC, OC; bool bias; };
  // IC, OC multiples of 8: cuBLASLt epilogues; otherwise (30, 50, 36) the unfused route; IC = 36: padded rows
  // in the weight's bf16 copy
  for (Shape s : {Shape{64, 96, 160, true}, Shape{130, 256, 1024, true}, Shape{17, 40, 30, true},
                  Shape{33, 768, 50, false}, Shape{17, 36, 24, true}}) {
    CAPTURE(s.N);
    CAPTURE(s.IC);
    CAPTURE(s.OC);
    // activations (inp, out, dout, dinp) bf16 on the GPU; weights and their gradients fp32
    Act inp(g, rnd(size_t(s.N) * s.IC, 41)), out(g, filled(size_t(s.N) * s.OC)), dout(g, rnd(size_t(s.N) * s.OC, 44)),
        dinp(g, rnd(size_t(s.N) * s.IC, 45));
    Twin<float> w(rnd(size_t(s.OC) * s.IC, 42), &g), bias(rnd(s.OC, 43), &g), dw(rnd(size_t(s.OC) * s.IC, 46), &g),
        db(rnd(s.OC, 47), &g);
    be().cpu->matmul_forward(out.cp(), inp.cp(), w.c.get(), s.bias ? bias.c.get() : nullptr, s.N, s.IC, s.OC);
    g.matmul_forward(out.gp(), inp.gp(), w.g.get(), s.bias ? bias.g.get() : nullptr, s.N, s.IC, s.OC);
    expect_close("bf16 matmul_forward out", out, kBf16GemmRel);
    be().cpu->matmul_backward(dinp.cp(), dw.c.get(), s.bias ? db.c.get() : nullptr, dout.cp(), inp.cp(), w.c.get(),
                              s.N, s.IC, s.OC);
    g.matmul_backward(dinp.gp(), dw.g.get(), s.bias ? db.g.get() : nullptr, dout.gp(), inp.gp(), w.g.get(), s.N, s.IC,
                      s.OC);
    expect_close("bf16 matmul_backward dinp", dinp, kBf16GemmRel);
    expect_close("bf16 matmul_backward dw", dw, kBf16GemmRel);
    expect_close("bf16 matmul_backward dbias", db, kBf16GemmRel);
  }
}

// --fp8 matmuls (matmul.cu, fp8.cu) vs the fp32 CPU oracle on the same bf16 activations. E4M3 keeps 4
// significant bits (half an ulp: 2^-4 = 6.3% relative), E5M2 3 (2^-3 = 12.5%); each tensor is scaled so its
// largest magnitude lands on the format's largest value, so the uniform inputs here stay normal numbers. The
// rounding errors of the K products of an output are independent and of random sign, so they add as a random
// walk to ~ (relative error / sqrt(3)) x the output's own size: ~5% for the forward (two E4M3 operands), ~8%
// where one operand is E5M2 (dinp, dw), norm-wise with the max over outputs. 0.1 and 0.2 bound those, while a
// missing or inverted scale (factors up to 448 or 57344), a transposed operand or a wrong layout gives O(1). The
// FP8 route must also differ from the bf16 one (which it replaces), and a product whose rows are not a multiple
// of 16 must give the bf16 route's bits (it takes that route).
constexpr double kFp8ForwardRel = 0.1, kFp8BackwardRel = 0.2;

TEST_CASE("--fp8 matmuls: E4M3 forward, E5M2 gradients, against the fp32 oracle; other shapes stay bf16") {
  std::unique_ptr<Backend> g = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16});
  if (const std::string why = g->fp8_unavailable(); !why.empty()) {  // an older GPU, XTRAIN_CUDA_LT=off
    MESSAGE("skipped: " << why);
    CHECK_THROWS_AS(g->set_fp8_weights({{nullptr, 16, 16}}), UsageError);
    return;
  }
  struct Shape { int N, IC, OC; bool bias; };
  // the last: dimensions multiples of 16 but not of the casts' 64-element tiles
  for (Shape s : {Shape{256, 512, 384, false}, Shape{128, 64, 1024, true}, Shape{48, 80, 208, true}}) {
    CAPTURE(s.N);
    CAPTURE(s.IC);
    CAPTURE(s.OC);
    const size_t nw = size_t(s.OC) * s.IC;
    Act inp(*g, rnd(size_t(s.N) * s.IC, 51)), out(*g, filled(size_t(s.N) * s.OC)), dout(*g, rnd(size_t(s.N) * s.OC, 54)),
        dinp(*g, filled(size_t(s.N) * s.IC));
    Twin<float> w(rnd(nw, 52), g.get()), bias(rnd(s.OC, 53), g.get()), dw(filled(nw), g.get()), db(filled(s.OC), g.get());
    const float* b = s.bias ? bias.g.get() : nullptr;
    // the bf16 route first (no FP8 weights), then the same products with w in FP8
    g->prepare_weights(w.g.get(), nw);
    DeviceBuffer<unsigned char> out16(*g, out.g.bytes()), dinp16(*g, dinp.g.bytes());
    DeviceBuffer<float> dw16(*g, nw);
    g->matmul_forward(out16.get(), inp.gp(), w.g.get(), b, s.N, s.IC, s.OC);
    g->matmul_backward(dinp16.get(), dw16.get(), nullptr, dout.gp(), inp.gp(), w.g.get(), s.N, s.IC, s.OC, Grad::assign,
                       Grad::assign);
    CHECK(g->set_fp8_weights({{w.g.get(), s.OC, s.IC}}) == 1);
    CHECK(g->fp8_copy_bytes() >= 2 * nw);
    g->prepare_weights(w.g.get(), nw);
    be().cpu->matmul_forward(out.cp(), inp.cp(), w.c.get(), s.bias ? bias.c.get() : nullptr, s.N, s.IC, s.OC);
    g->matmul_forward(out.gp(), inp.gp(), w.g.get(), b, s.N, s.IC, s.OC);
    expect_close("fp8 matmul_forward out", out, kFp8ForwardRel);
    be().cpu->matmul_backward(dinp.cp(), dw.c.get(), s.bias ? db.c.get() : nullptr, dout.cp(), inp.cp(), w.c.get(), s.N,
                              s.IC, s.OC, Grad::assign, Grad::assign);
    g->matmul_backward(dinp.gp(), dw.g.get(), s.bias ? db.g.get() : nullptr, dout.gp(), inp.gp(), w.g.get(), s.N, s.IC,
                       s.OC, Grad::assign, Grad::assign);
    expect_close("fp8 matmul_backward dinp", dinp, kFp8BackwardRel);
    expect_close("fp8 matmul_backward dw", dw, kFp8BackwardRel);
    if (s.bias) expect_close("fp8 matmul_backward dbias (bf16 column sum)", db, kBf16GemmRel);
    // FP8 changed the arithmetic: the bf16 route's outputs are not these
    CHECK(out.gpu_bytes() != [&] {
      std::vector<unsigned char> v(out16.bytes());
      g->copy_to_host(v.data(), out16.get(), v.size());
      return v;
    }());
    CHECK(down(*g, dw.g) != down(*g, dw16));
  }
  // 24 rows (not a multiple of 16): the bf16 route, bitwise, with FP8 weights set
  const int N = 24, IC = 64, OC = 128;
  Twin<float> w(rnd(size_t(OC) * IC, 62), g.get());
  Act inp(*g, rnd(size_t(N) * IC, 61)), a(*g, filled(size_t(N) * OC)), b(*g, filled(size_t(N) * OC));
  g->set_fp8_weights({});
  g->prepare_weights(w.g.get(), size_t(OC) * IC);
  g->matmul_forward(a.gp(), inp.gp(), w.g.get(), nullptr, N, IC, OC);
  g->set_fp8_weights({{w.g.get(), OC, IC}});
  g->prepare_weights(w.g.get(), size_t(OC) * IC);
  g->matmul_forward(b.gp(), inp.gp(), w.g.get(), nullptr, N, IC, OC);
  CHECK(a.gpu_bytes() == b.gpu_bytes());
  // matrices the FP8 GEMMs cannot take are not taken (their products stay bf16): a dimension not a multiple of 16,
  // a start 8 bytes off a 16-byte boundary
  CHECK(g->set_fp8_weights({{w.g.get(), OC, 40}, {w.g.get() + 2, 16, 16}}) == 0);
  CHECK(g->fp8_copy_bytes() == 0);
  g->set_fp8_weights({});
}

TEST_CASE("--fp8 is refused where there is no FP8: the CPU backend, fp32 and --weight-copy per-use on CUDA") {
  const float x = 0.0f;
  CHECK_THROWS_AS(be().cpu->set_fp8_weights({{&x, 16, 16}}), UsageError);
  be().cpu->set_fp8_weights({});  // empty: nothing to refuse
  CHECK_THROWS_AS(be().gpu->set_fp8_weights({{&x, 16, 16}}), UsageError);  // fp32
  BackendOptions per_use{Device::cuda, 0, 1, DType::bf16};
  per_use.weight_copy = WeightCopy::per_use;
  CHECK_THROWS_AS(make_cuda_backend(per_use)->set_fp8_weights({{&x, 16, 16}}), UsageError);
}

// bf16 dbias: the column sum of dout takes column pairs summed in fp32 per row chunk where C is even and
// dout 4-byte aligned, and single elements added in double otherwise. dout at an aligned address and the
// same values one element further (2 bytes: the element path) must give dbias within fp32 rounding of
// the chunk sums (1e-5 relative, norm-wise); a wrong column, a skipped row or chunk gives O(1). N = 4099:
// chunks of 17 rows, the last one short; OC = 768, 2304: 2 and 5 blocks of 256 column pairs per chunk.
TEST_CASE("bf16 dbias: the column-pair sum agrees with the element path") {
  Backend& g = g16();
  for (const int OC : {768, 2304}) {
    const int N = 4099, IC = 64;
    CAPTURE(OC);
    const std::vector<float> v = round_bf16(rnd(size_t(N) * OC, 48));
    std::vector<uint16_t> h(v.size() + 1, 0);
    for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_bits(v[i]);
    DeviceBuffer<unsigned char> aligned(g, h.size() * 2), shifted(g, h.size() * 2);
    uint16_t* shifted_dout = static_cast<uint16_t*>(static_cast<void*>(shifted.get())) + 1;
    g.copy_to_device(aligned.get(), h.data(), v.size() * 2);
    g.copy_to_device(shifted_dout, h.data(), v.size() * 2);
    Act inp(g, rnd(size_t(N) * IC, 49)), dinp(g, filled(size_t(N) * IC));
    Twin<float> w(rnd(size_t(OC) * IC, 50), &g), dw(filled(size_t(OC) * IC), &g), db1(filled(OC), &g),
        db2(filled(OC), &g);
    g.matmul_backward(dinp.gp(), dw.g.get(), db1.g.get(), aligned.get(), inp.gp(), w.g.get(), N, IC, OC);
    g.matmul_backward(dinp.gp(), dw.g.get(), db2.g.get(), shifted_dout, inp.gp(), w.g.get(), N, IC, OC);
    const std::vector<float> pair = down(g, db1.g), element = down(g, db2.g);
    CHECK(rel_err(to_double(pair), to_double(element)) < 1e-5);
    CHECK(pair != element);  // the two paths do differ in rounding: the pair path was taken
  }
}

// The MLP's fc layer + GELU as one op (Backend::matmul_gelu_forward, gelu_matmul_backward) vs the CPU oracle
// (matmul, then gelu): fused into cuBLASLt's GELU_AUX_BIAS / DGELU epilogues with bf16 where IC, OC are
// multiples of 8, the default route otherwise (fp32, and the bf16 shapes 36 x 24). Norm-wise bounds of the
// matmul they contain (kFp32Rel, kBf16GemmRel).
TEST_CASE("fc matmul + GELU (cuBLASLt GELU_AUX_BIAS and DGELU epilogues; default route)") {
  struct Shape { int N, IC, OC; bool bias; };
  const float kNaN = std::nanf("");  // dpre and the scratch: every element must be written
  for (Backend* g : {be().gpu.get(), &g16()}) {
    const bool b16 = g->activation_bytes() == 2;
    const double tol = b16 ? kBf16GemmRel : kFp32Rel;
    for (Shape s : {Shape{64, 96, 160, true}, Shape{130, 256, 1024, true}, Shape{17, 40, 32, false},
                    Shape{17, 36, 24, true}}) {
      CAPTURE(b16);
      CAPTURE(s.N);
      CAPTURE(s.IC);
      CAPTURE(s.OC);
      const size_t nin = size_t(s.N) * s.IC, nout = size_t(s.N) * s.OC;
      Act inp(*g, rnd(nin, 301)), pre(*g, filled(nout, 7.0f)), out(*g, filled(nout, 7.0f));
      Twin<float> w(rnd(size_t(s.OC) * s.IC, 302), g), bias(rnd(s.OC, 303), g);
      const float* bc = s.bias ? bias.c.get() : nullptr;
      const float* bg = s.bias ? bias.g.get() : nullptr;
      be().cpu->matmul_gelu_forward(pre.cp(), out.cp(), inp.cp(), w.c.get(), bc, s.N, s.IC, s.OC);
      g->matmul_gelu_forward(pre.gp(), out.gp(), inp.gp(), w.g.get(), bg, s.N, s.IC, s.OC);
      expect_close("matmul_gelu_forward pre", pre, tol);
      expect_close("matmul_gelu_forward out", out, tol);
      // backward of the next matmul (IC = the GELU side): dout (N,OC), inp = gelu(x) (N,IC), x (N,IC)
      Act dout(*g, rnd(nout, 304)), x(*g, rnd(nin, 305, -4.0, 4.0)), y(*g, rnd(nin, 306)),
          dx(*g, filled(nin, kNaN)), scratch(*g, filled(nin, kNaN));
      Twin<float> dw(rnd(size_t(s.OC) * s.IC, 307), g), db(rnd(s.OC, 308), g);
      be().cpu->gelu_matmul_backward(dx.cp(), dw.c.get(), s.bias ? db.c.get() : nullptr, dout.cp(), y.cp(), x.cp(),
                                     w.c.get(), scratch.cp(), s.N, s.IC, s.OC);
      g->gelu_matmul_backward(dx.gp(), dw.g.get(), s.bias ? db.g.get() : nullptr, dout.gp(), y.gp(), x.gp(), w.g.get(),
                              scratch.gp(), s.N, s.IC, s.OC);
      expect_close("gelu_matmul_backward dpre", dx, tol);
      expect_close("gelu_matmul_backward dw", dw, tol);
      expect_close("gelu_matmul_backward dbias", db, tol);
    }
  }
}

// Is cuBLASLt's GELU xtrain's (the tanh approximation, not erf)? And the few-row route's (gemv.cu, N <=
// kGemvMaxRows), which applies gelu.cuh to its fp32 sum? Through an identity weight the GEMMs are
// exact (x + bias of bf16 values is exact in fp32), so the epilogues' GELU and GELU gradient meet the CPU's
// formulas ELEMENT-wise within the bf16 store bound: |gpu - cpu| <= kBf16StoreRel |cpu| + kFp32Rel max|cpu|.
// x in [-3, 3]: there the erf form exceeds that bound by up to 1.5e-4 (gelu) and 4.9e-4 (gelu') of the
// scale, 15-50x kFp32Rel (worked out in double); below -3 both lose digits to fp32 cancellation in 1 + tanh.
// The unfused forward would fail it too: it rounds x + bias to bf16 before its GELU (up to ~2% near x = -3).
TEST_CASE("cuBLASLt's GELU epilogues and the few-row route compute xtrain's GELU (tanh approximation) element-wise") {
  Backend& g = g16();
  for (const int N : {256, xtrain::cuda::kGemvMaxRows}) {
    CAPTURE(N);
    const int C = 64;
    const size_t n = size_t(N) * C;
    std::vector<float> eye(size_t(C) * C, 0.0f);
    for (int i = 0; i < C; ++i) eye[size_t(i) * C + i] = 1.0f;
    Twin<float> w(eye, &g), bias(round_bf16(rnd(C, 312, -0.5, 0.5)), &g);
    Act x(g, rnd(n, 311, -2.5, 2.5)), pre(g, filled(n)), out(g, filled(n));
    be().cpu->matmul_gelu_forward(pre.cp(), out.cp(), x.cp(), w.c.get(), bias.c.get(), N, C, C);
    g.matmul_gelu_forward(pre.gp(), out.gp(), x.gp(), w.g.get(), bias.g.get(), N, C, C);
    const float kNaN = std::nanf("");
    Act z(g, rnd(n, 314, -3.0, 3.0)), dout(g, rnd(n, 313)), y(g, filled(n)), dx(g, filled(n, kNaN)),
        scratch(g, filled(n, kNaN));
    Twin<float> dw(filled(size_t(C) * C), &g), db(filled(C), &g);
    be().cpu->gelu_matmul_backward(dx.cp(), dw.c.get(), db.c.get(), dout.cp(), y.cp(), z.cp(), w.c.get(), scratch.cp(),
                                   N, C, C);
    g.gelu_matmul_backward(dx.gp(), dw.g.get(), db.g.get(), dout.gp(), y.gp(), z.gp(), w.g.get(), scratch.gp(), N, C, C);
    for (const auto& [what, a] : {std::pair<std::string, const Act*>{"gelu (GELU_AUX_BIAS, or gemv.cu)", &out},
                                  std::pair<std::string, const Act*>{"gelu' dout (DGELU)", &dx}}) {
      const std::vector<float> gv = a->gpu_values(), cv = down(*be().cpu, a->c);
      double scale = 0.0, worst = 0.0;  // worst: the largest |gpu - cpu| as a fraction of its element's bound
      for (float v : cv) scale = std::max(scale, std::fabs(double(v)));
      for (size_t i = 0; i < n; ++i) {
        const double bound = kBf16StoreRel * std::fabs(double(cv[i])) + kFp32Rel * scale;
        worst = std::max(worst, std::fabs(double(gv[i]) - cv[i]) / bound);
      }
      MESSAGE(what << ": max over elements of |gpu - cpu| / (kBf16StoreRel |cpu| + kFp32Rel max|cpu|) = " << worst
                   << " (tolerance 1)");
      CHECK(worst <= 1.0);
    }
  }
}

TEST_CASE("causal grouped-query attention forward and backward") {
  for (QkvLayout s : {QkvLayout{2, 37, 6, 2, 16}, QkvLayout{1, 64, 4, 4, 64}, QkvLayout{2, 150, 2, 1, 32},
                      QkvLayout{1, 5, 2, 1, 160}}) {
    CAPTURE(s.B);
    CAPTURE(s.T);
    CAPTURE(s.NH);
    CAPTURE(s.KVH);
    CAPTURE(s.HS);
    const size_t bt = size_t(s.B) * s.T, qkv_n = s.qkv_count();
    Twin<float> qkv(rnd(qkv_n, 41, -2.0, 2.0)), out(filled(bt * s.NH * s.HS)),
        att(filled(size_t(s.B) * s.NH * s.T * s.T, 7.0f));  // 7: the zeros must be written
    be().cpu->attention_forward(out.c.get(), att.c.get(), qkv.c.get(), s.B, s.T, s.NH, s.KVH, s.HS);
    be().gpu->attention_forward(out.g.get(), att.g.get(), qkv.g.get(), s.B, s.T, s.NH, s.KVH, s.HS);
    expect_close("attention_forward out", out, kFp32Rel);
    expect_close("attention_forward att", att, kFp32Rel);
    Twin<float> dout(rnd(bt * s.NH * s.HS, 42)), dqkv(rnd(qkv_n, 43));
    be().cpu->attention_backward(dqkv.c.get(), dout.c.get(), qkv.c.get(), out.c.get(), att.c.get(), s.B, s.T, s.NH, s.KVH, s.HS);
    be().gpu->attention_backward(dqkv.g.get(), dout.g.get(), qkv.g.get(), out.g.get(), att.g.get(), s.B, s.T, s.NH, s.KVH, s.HS);
    expect_close("attention_backward dqkv", dqkv, kFp32Rel);
  }
}

namespace {

// with_attention_route: a CUDA backend of `dtype` whose attention route is `route` (--attention).
std::unique_ptr<Backend> with_attention_route(const char* route, const char* dtype) {
  return make_cuda_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype), parse_attention(route)});
}

// AttentionCase: attention forward and backward of the CPU oracle and of GPU backend g on the same seeded
// q, k, v (from `seed`) and dout (seed + 1); dqkv starts from dqkv0 and takes the backward with `mode`.
// The buffers stay for the caller's comparisons and reruns.
struct AttentionCase {
  Backend& g;
  QkvLayout s;
  Act qkv, out, dout, dqkv;
  Twin<float> att;  // CPU: (B,NH,T,T) probabilities; GPU: the backend's scratch (at most as large)
  AttentionCase(Backend& gpu, QkvLayout sh, uint64_t seed, const std::vector<float>& dqkv0, Grad mode)
      : g(gpu), s(sh), qkv(gpu, rnd(sh.qkv_count(), seed, -2.0, 2.0)), out(gpu, filled(sh.q_count(), 7.0f)),
        dout(gpu, rnd(sh.q_count(), seed + 1)), dqkv(gpu, dqkv0),
        att(filled(size_t(sh.B) * sh.NH * sh.T * sh.T), &gpu) {
    be().cpu->attention_forward(out.cp(), att.c.get(), qkv.cp(), s.B, s.T, s.NH, s.KVH, s.HS);
    g.attention_forward(out.gp(), att.g.get(), qkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS);
    be().cpu->attention_backward(dqkv.cp(), dout.cp(), qkv.cp(), out.cp(), att.c.get(), s.B, s.T, s.NH, s.KVH, s.HS, mode);
    g.attention_backward(dqkv.gp(), dout.gp(), qkv.gp(), out.gp(), att.g.get(), s.B, s.T, s.NH, s.KVH, s.HS, mode);
  }
};

}  // namespace

TEST_CASE("flash attention (FlashAttention-2 kernels) forward and backward, fp32 and bf16") {
  for (const char* dtype : {"fp32", "bf16"}) {
    auto flash = with_attention_route("flash", dtype);
    const double tol = std::string(dtype) == "bf16" ? kFlashBf16Rel : kFp32Rel;
    // T not a multiple of the 64-row tiles; kv groups of 3, 2 and 1 heads
    for (QkvLayout s : {QkvLayout{2, 150, 6, 2, 32}, QkvLayout{1, 130, 4, 2, 64}, QkvLayout{2, 64, 2, 2, 32},
                        QkvLayout{1, 300, 2, 1, 64}}) {
      CAPTURE(dtype);
      CAPTURE(s.T);
      CAPTURE(s.NH);
      CAPTURE(s.KVH);
      CAPTURE(s.HS);
      AttentionCase a(*flash, s, 44, rnd(s.qkv_count(), 46), Grad::accumulate);
      expect_close(std::string("flash attention_forward out ") + dtype, a.out, tol);
      expect_close(std::string("flash attention_backward dqkv ") + dtype, a.dqkv, tol);
      // deterministic: a rerun gives bitwise the same output, and the same backward the same increment
      Act out2(*flash, filled(s.q_count(), 5.0f));
      flash->attention_forward(out2.gp(), a.att.g.get(), a.qkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS);
      CHECK(out2.gpu_bytes() == a.out.gpu_bytes());
      Act dqkv2(*flash, rnd(s.qkv_count(), 46));
      flash->attention_backward(dqkv2.gp(), a.dout.gp(), a.qkv.gp(), a.out.gp(), a.att.g.get(), s.B, s.T, s.NH, s.KVH, s.HS);
      CHECK(dqkv2.gpu_bytes() == a.dqkv.gpu_bytes());
    }
  }
}

// cuDNN's fused attention (--attention cudnn, bf16 only) against the CPU oracle: the same bf16 operands and
// bf16 P and dS before the tensor-core products as the flash kernels, so the flash route's rounding argument
// and tolerance. T not a multiple of cuDNN's tiles, grouped-query heads (3 and 2 per kv head), HS 32 / 64
// (this model's) and 128 (cuDNN's largest), both Grad modes. Deterministic: a rerun gives the same bits.
TEST_CASE("cuDNN attention forward and backward (bf16)") {
  auto cd = with_attention_route("cudnn", "bf16");
  for (QkvLayout s : {QkvLayout{2, 150, 6, 2, 32}, QkvLayout{1, 130, 4, 2, 64}, QkvLayout{2, 256, 4, 4, 64},
                      QkvLayout{1, 200, 2, 2, 128}}) {
    for (Grad mode : {Grad::accumulate, Grad::assign}) {
      CAPTURE(s.T);
      CAPTURE(s.NH);
      CAPTURE(s.KVH);
      CAPTURE(s.HS);
      CAPTURE(mode == Grad::assign);
      AttentionCase a(*cd, s, 144, rnd(s.qkv_count(), 146), mode);
      expect_close("cudnn attention_forward out", a.out, kFlashBf16Rel);
      expect_close("cudnn attention_backward dqkv", a.dqkv, kFlashBf16Rel);
      Act out2(*cd, filled(s.q_count(), 5.0f));
      cd->attention_forward(out2.gp(), a.att.g.get(), a.qkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS);
      CHECK(out2.gpu_bytes() == a.out.gpu_bytes());
      Act dqkv2(*cd, rnd(s.qkv_count(), 146));
      cd->attention_backward(dqkv2.gp(), a.dout.gp(), a.qkv.gp(), a.out.gp(), a.att.g.get(), s.B, s.T, s.NH, s.KVH, s.HS, mode);
      CHECK(dqkv2.gpu_bytes() == a.dqkv.gpu_bytes());
    }
  }
}

// The cuDNN handle (Backend::setup_ms names it once made): --attention cudnn makes it at the set-up; auto (bf16)
// at the first cuDNN attention, which xtrain_generate's decoding never calls, and never inside a CUDA graph
// capture: a capture that would make it fails with an Error (not a silent switch to another route), and the
// attention run uncaptured afterwards makes it and gives the bits of --attention cudnn.
TEST_CASE("cuDNN handle: made at the set-up with --attention cudnn, at the first attention with auto, never in a capture") {
  auto cudnn_parts = [](const Backend& b) {
    int n = 0;
    for (const auto& [what, ms] : b.setup_ms()) n += what.find("cuDNN handle") != std::string::npos;
    return n;
  };
  auto strict = with_attention_route("cudnn", "bf16");
  CHECK(cudnn_parts(*strict) == 1);
  CHECK(strict->setup_ms().size() >= 6);  // driver, context, properties and stream, cuBLAS, workspace, cuBLASLt
  auto lazy = with_attention_route("auto", "bf16");
  CHECK(cudnn_parts(*lazy) == 0);
  const QkvLayout s{1, 130, 4, 2, 64};
  Act qkv(*lazy, rnd(s.qkv_count(), 44, -2.0, 2.0)), out(*lazy, filled(s.q_count(), 7.0f));
  Twin<float> att(filled(size_t(s.B) * s.NH * s.T * s.T), lazy.get());
  CHECK_THROWS_WITH_AS(lazy->capture_graph([&] {
    lazy->attention_forward(out.gp(), att.g.get(), qkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS);
  }), doctest::Contains("inside a CUDA graph capture"), Error);
  CHECK(cudnn_parts(*lazy) == 0);
  AttentionCase a(*lazy, s, 44, rnd(s.qkv_count(), 46), Grad::assign);  // uncaptured: makes the handle
  CHECK(cudnn_parts(*lazy) == 1);
  AttentionCase b(*strict, s, 44, rnd(s.qkv_count(), 46), Grad::assign);
  CHECK(a.out.gpu_bytes() == b.out.gpu_bytes());
  CHECK(a.dqkv.gpu_bytes() == b.dqkv.gpu_bytes());
  // made once: a capture now records the attention (the plans were built uncaptured above)
  CHECK(lazy->capture_graph([&] {
    lazy->attention_forward(out.gp(), att.g.get(), qkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS);
  }) != nullptr);
  CHECK(cudnn_parts(*lazy) == 1);
}

TEST_CASE("--attention is validated: cudnn needs bf16, a route needs the CUDA backend, unknown words") {
  CHECK_THROWS_AS(with_attention_route("cudnn", "fp32"), UsageError);
  CHECK_THROWS_AS(make_backend(BackendOptions{Device::cpu, 0, 1, DType::fp32, Attention::flash}), UsageError);
  CHECK_THROWS_AS(parse_attention("fast"), UsageError);
  CHECK(parse_attention("cudnn") == Attention::cudnn);
}

// bf16 activations on the GEMM route (--attention gemm, and shapes the flash kernels do not take:
// HS 16 and 160): the op converts to fp32 copies around the cuBLAS route, whose products are bf16
// (FAST_16BF); same rounding argument and tolerance as the flash route with bf16.
TEST_CASE("attention with bf16 activations on the GEMM route") {
  auto gb = with_attention_route("gemm", "bf16");
  for (QkvLayout s : {QkvLayout{2, 37, 6, 2, 16}, QkvLayout{2, 150, 6, 2, 32}, QkvLayout{1, 5, 2, 1, 160}}) {
    CAPTURE(s.T);
    CAPTURE(s.HS);
    AttentionCase a(*gb, s, 47, rnd(s.qkv_count(), 49), Grad::accumulate);
    expect_close("gemm-route attention_forward out", a.out, kFlashBf16Rel);
    expect_close("gemm-route attention_backward dqkv", a.dqkv, kFlashBf16Rel);
  }
}

// Every other op that reads or writes activations, with --dtype bf16 (bf16 storage) against the CPU on
// the same bf16-representable inputs: kBf16StoreRel for bf16 outputs, the fp32 tolerances for fp32 ones.
TEST_CASE("bf16 activation storage: encoder, layernorm, gelu, residual, dropout, cross-entropy") {
  Backend& g = g16();
  Backend& c = *be().cpu;
  {  // encoder: out bf16; dwte, dwpe fp32 sums of the same (rounded) dout values in the same order
    const int B = 3, T = 17, C = 40, V = 9;
    Twin<int32_t> tok(test::random_tokens(size_t(B) * T, V, 111), &g);
    Twin<float> wte(rnd(size_t(V) * C, 112), &g), wpe(rnd(size_t(T) * C, 113), &g);
    Act out(g, filled(size_t(B) * T * C));
    c.encoder_forward(out.cp(), tok.c.get(), wte.c.get(), wpe.c.get(), B, T, C);
    g.encoder_forward(out.gp(), tok.g.get(), wte.g.get(), wpe.g.get(), B, T, C);
    expect_close("encoder_forward out", out, kBf16StoreRel);
    Act dout(g, rnd(size_t(B) * T * C, 114));
    Twin<float> dwte(rnd(size_t(V) * C, 115), &g), dwpe(rnd(size_t(T) * C, 116), &g);
    c.encoder_backward(dwte.c.get(), dwpe.c.get(), dout.cp(), tok.c.get(), B, T, C);
    g.encoder_backward(dwte.g.get(), dwpe.g.get(), dout.gp(), tok.g.get(), B, T, C);
    expect_close("encoder_backward dwte", dwte, kExact);
    expect_close("encoder_backward dwpe", dwpe, kExact);
  }
  for (int C : {768, 100}) {  // layernorm: out, dinp bf16; statistics and dw, db fp32; 100: unaligned rows
    CAPTURE(C);
    const int N = 70;
    Act inp(g, rnd(size_t(N) * C, 121, 1.0, 3.0)), out(g, filled(size_t(N) * C));
    Twin<float> w(rnd(C, 122), &g), b(rnd(C, 123), &g), mean(filled(N), &g), rstd(filled(N), &g);
    c.layernorm_forward(out.cp(), mean.c.get(), rstd.c.get(), inp.cp(), w.c.get(), b.c.get(), N, C);
    g.layernorm_forward(out.gp(), mean.g.get(), rstd.g.get(), inp.gp(), w.g.get(), b.g.get(), N, C);
    expect_close("layernorm_forward out", out, kBf16StoreRel);
    expect_close("layernorm_forward mean", mean, kFp32Rel);
    expect_close("layernorm_forward rstd", rstd, kFp32Rel);
    Act dout(g, rnd(size_t(N) * C, 124)), dinp(g, rnd(size_t(N) * C, 125));
    Twin<float> dw(rnd(C, 126), &g), db(rnd(C, 127), &g);
    c.layernorm_backward(dinp.cp(), dw.c.get(), db.c.get(), dout.cp(), inp.cp(), w.c.get(), mean.c.get(),
                         rstd.c.get(), N, C);
    g.layernorm_backward(dinp.gp(), dw.g.get(), db.g.get(), dout.gp(), inp.gp(), w.g.get(), mean.g.get(),
                         rstd.g.get(), N, C);
    expect_close("layernorm_backward dinp", dinp, kBf16StoreRel);
    expect_close("layernorm_backward dw", dw, kFp32Rel);
    expect_close("layernorm_backward db", db, kFp32Rel);
  }
  {  // gelu, residual, add_inplace
    const size_t n = 100003;
    Act x(g, rnd(n, 131, -6.0, 6.0)), y(g, rnd(n, 132)), out(g, filled(n)), dinp(g, rnd(n, 133));
    c.gelu_forward(out.cp(), x.cp(), n);
    g.gelu_forward(out.gp(), x.gp(), n);
    expect_close("gelu_forward", out, kBf16StoreRel);
    c.gelu_backward(dinp.cp(), x.cp(), y.cp(), n);
    g.gelu_backward(dinp.gp(), x.gp(), y.gp(), n);
    expect_close("gelu_backward", dinp, kBf16StoreRel);
    Act r(g, filled(n)), acc(g, rnd(n, 134));
    c.residual_forward(r.cp(), x.cp(), y.cp(), n);
    g.residual_forward(r.gp(), x.gp(), y.gp(), n);
    expect_close("residual_forward", r, kBf16StoreRel);
    c.add_inplace(acc.cp(), x.cp(), n);
    g.add_inplace(acc.gp(), x.gp(), n);
    expect_close("add_inplace", acc, kBf16StoreRel);
  }
  {  // pointers one element past a 16-byte boundary: the element-by-element paths of the same kernels
    const size_t n = 1001;
    Act x(g, rnd(n + 1, 135, -6.0, 6.0)), y(g, rnd(n + 1, 136)), out(g, filled(n + 1)), acc(g, rnd(n + 1, 137));
    auto gp1 = [](const Act& a) { return static_cast<void*>(static_cast<char*>(a.gp()) + 2); };  // + 1 bf16
    c.gelu_forward(out.cp() + 1, x.cp() + 1, n);
    g.gelu_forward(gp1(out), gp1(x), n);
    expect_close("gelu_forward (unaligned)", out, kBf16StoreRel);
    c.gelu_backward(acc.cp() + 1, x.cp() + 1, y.cp() + 1, n);
    g.gelu_backward(gp1(acc), gp1(x), gp1(y), n);
    expect_close("gelu_backward (unaligned)", acc, kBf16StoreRel);
    c.residual_forward(out.cp() + 1, x.cp() + 1, y.cp() + 1, n);
    g.residual_forward(gp1(out), gp1(x), gp1(y), n);
    expect_close("residual_forward (unaligned)", out, kBf16StoreRel);
  }
  {  // dropout: the same mask (a wrong bit is an O(1) difference), kept values scaled and rounded
    const int B = 3;
    const size_t per_seq = 5000;
    const std::vector<uint64_t> keys = {hash_key(9, 1), hash_key(9, 2), hash_key(9, 3)};
    Act x(g, rnd(B * per_seq, 141));
    c.dropout_apply(x.cp(), keys.data(), B, per_seq, 0.1f);
    g.dropout_apply(x.gp(), keys.data(), B, per_seq, 0.1f);
    expect_close("dropout_apply", x, kBf16StoreRel);
  }
  for (int Vp : {1024, 1004}) {  // cross-entropy: logits, dlogits bf16 (in place), losses fp32; 1004: rows not 16-byte aligned
    CAPTURE(Vp);
    const int N = 64, V = 1001;
    Twin<int32_t> tg(test::random_tokens(N, V, 151), &g);
    Act lg(g, rnd(size_t(N) * Vp, 152, -4.0, 4.0));
    Twin<float> losses(filled(N), &g);
    const float dloss = 1.0f / N;
    c.cross_entropy_forward_backward(losses.c.get(), lg.cp(), lg.cp(), tg.c.get(), dloss, N, V, Vp);
    g.cross_entropy_forward_backward(losses.g.get(), lg.gp(), lg.gp(), tg.g.get(), dloss, N, V, Vp);
    expect_close("cross_entropy losses", losses, kFp32Rel);
    expect_close("cross_entropy dlogits (in place)", lg, kBf16StoreRel);
  }
}

// residual_layernorm_forward (the model's residual adds) against its definition, residual_forward then
// layernorm_forward on the same backend: the same bits for res, out, mean and rstd, with fp32 and bf16
// activations, 16-byte rows (C = 768) and element-wise rows (C = 100), and with res overwriting a.
TEST_CASE("residual_layernorm_forward gives the bits of residual_forward + layernorm_forward") {
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (int C : {768, 100}) {
      CAPTURE(C);
      CAPTURE(g->activation_bytes());
      const int N = 37;
      const size_t n = size_t(N) * C;
      Act a(*g, rnd(n, 61, -3.0, 3.0)), b(*g, rnd(n, 62)), res(*g, filled(n)), out(*g, filled(n));
      Act res2(*g, filled(n)), out2(*g, filled(n)), a3(*g, rnd(n, 61, -3.0, 3.0)), out3(*g, filled(n));
      Twin<float> w(rnd(C, 63), g), bias(rnd(C, 64), g), mean(filled(N), g), rstd(filled(N), g);
      Twin<float> mean2(filled(N), g), rstd2(filled(N), g);
      g->residual_forward(res.gp(), a.gp(), b.gp(), n);
      g->layernorm_forward(out.gp(), mean.g.get(), rstd.g.get(), res.gp(), w.g.get(), bias.g.get(), N, C);
      g->residual_layernorm_forward(res2.gp(), out2.gp(), mean2.g.get(), rstd2.g.get(), a.gp(), b.gp(), w.g.get(),
                                    bias.g.get(), N, C);
      CHECK(res2.gpu_bytes() == res.gpu_bytes());
      CHECK(out2.gpu_bytes() == out.gpu_bytes());
      CHECK(down(*g, mean2.g) == down(*g, mean.g));
      CHECK(down(*g, rstd2.g) == down(*g, rstd.g));
      g->residual_layernorm_forward(a3.gp(), out3.gp(), mean2.g.get(), rstd2.g.get(), a3.gp(), b.gp(), w.g.get(),
                                    bias.g.get(), N, C);  // res aliases a
      CHECK(a3.gpu_bytes() == res.gpu_bytes());
      CHECK(out3.gpu_bytes() == out.gpu_bytes());
    }
  }
}

TEST_CASE("gelu, residual, add_inplace") {
  const size_t n = 100003;
  Twin<float> x(rnd(n, 51, -6.0, 6.0)), y(rnd(n, 52)), out(filled(n)), dinp(rnd(n, 53));
  be().cpu->gelu_forward(out.c.get(), x.c.get(), n);
  be().gpu->gelu_forward(out.g.get(), x.g.get(), n);
  expect_close("gelu_forward", out, kFp32Rel);
  be().cpu->gelu_backward(dinp.c.get(), x.c.get(), y.c.get(), n);
  be().gpu->gelu_backward(dinp.g.get(), x.g.get(), y.g.get(), n);
  expect_close("gelu_backward", dinp, kFp32Rel);
  be().cpu->residual_forward(out.c.get(), x.c.get(), y.c.get(), n);
  be().gpu->residual_forward(out.g.get(), x.g.get(), y.g.get(), n);
  expect_close("residual_forward", out, kExact);
  be().cpu->add_inplace(out.c.get(), x.c.get(), n);
  be().gpu->add_inplace(out.g.get(), x.g.get(), n);
  expect_close("add_inplace", out, kExact);
}

// Grad::assign (the model's first write into each activation-gradient buffer): the op must overwrite
// whatever the buffer held (here NaN, which any read of the old value would spread) and give what the
// accumulating op gives on a zeroed buffer; the CPU oracle zeroes and accumulates. fp32 and bf16
// storage, matmul (cuBLASLt and unfused shapes), GELU, attention on both routes.
TEST_CASE("Grad::assign overwrites activation gradients (matmul, GELU, attention)") {
  const float kNaN = std::nanf("");
  auto flash32 = with_attention_route("flash", "fp32"), flash16 = with_attention_route("flash", "bf16");
  auto gemm16 = with_attention_route("gemm", "bf16");
  Backend* const gpus[] = {be().gpu.get(), &g16(), flash32.get(), flash16.get(), gemm16.get()};
  for (Backend* g : gpus) {
    CAPTURE(to_string(g->dtype()));
    const bool b16 = g->activation_bytes() == 2;
    const double tol_mm = b16 ? kBf16GemmRel : kFp32Rel, tol_ew = b16 ? kBf16StoreRel : kFp32Rel;
    const double tol_att = b16 ? kFlashBf16Rel : kFp32Rel;
    for (int IC : {96, 36}) {
      const int N = 33, OC = 64;
      Act inp(*g, rnd(size_t(N) * IC, 201)), dout(*g, rnd(size_t(N) * OC, 202)), dinp(*g, filled(size_t(N) * IC, kNaN));
      Twin<float> w(rnd(size_t(OC) * IC, 203), g), dw(filled(size_t(OC) * IC), g), db(filled(OC), g);
      be().cpu->matmul_backward(dinp.cp(), dw.c.get(), db.c.get(), dout.cp(), inp.cp(), w.c.get(), N, IC, OC, Grad::assign);
      g->matmul_backward(dinp.gp(), dw.g.get(), db.g.get(), dout.gp(), inp.gp(), w.g.get(), N, IC, OC, Grad::assign);
      expect_close("matmul_backward dinp (assign)", dinp, tol_mm);
      expect_close("matmul_backward dw (assign run)", dw, tol_mm);
    }
    {
      const size_t n = 10001;
      Act x(*g, rnd(n, 211, -6.0, 6.0)), dy(*g, rnd(n, 212)), dx(*g, filled(n, kNaN));
      be().cpu->gelu_backward(dx.cp(), x.cp(), dy.cp(), n, Grad::assign);
      g->gelu_backward(dx.gp(), x.gp(), dy.gp(), n, Grad::assign);
      expect_close("gelu_backward (assign)", dx, tol_ew);
    }
    {
      const QkvLayout s{2, 150, 4, 2, 32};
      AttentionCase a(*g, s, 221, filled(s.qkv_count(), kNaN), Grad::assign);
      expect_close("attention_backward dqkv (assign)", a.dqkv, tol_att);
    }
  }
}

// Grad::assign for weight gradients (the first micro-step's backward, GPT::backward): the writers must overwrite
// dw and dbias whatever they held (NaN here) and give what the CPU oracle gives, as the += tests do. The matmul
// (cuBLASLt-aligned and unfused shapes: GEMM beta 0, the bias column sum's bf16x2 and element paths), the fused
// GELU matmul (bf16 DGELU route), layernorm's fused per-block sums (C <= 1024) and column-reduction route (4096),
// rmsnorm, odd C (element paths); an empty sum (N == 0) assigned writes zeros. fp32 and bf16 storage.
TEST_CASE("Grad::assign overwrites weight gradients (matmul, fused GELU matmul, layernorm, rmsnorm)") {
  const float kNaN = std::nanf("");
  for (Backend* g : {be().gpu.get(), &g16()}) {
    CAPTURE(to_string(g->dtype()));
    const bool b16 = g->activation_bytes() == 2;
    const double tol_mm = b16 ? kBf16GemmRel : kFp32Rel;
    for (int IC : {96, 36}) {
      CAPTURE(IC);
      const int N = 33, OC = 64;
      Act inp(*g, rnd(size_t(N) * IC, 231)), dout(*g, rnd(size_t(N) * OC, 232)), dinp(*g, filled(size_t(N) * IC));
      Twin<float> w(rnd(size_t(OC) * IC, 233), g), dw(filled(size_t(OC) * IC, kNaN), g), db(filled(OC, kNaN), g);
      be().cpu->matmul_backward(dinp.cp(), dw.c.get(), db.c.get(), dout.cp(), inp.cp(), w.c.get(), N, IC, OC,
                                Grad::assign, Grad::assign);
      g->matmul_backward(dinp.gp(), dw.g.get(), db.g.get(), dout.gp(), inp.gp(), w.g.get(), N, IC, OC, Grad::assign,
                         Grad::assign);
      expect_close("matmul_backward dw (assign)", dw, tol_mm);
      expect_close("matmul_backward dbias (assign)", db, tol_mm);
      Twin<float> dw0(filled(size_t(OC) * IC, kNaN), g), db0(filled(OC, kNaN), g);
      g->matmul_backward(dinp.gp(), dw0.g.get(), db0.g.get(), dout.gp(), inp.gp(), w.g.get(), 0, IC, OC, Grad::assign,
                         Grad::assign);
      CHECK(down(*g, dw0.g) == filled(size_t(OC) * IC));
      CHECK(down(*g, db0.g) == filled(OC));
    }
    {
      const int N = 64, IC = 96, OC = 160;
      const size_t nin = size_t(N) * IC, nout = size_t(N) * OC;
      Act dout(*g, rnd(nout, 241)), x(*g, rnd(nin, 242, -4.0, 4.0)), y(*g, rnd(nin, 243)), dx(*g, filled(nin)),
          scratch(*g, filled(nin));
      Twin<float> w(rnd(size_t(OC) * IC, 244), g), dw(filled(size_t(OC) * IC, kNaN), g), db(filled(OC, kNaN), g);
      be().cpu->gelu_matmul_backward(dx.cp(), dw.c.get(), db.c.get(), dout.cp(), y.cp(), x.cp(), w.c.get(),
                                     scratch.cp(), N, IC, OC, Grad::assign);
      g->gelu_matmul_backward(dx.gp(), dw.g.get(), db.g.get(), dout.gp(), y.gp(), x.gp(), w.g.get(), scratch.gp(), N,
                              IC, OC, Grad::assign);
      expect_close("gelu_matmul_backward dw (assign)", dw, tol_mm);
      expect_close("gelu_matmul_backward dbias (assign)", db, tol_mm);
    }
    for (int C : {33, 768, 4096}) {
      CAPTURE(C);
      const int N = 1000;
      const size_t n = size_t(N) * C;
      Act inp(*g, rnd(n, 251, 1.0, 3.0)), out(*g, filled(n)), dout(*g, rnd(n, 252)), dinp(*g, filled(n));
      Twin<float> w(rnd(C, 253, 0.5, 1.5), g), mean(filled(N), g), rstd(filled(N), g);
      Twin<float> dw(filled(C, kNaN), g), db(filled(C, kNaN), g), rms_dw(filled(C, kNaN), g);
      be().cpu->layernorm_forward(out.cp(), mean.c.get(), rstd.c.get(), inp.cp(), w.c.get(), w.c.get(), N, C);
      g->layernorm_forward(out.gp(), mean.g.get(), rstd.g.get(), inp.gp(), w.g.get(), w.g.get(), N, C);
      be().cpu->layernorm_backward(dinp.cp(), dw.c.get(), db.c.get(), dout.cp(), inp.cp(), w.c.get(), mean.c.get(),
                                   rstd.c.get(), N, C, Grad::assign);
      g->layernorm_backward(dinp.gp(), dw.g.get(), db.g.get(), dout.gp(), inp.gp(), w.g.get(), mean.g.get(),
                            rstd.g.get(), N, C, Grad::assign);
      expect_close("layernorm_backward dw (assign)", dw, kFp32Rel);
      expect_close("layernorm_backward db (assign)", db, kFp32Rel);
      be().cpu->rmsnorm_forward(out.cp(), rstd.c.get(), inp.cp(), w.c.get(), N, C, 1e-5f);
      g->rmsnorm_forward(out.gp(), rstd.g.get(), inp.gp(), w.g.get(), N, C, 1e-5f);
      be().cpu->rmsnorm_backward(dinp.cp(), rms_dw.c.get(), dout.cp(), inp.cp(), w.c.get(), rstd.c.get(), N, C,
                                 Grad::assign);
      g->rmsnorm_backward(dinp.gp(), rms_dw.g.get(), dout.gp(), inp.gp(), w.g.get(), rstd.g.get(), N, C, Grad::assign);
      expect_close("rmsnorm_backward dw (assign)", rms_dw, kFp32Rel);
      Twin<float> dw0(filled(C, kNaN), g), db0(filled(C, kNaN), g), rms0(filled(C, kNaN), g);
      g->layernorm_backward(dinp.gp(), dw0.g.get(), db0.g.get(), dout.gp(), inp.gp(), w.g.get(), mean.g.get(),
                            rstd.g.get(), 0, C, Grad::assign);
      g->rmsnorm_backward(dinp.gp(), rms0.g.get(), dout.gp(), inp.gp(), w.g.get(), rstd.g.get(), 0, C, Grad::assign);
      CHECK(down(*g, dw0.g) == filled(C));
      CHECK(down(*g, db0.g) == filled(C));
      CHECK(down(*g, rms0.g) == filled(C));
    }
  }
}

TEST_CASE("dropout recomputes the CPU mask bit for bit") {
  const int B = 3;
  const size_t per_seq = 5000;
  const std::vector<uint64_t> keys = {hash_key(7, 1), hash_key(7, 2), hash_key(7, 3)};
  for (float p : {0.0f, 0.1f, 0.5f}) {
    CAPTURE(p);
    Twin<float> x(rnd(B * per_seq, 61));
    be().cpu->dropout_apply(x.c.get(), keys.data(), B, per_seq, p);
    be().gpu->dropout_apply(x.g.get(), keys.data(), B, per_seq, p);
    expect_close("dropout_apply", x, kExact);
  }
}

TEST_CASE("fused softmax cross-entropy (separate, aliased and no dlogits; padded row stride)") {
  const int N = 64, V = 1001, Vp = 1024;  // Vp: padded vocabulary (GPTConfig::Vp), ignored; V % 4 = 1: a scalar tail
  const std::vector<int32_t> targets = test::random_tokens(N, V, 71);
  Twin<int32_t> tg(targets);
  const std::vector<float> logits = rnd(size_t(N) * Vp, 72, -4.0, 4.0);
  Twin<float> lg(logits), losses(filled(N)), dl(filled(size_t(N) * Vp, 7.0f));
  const float dloss = 1.0f / N;
  be().cpu->cross_entropy_forward_backward(losses.c.get(), dl.c.get(), lg.c.get(), tg.c.get(), dloss, N, V, Vp);
  be().gpu->cross_entropy_forward_backward(losses.g.get(), dl.g.get(), lg.g.get(), tg.g.get(), dloss, N, V, Vp);
  expect_close("cross_entropy losses", losses, kFp32Rel);
  expect_close("cross_entropy dlogits", dl, kFp32Rel);
  // dlogits aliasing logits: gradients overwrite the logits in place
  Twin<float> losses2(filled(N));
  be().cpu->cross_entropy_forward_backward(losses2.c.get(), lg.c.get(), lg.c.get(), tg.c.get(), dloss, N, V, Vp);
  be().gpu->cross_entropy_forward_backward(losses2.g.get(), lg.g.get(), lg.g.get(), tg.g.get(), dloss, N, V, Vp);
  expect_close("cross_entropy losses (aliased)", losses2, kFp32Rel);
  expect_close("cross_entropy dlogits (aliased)", lg, kFp32Rel);
  const double alias_vs_separate = rel_err(to_double(down(*be().gpu, lg.g)), to_double(down(*be().gpu, dl.g)));
  CHECK(alias_vs_separate == 0.0);  // same kernel, same inputs: aliasing must not change a bit
  Twin<float> lg2(logits), losses3(filled(N));
  be().cpu->cross_entropy_forward_backward(losses3.c.get(), nullptr, lg2.c.get(), tg.c.get(), dloss, N, V, Vp);
  be().gpu->cross_entropy_forward_backward(losses3.g.get(), nullptr, lg2.g.get(), tg.g.get(), dloss, N, V, Vp);
  expect_close("cross_entropy losses (no dlogits)", losses3, kFp32Rel);
  expect_close("cross_entropy logits untouched", lg2, kExact);
}

// GPT-2's vocabulary (V = 50257, Vp = 50304) and a larger one: with bf16 logits a GPT-2 row (100 KB)
// is kept in shared memory between the two passes; fp32 rows (201 KB) and bf16 rows of V = 130000
// (260 KB, more than any GPU's shared memory per block) take the two-pass path. Each: separate and
// aliased dlogits (bitwise the same), and no dlogits. A small vocabulary on chip, then GPT-2's again: the
// kernel's shared-memory limit, set once per size, must still allow the larger row.
TEST_CASE("cross-entropy at large vocabularies: the row on chip, or read twice where it does not fit") {
  struct Case { Backend* g; int V, Vp; };
  for (Case k : {Case{&g16(), 50257, 50304}, Case{be().gpu.get(), 50257, 50304}, Case{&g16(), 130000, 130000},
                 Case{&g16(), 1000, 1024}, Case{&g16(), 50257, 50304}}) {
    Backend& g = *k.g;
    Backend& c = *be().cpu;
    const bool b16 = g.activation_bytes() == 2;
    CAPTURE(b16);
    CAPTURE(k.V);
    const int N = 6;
    const size_t n = size_t(N) * k.Vp;
    Twin<int32_t> tg(test::random_tokens(N, k.V, 271), &g);
    const std::vector<float> logits = rnd(n, 272, -8.0, 8.0);
    Act lg(g, logits), dl(g, filled(n, 7.0f));
    Twin<float> losses(filled(N), &g), losses2(filled(N), &g), losses3(filled(N), &g);
    const float dloss = 1.0f / N;
    const double tol = b16 ? kBf16StoreRel : kFp32Rel;
    c.cross_entropy_forward_backward(losses3.c.get(), nullptr, lg.cp(), tg.c.get(), dloss, N, k.V, k.Vp);
    g.cross_entropy_forward_backward(losses3.g.get(), nullptr, lg.gp(), tg.g.get(), dloss, N, k.V, k.Vp);
    expect_close("cross_entropy losses (no dlogits)", losses3, kFp32Rel);
    c.cross_entropy_forward_backward(losses.c.get(), dl.cp(), lg.cp(), tg.c.get(), dloss, N, k.V, k.Vp);
    g.cross_entropy_forward_backward(losses.g.get(), dl.gp(), lg.gp(), tg.g.get(), dloss, N, k.V, k.Vp);
    expect_close("cross_entropy losses", losses, kFp32Rel);
    expect_close("cross_entropy dlogits", dl, tol);
    c.cross_entropy_forward_backward(losses2.c.get(), lg.cp(), lg.cp(), tg.c.get(), dloss, N, k.V, k.Vp);
    g.cross_entropy_forward_backward(losses2.g.get(), lg.gp(), lg.gp(), tg.g.get(), dloss, N, k.V, k.Vp);
    expect_close("cross_entropy losses (aliased)", losses2, kFp32Rel);
    expect_close("cross_entropy dlogits (aliased)", lg, tol);
    CHECK(lg.gpu_bytes() == dl.gpu_bytes());  // aliasing must not change a bit
    CHECK(down(g, losses2.g) == down(g, losses.g));
  }
}

// The bf16 on-chip path keeps each exponential as fp16 scaled by 2^15 (src/backend/cuda/cross_entropy.cu,
// kExpScale): element by element, not norm-wise (where the target's -1 hides the rest). Every gradient of
// probability p >= 2^-29 within 1.25 * 2^-8 relative (the bf16 store's unit roundoff 2^-8, fp16's 2^-11, and
// __expf's few fp32 ulp, ~2^-18); every smaller one within 1.25 * 2^-37 * dloss absolute (the bf16 store's
// 2^-8 of p < 2^-29, and fp16's subnormal rounding, unscaled, 2^-40). Logits spread over [-40, 0] put
// probabilities on both sides of 2^-29 in every row. The fp16 exponentials unscaled would fail it: their
// subnormals (exponentials below 2^-14) round with relative errors up to 2^-5 at 2^-20.
TEST_CASE("bf16 cross-entropy on chip: every gradient element within the fp16 exponentials' bounds") {
  Backend& g = g16();
  Backend& c = *be().cpu;
  const int N = 8, V = 50257, Vp = 50304;
  const size_t n = size_t(N) * Vp;
  Twin<int32_t> tg(test::random_tokens(N, V, 281), &g);
  Act lg(g, rnd(n, 282, -40.0, 0.0)), dl(g, filled(n));
  Twin<float> losses(filled(N), &g);
  const float dloss = 1.0f / N;
  c.cross_entropy_forward_backward(losses.c.get(), dl.cp(), lg.cp(), tg.c.get(), dloss, N, V, Vp);
  g.cross_entropy_forward_backward(losses.g.get(), dl.gp(), lg.gp(), tg.g.get(), dloss, N, V, Vp);
  expect_close("cross_entropy losses", losses, kFp32Rel);
  const std::vector<float> got = dl.gpu_values(), want = down(c, dl.c);
  const int32_t* targets = tg.c.get();
  const double rel_bound = 1.25 * std::ldexp(1.0, -8), abs_bound = 1.25 * std::ldexp(1.0, -37) * dloss;
  size_t above = 0, below = 0, bad = 0;
  double worst_rel = 0, worst_abs = 0;
  for (int r = 0; r < N; ++r)
    for (int j = 0; j < Vp; ++j) {
      const size_t i = size_t(r) * Vp + j;
      const double ref = want[i], err = std::fabs(double(got[i]) - ref);
      if (j >= V) {
        bad += got[i] != 0.0f;  // padded columns: 0
      } else if (j == targets[r] || ref >= std::ldexp(1.0, -29) * dloss) {
        ++above;
        worst_rel = std::max(worst_rel, err / std::fabs(ref));
        bad += err > rel_bound * std::fabs(ref);
      } else {
        ++below;
        worst_abs = std::max(worst_abs, err);
        bad += err > abs_bound;
      }
    }
  MESSAGE(above << " gradients of p >= 2^-29: worst relative error " << worst_rel << " (bound " << rel_bound << "); "
                << below << " smaller: worst absolute error " << worst_abs << " (bound " << abs_bound << ")");
  CHECK(above > size_t(N) * V / 10);  // both regimes well populated
  CHECK(below > size_t(N) * V / 10);
  CHECK(bad == 0);
}

TEST_CASE("bad targets and tokens are reported at the next synchronizing call") {
  Backend& g = *be().gpu;
  const int N = 4, V = 10;
  Twin<int32_t> bad(std::vector<int32_t>{1, 2, V, 3});
  Twin<float> lg(rnd(size_t(N) * V, 81)), losses(filled(N));
  g.cross_entropy_forward_backward(losses.g.get(), nullptr, lg.g.get(), bad.g.get(), 1.0f, N, V, V);
  CHECK_THROWS_WITH_AS(g.synchronize(), doctest::Contains("outside the vocabulary"), Error);
  CHECK_NOTHROW(g.synchronize());  // the flag was cleared
  // with dlogits (the row on chip): the same error, the bad row's loss NaN, the others finite
  g.cross_entropy_forward_backward(losses.g.get(), lg.g.get(), lg.g.get(), bad.g.get(), 1.0f, N, V, V);
  CHECK_THROWS_WITH_AS(g.synchronize(), doctest::Contains("outside the vocabulary"), Error);
  const std::vector<float> l = down(g, losses.g);
  CHECK(std::isnan(l[2]));
  CHECK((std::isfinite(l[0]) && std::isfinite(l[1]) && std::isfinite(l[3])));
  Twin<int32_t> neg(std::vector<int32_t>{0, -1});
  Twin<float> wte(rnd(4 * 8, 82)), wpe(rnd(2 * 8, 83)), out(filled(2 * 8));
  g.encoder_forward(out.g.get(), neg.g.get(), wte.g.get(), wpe.g.get(), 1, 2, 8);
  CHECK_THROWS_WITH_AS(g.synchronize(), doctest::Contains("negative"), Error);
}

TEST_CASE("sum and sum_squares in double") {
  const size_t n = 1000003;
  Twin<float> x(rnd(n, 91, -1.0, 3.0));
  for (bool sq : {false, true}) {
    const double c = sq ? be().cpu->sum_squares(x.c.get(), n) : be().cpu->sum(x.c.get(), n);
    const double g = sq ? be().gpu->sum_squares(x.g.get(), n) : be().gpu->sum(x.g.get(), n);
    MESSAGE(std::string(sq ? "sum_squares" : "sum") << ": cpu " << c << " gpu " << g << " rel " << std::fabs(g - c) / std::fabs(c));
    CHECK(std::fabs(g - c) <= kDoubleSumRel * std::fabs(c));
  }
}

// AdamW over a layout like a model's: tensors with and without weight decay, large ones over several chunks
// of the kernel's table (16Ki elements) ending mid-chunk, small ones at offsets that are not multiples of 4,
// and 3 elements that belong to no span. One launch for all spans against the CPU oracle, and against one
// launch per span (what AdamW::step did with one call per tensor) bitwise.
TEST_CASE("adamw over spans in one launch: the CPU oracle, and one launch per span bitwise") {
  const std::vector<ParamSpan> spans = {{0, 70001, true}, {70001, 13, false}, {70014, 1000, true},
                                        {71017, 4099, false}, {75116, 30000, true}};
  const size_t n = 75116 + 30000;
  const std::vector<float> p0 = rnd(n, 101);
  Twin<float> p(p0), m(filled(n)), v(filled(n));
  Backend& g = *be().gpu;
  DeviceBuffer<float> p1(g, n), m1(g, n), v1(g, n);  // the per-span launches
  g.copy_to_device(p1.get(), p0.data(), p1.bytes());
  g.zero(m1.get(), m1.bytes()), g.zero(v1.get(), v1.bytes());
  for (int t = 1; t <= 3; ++t) {
    Twin<float> grad(rnd(n, 102 + t, -0.1, 0.1));
    const float lr = 3e-4f * t;
    be().cpu->adamw_update(p.c.get(), grad.c.get(), m.c.get(), v.c.get(), spans, lr, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    g.adamw_update(p.g.get(), grad.g.get(), m.g.get(), v.g.get(), spans, lr, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    for (const ParamSpan& s : spans) {
      const size_t o = s.offset;
      g.adamw_update(p1.get() + o, grad.g.get() + o, m1.get() + o, v1.get() + o, {{0, s.count, s.decay}}, lr, 0.9f,
                     0.95f, 1e-8f, 0.1f, 0.7f, t);
    }
  }
  expect_close("adamw param", p, kFp32Rel);
  expect_close("adamw m", m, kFp32Rel);
  expect_close("adamw v", v, kFp32Rel);
  const std::vector<float> fused = down(g, p.g);
  CHECK(fused == down(g, p1));
  CHECK(down(g, m.g) == down(g, m1));
  CHECK(down(g, v.g) == down(g, v1));
  for (size_t i = 71014; i < 71017; ++i) CHECK(fused[i] == p0[i]);  // outside every span: untouched
  CHECK_THROWS_WITH_AS(g.adamw_update(p1.get(), p1.get(), m1.get(), v1.get(), {{0, 8, true}, {4, 8, true}}, 1e-3f,
                                      0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1),
                       doctest::Contains("without overlap"), Error);
}

TEST_CASE("caching allocator: no cudaMalloc once a step's sequence has run") {
  Backend& g = *be().gpu;
  const int B = 2, T = 64, C = 96, NH = 6, KVH = 2, HS = 16, V = 500;
  auto step = [&] {  // allocations of different sizes and the ops that take scratch memory
    DeviceBuffer<float> qkv(g, QkvLayout{B, T, NH, KVH, HS}.qkv_count()), dqkv(g, qkv.count()),
        att(g, size_t(B) * NH * T * T),
        out(g, size_t(B) * T * NH * HS), x(g, size_t(B) * T * C), dx(g, size_t(B) * T * C), w(g, C), dw(g, C),
        db(g, C), mean(g, size_t(B) * T), rstd(g, size_t(B) * T), wte(g, size_t(V) * C), wpe(g, size_t(T) * C);
    DeviceBuffer<int32_t> tok(g, size_t(B) * T);
    for (auto* buf : {&qkv, &dqkv, &att, &out, &x, &dx, &w, &dw, &db, &wte, &wpe}) g.zero(buf->get(), buf->bytes());
    g.zero(tok.get(), tok.bytes());
    g.attention_forward(out.get(), att.get(), qkv.get(), B, T, NH, KVH, HS);
    g.attention_backward(dqkv.get(), out.get(), qkv.get(), out.get(), att.get(), B, T, NH, KVH, HS);
    g.layernorm_forward(dx.get(), mean.get(), rstd.get(), x.get(), w.get(), db.get(), B * T, C);
    g.layernorm_backward(dx.get(), dw.get(), db.get(), x.get(), x.get(), w.get(), mean.get(), rstd.get(), B * T, C);
    g.encoder_backward(wte.get(), wpe.get(), x.get(), tok.get(), B, T, C);
    const uint64_t keys[B] = {1, 2};
    g.dropout_apply(x.get(), keys, B, size_t(T) * C, 0.1f);
    g.sum_squares(x.get(), x.count());
    g.synchronize();
  };
  step();
  const CudaAllocStats warm = cuda_alloc_stats(g);
  for (int i = 0; i < 3; ++i) step();
  const CudaAllocStats after = cuda_alloc_stats(g);
  MESSAGE("cudaMalloc calls: " << warm.cuda_malloc_calls << " after warm-up, " << after.cuda_malloc_calls
                               << " after 3 more steps; reserved " << after.bytes_reserved << " bytes");
  CHECK(warm.cuda_malloc_calls > 0);
  CHECK(after.cuda_malloc_calls == warm.cuda_malloc_calls);
  CHECK(after.cuda_free_calls == warm.cuda_free_calls);
  CHECK(after.bytes_in_use == warm.bytes_in_use);
}

namespace {

// decode_on_both: attention_decode of qkv (B,Tn,QKV) at cache position pos on the CPU oracle and on `gpu` (the
// position read from device memory), extending the caches kc, vc (B,maxT,KVH*HS) on both; the outputs
// (B,Tn,NH*HS), which start as 7 (every one must be written), are appended to got (GPU) and want (CPU).
void decode_on_both(Backend& gpu, Act& kc, Act& vc, const std::vector<float>& qkv, int B, int Tn, int32_t pos,
                    int maxT, int NH, int KVH, int HS, std::vector<double>& got, std::vector<double>& want) {
  Act q(gpu, qkv), out(gpu, filled(size_t(B) * Tn * NH * HS, 7.0f));
  be().cpu->attention_decode(out.cp(), kc.cp(), vc.cp(), q.cp(), B, Tn, &pos, maxT, NH, KVH, HS);
  DeviceBuffer<int32_t> pos_dev(gpu, 1);
  gpu.copy_to_device(pos_dev.get(), &pos, sizeof pos);
  gpu.attention_decode(out.gp(), kc.gp(), vc.gp(), q.gp(), B, Tn, pos_dev.get(), maxT, NH, KVH, HS);
  const std::vector<float> g = out.gpu_values(), c = down(*be().cpu, out.c);
  got.insert(got.end(), g.begin(), g.end());
  want.insert(want.end(), c.begin(), c.end());
}

}  // namespace

TEST_CASE("attention_decode: KV-cache append and attention against the CPU (prefill, then one position at a time)") {
  // GQA shape; T = 37 positions in a cache of 48: a prefill of 20, then 17 one-position steps
  const int B = 2, T = 37, maxT = 48, NH = 6, KVH = 2, HS = 64, prefill = 20;
  const int QKV = QkvLayout::row_width(NH, KVH, HS), A = NH * HS;
  const std::vector<float> qkv = rnd(size_t(B) * T * QKV, 71, -2.0, 2.0);
  for (Backend* gpu : {be().gpu.get(), &g16()}) {
    const bool b16 = gpu->activation_bytes() == 2;
    CAPTURE(b16);
    Act kc(*gpu, filled(size_t(B) * maxT * KVH * HS)), vc(*gpu, filled(size_t(B) * maxT * KVH * HS));
    std::vector<double> got, want;  // every output, in call order
    for (int32_t pos = 0; pos < T;) {
      const int Tn = pos == 0 ? prefill : 1;
      std::vector<float> chunk(size_t(B) * Tn * QKV);
      for (int b = 0; b < B; ++b)
        std::copy_n(qkv.begin() + (size_t(b) * T + pos) * QKV, size_t(Tn) * QKV, chunk.begin() + size_t(b) * Tn * QKV);
      decode_on_both(*gpu, kc, vc, chunk, B, Tn, pos, maxT, NH, KVH, HS, got, want);
      pos += Tn;
    }
    // the caches are copies of k and v: bitwise equal in either storage type
    expect_close("attention_decode kcache", kc, kExact);
    expect_close("attention_decode vcache", vc, kExact);
    // a position past the cache (maxT - 1 + 2 new rows): nothing written, an Error at the next copy to the host
    {
      int32_t* pos_dev = static_cast<int32_t*>(gpu->alloc(sizeof(int32_t)));  // the position, read when the op runs
      const int32_t bad = maxT - 1;
      const std::vector<unsigned char> k0 = kc.gpu_bytes(), v0 = vc.gpu_bytes();
      Act q(*gpu, rnd(size_t(B) * 2 * QKV, 5, -1.0, 1.0)), out(*gpu, filled(size_t(B) * 2 * A, 7.0f));
      gpu->copy_to_device(pos_dev, &bad, sizeof bad);
      gpu->attention_decode(out.gp(), kc.gp(), vc.gp(), q.gp(), B, 2, pos_dev, maxT, NH, KVH, HS);
      std::vector<float> probe(1);
      CHECK_THROWS_WITH_AS(gpu->copy_to_host(probe.data(), pos_dev, sizeof(int32_t)),
                           doctest::Contains("positions outside the key/value cache"), Error);
      CHECK(kc.gpu_bytes() == k0);  // the caches and the output are untouched
      CHECK(vc.gpu_bytes() == v0);
      CHECK(out.gpu_values() == std::vector<float>(size_t(B) * 2 * A, 7.0f));
      gpu->free(pos_dev);
    }
    // fp32: fp32 accumulation against the double oracle (kFp32Rel); bf16: the same bf16 inputs on both
    // sides and fp32 arithmetic inside, so only the final rounding of out to bf16 differs (kBf16StoreRel)
    const double tol = b16 ? kBf16StoreRel : kFp32Rel, err = rel_err(got, want);
    MESSAGE("attention_decode out" << (b16 ? " (bf16 storage)" : "") << ": max|gpu - cpu| / max|cpu| = " << err
                                   << " (tolerance " << tol << ")");
    CHECK(err <= tol);
  }
}

TEST_CASE("attention_decode: a long context (online softmax across tiles and chunks)") {
  // 60000 cached positions: the kernel cuts position t's rows into 32 chunks of ceil((t + 1) / 32) rows where that
  // exceeds kDecodeChunkRows (attention_decode.h; one block each) and takes a chunk in tiles of 256 scores, so t =
  // 59999 has chunks of 1875 rows in 8 tiles, t = 8192 chunks of 257 rows (a second tile of one row); sized by the
  // whole context, a block's shared memory (60000 scores) would exceed what a block may take on an H200 (227 KiB).
  // Queries at t = 4094..4096, 8190..8192 and at the end. Keys of rows < 4096 are small and later ones large, so the
  // max jumps by ~15 between chunks (t = 8190..8192: at the chunk boundary 4096) and the chunks' weights exp(m_s - m)
  // ~1e-7 matter; values zero-mean, scores peaked (sd ~4), so the output is a few rows' values, not a mean near a
  // constant. Two shapes: batch 2 over 60000 positions, batch 40 over 9000.
  for (const std::pair<int, int>& shape : {std::pair{2, 60000}, std::pair{40, 9000}}) {
    const int B = shape.first, maxT = shape.second;
    CAPTURE(B);
    const int NH = 4, KVH = 2, HS = 32, Tn = 3;
    const int QKV = QkvLayout::row_width(NH, KVH, HS), kv_row = KVH * HS;
    std::vector<float> keys = rnd(size_t(B) * maxT * kv_row, 81, -1.0, 1.0);
    for (int b = 0; b < B; ++b)
      for (size_t i = 0; i < size_t(4096) * kv_row; ++i) keys[size_t(b) * maxT * kv_row + i] *= 0.1f;
    for (Backend* gpu : {be().gpu.get(), &g16()}) {
      const bool b16 = gpu->activation_bytes() == 2;
      CAPTURE(b16);
      Act kc(*gpu, keys), vc(*gpu, rnd(size_t(B) * maxT * kv_row, 82, -1.0, 1.0));
      std::vector<double> got, want;
      for (const int32_t pos : {4094, 8190, maxT - Tn})
        decode_on_both(*gpu, kc, vc, rnd(size_t(B) * Tn * QKV, 83 + pos, -12.0, 12.0), B, Tn, pos, maxT, NH, KVH, HS,
                       got, want);
      const double tol = b16 ? kBf16StoreRel : kFp32Rel, err = rel_err(got, want);
      MESSAGE("attention_decode over " << maxT << " positions, batch " << B << (b16 ? " (bf16 storage)" : "")
                                       << ": max|gpu - cpu| / max|cpu| = " << err << " (tolerance " << tol << ")");
      CHECK(err <= tol);
    }
  }
}

// RowKernels::per_row's training forward runs attention_decode once over whole sequences (Tn = T new positions
// from position 0 in a scratch cache of exactly T rows: CudaBackend::attention_forward); a decoding step runs it one
// position at a time in the model's larger cache (another count of blocks per head), and at batch 1 it is launched
// programmatically with its L2 prefetch before the wait (launch.cuh). The chunks depend on the position alone, so
// each query row and each appended cache row must have the same bits in all three: T = 2R + 8 positions, R =
// kDecodeChunkRows, take one, two and three chunks (the combine across the boundaries R and 2R).
TEST_CASE("attention_decode: a position has the same bits over whole sequences, in batch steps and in batch-1 steps") {
  constexpr int R = cuda::kDecodeChunkRows;
  const int B = 2, T = 2 * R + 8, maxT = 3 * R + 40, NH = 4, KVH = 2, HS = 64;
  const int QKV = QkvLayout::row_width(NH, KVH, HS), A = NH * HS, kv_row = KVH * HS;
  const std::vector<float> qkv = rnd(size_t(B) * T * QKV, 95, -3.0, 3.0);
  for (Backend* gpu : {be().gpu.get(), &g16()}) {
    const size_t ab = gpu->activation_bytes();
    CAPTURE(ab);
    DeviceBuffer<int32_t> pos_dev(*gpu, 1);
    auto set_pos = [&](int32_t p) { gpu->copy_to_device(pos_dev.get(), &p, sizeof p); };
    Act q(*gpu, qkv), whole(*gpu, filled(size_t(B) * T * A, 7.0f));
    Act kc(*gpu, filled(size_t(B) * T * kv_row)), vc(*gpu, filled(size_t(B) * T * kv_row));
    set_pos(0);
    gpu->attention_decode(whole.gp(), kc.gp(), vc.gp(), q.gp(), B, T, pos_dev.get(), T, NH, KVH, HS);
    const std::vector<unsigned char> want = whole.gpu_bytes(), want_k = kc.gpu_bytes(), want_v = vc.gpu_bytes();
    // a row's bytes: row r of a (rows, width) tensor of the activation type
    auto same_row = [&](const std::vector<unsigned char>& a, size_t ra, const std::vector<unsigned char>& b, size_t rb,
                        int width) {
      const size_t n = size_t(width) * ab;
      return std::equal(a.begin() + std::ptrdiff_t(ra * n), a.begin() + std::ptrdiff_t((ra + 1) * n),
                        b.begin() + std::ptrdiff_t(rb * n));
    };
    for (const int batch : {B, 1}) {  // both sequences a step (a plain launch), then sequence 0 alone (programmatic)
      CAPTURE(batch);
      Act kd(*gpu, filled(size_t(batch) * maxT * kv_row)), vd(*gpu, filled(size_t(batch) * maxT * kv_row));
      int rows_equal = 0;
      for (int t = 0; t < T; ++t) {
        std::vector<float> step(size_t(batch) * QKV);
        for (int b = 0; b < batch; ++b)
          std::copy_n(qkv.begin() + std::ptrdiff_t((size_t(b) * T + t) * QKV), QKV, step.begin() + std::ptrdiff_t(b) * QKV);
        Act qs(*gpu, step), out(*gpu, filled(size_t(batch) * A, 7.0f));
        set_pos(t);
        gpu->attention_decode(out.gp(), kd.gp(), vd.gp(), qs.gp(), batch, 1, pos_dev.get(), maxT, NH, KVH, HS);
        const std::vector<unsigned char> got = out.gpu_bytes();
        for (int b = 0; b < batch; ++b) rows_equal += same_row(want, size_t(b) * T + t, got, size_t(b), A);
      }
      CHECK(rows_equal == batch * T);
      const std::vector<unsigned char> k = kd.gpu_bytes(), v = vd.gpu_bytes();
      int cache_equal = 0;
      for (int b = 0; b < batch; ++b)
        for (int t = 0; t < T; ++t)
          cache_equal += same_row(want_k, size_t(b) * T + t, k, size_t(b) * maxT + t, kv_row) &&
                         same_row(want_v, size_t(b) * T + t, v, size_t(b) * maxT + t, kv_row);
      CHECK(cache_equal == batch * T);
    }
  }
}

TEST_CASE("attention_decode: cache rows split across blocks (flash-decoding), grouped heads, odd head sizes") {
  // Position t's rows [0, t] make chunks of max(R, ceil((t + 1) / 32)) rows, R = kDecodeChunkRows, one block
  // each, combined in chunk order (attention_decode.h). Queries: a prefill at t = 0..4 (one chunk; in the cache
  // of 1024 fewer rows than the launch's 8 blocks per head), a prefill across the first boundary (t = R - 3 ..
  // R + 1), t = 2R - 1, 2R (the first row of a third chunk), mid-cache, and the end (t = maxT - 1: 8 chunks in the
  // cache of 1024, 3 in the others; 32 chunks: the long context above). Shapes: GPT-2's (12 heads
  // of 64, a cache of 1024), 3 query heads per kv head (one head per block) with 128-wide heads and batch
  // 3, 4 per kv head (four heads per block), and head size 18, not a whole number of 16-byte packs in
  // either type (the element-by-element loads), 2 per kv head.
  struct Shape {
    int B, NH, KVH, HS, maxT;
  };
  struct Step {
    int32_t pos;
    int Tn;
  };
  constexpr int R = cuda::kDecodeChunkRows;
  for (const Shape& sh : {Shape{1, 12, 12, 64, 1024}, Shape{3, 6, 2, 128, 2 * R + 44}, Shape{2, 8, 2, 64, 2 * R + 16},
                          Shape{1, 4, 2, 18, 2 * R + 32}}) {
    const int B = sh.B, NH = sh.NH, KVH = sh.KVH, HS = sh.HS, maxT = sh.maxT;
    CAPTURE(NH);
    CAPTURE(KVH);
    CAPTURE(HS);
    const int QKV = QkvLayout::row_width(NH, KVH, HS), kv_row = KVH * HS;
    const std::vector<float> keys = rnd(size_t(B) * maxT * kv_row, 91), values = rnd(size_t(B) * maxT * kv_row, 92);
    const std::vector<Step> steps = {{0, 5}, {R - 3, 5}, {2 * R - 1, 2}, {maxT / 2 + 1, 1}, {maxT - 3, 3}};
    for (Backend* gpu : {be().gpu.get(), &g16()}) {
      const bool b16 = gpu->activation_bytes() == 2;
      CAPTURE(b16);
      Act kc(*gpu, keys), vc(*gpu, values);
      std::vector<double> got, want;
      for (const Step& st : steps)  // scores of sd ~1.5: a softmax neither flat nor one-hot
        decode_on_both(*gpu, kc, vc, rnd(size_t(B) * st.Tn * QKV, 93 + st.pos, -3.0, 3.0), B, st.Tn, st.pos, maxT,
                       NH, KVH, HS, got, want);
      expect_close("attention_decode kcache", kc, kExact);  // the new rows appended by the same kernel
      expect_close("attention_decode vcache", vc, kExact);
      const double tol = b16 ? kBf16StoreRel : kFp32Rel, err = rel_err(got, want);
      MESSAGE("attention_decode NH " << NH << " KVH " << KVH << " HS " << HS << " batch " << B
                                     << (b16 ? " (bf16 storage)" : "") << ": max|gpu - cpu| / max|cpu| = " << err
                                     << " (tolerance " << tol << ")");
      CHECK(err <= tol);
      // the last step again: the same bits (chunks combined in a fixed order; every counter was reset)
      const Step& st = steps.back();
      std::vector<double> again, oracle;
      decode_on_both(*gpu, kc, vc, rnd(size_t(B) * st.Tn * QKV, 93 + st.pos, -3.0, 3.0), B, st.Tn, st.pos, maxT, NH,
                     KVH, HS, again, oracle);
      CHECK(std::equal(again.begin(), again.end(), got.end() - std::ptrdiff_t(again.size())));
    }
  }
}
