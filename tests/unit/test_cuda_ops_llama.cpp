// The Llama family's CUDA ops (RMSNorm and its fused residual add, rotary embeddings, SwiGLU, the encoder
// without learned positions) against the CPU oracle (cpu/ops_llama.h), with fp32 and bf16 activations. Part
// of the test_cuda_ops executable (its main skips with 77 when no GPU is visible).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/core/error.h>
#include "backend/cuda/ops.h"
#include "cpu_ops_test_util.h"
#include "cuda_ops_test_util.h"

using namespace xtrain;
using namespace xtrain::test::gpu;

namespace {

// the activation bound of a backend: fp32 arithmetic noise, or that plus one bf16 rounding of each output
double act_tol(const Backend& g) { return g.activation_bytes() == 2 ? kBf16StoreRel : kFp32Rel; }

}  // namespace

// Rows in 16-byte vectors (C = 768; C = 256 at N = 4099: several rows per chunk of the dw column sums) and
// element by element (C = 100: a multiple of the fp32 pack, not of the bf16 one; C = 50: of neither); odd N.
// The backward sums dw in its row kernel up to C = 2048: C = 2048 at N = 4099 (Llama-3.2-1B's width; chunks
// of 17 rows, so a block's warps take 3 or 2 rows, and the last block's 2 rows leave 6 of its warps none)
// and C = 2047 (element by element, every register column but one); wider rows take the separate column
// sums: C = 2049 (element by element) and C = 4096 (16-byte vectors). The forward keeps a row in registers
// up to 256 vectors and reads longer ones again: C = 2048 in fp32, 2049 and 4096. dinp and dw start nonzero:
// the backward adds to them (a lost += is an O(1) difference); a rerun on the same prefilled dw gives the
// same bits (the column sums have a fixed order).
TEST_CASE("rmsnorm forward and backward against the CPU, fp32 and bf16") {
  struct Shape { int N, C; float eps; };
  const Shape shapes[] = {{37, 768, 1e-5f},   {70, 100, 1e-6f},   {5, 50, 1e-5f},   {1, 2048, 1e-6f},
                          {4099, 256, 1e-5f}, {4099, 2048, 1e-5f}, {67, 2047, 1e-5f}, {33, 2049, 1e-6f},
                          {9, 4096, 1e-5f}};
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (const Shape s : shapes) {
      const int N = s.N, C = s.C;
      CAPTURE(g->activation_bytes());
      CAPTURE(N);
      CAPTURE(C);
      const size_t n = size_t(N) * C;
      Act inp(*g, rnd(n, 301, -2.0, 2.0)), out(*g, filled(n));
      Twin<float> w(rnd(C, 302, 0.5, 1.5), g), rstd(filled(N), g);
      be().cpu->rmsnorm_forward(out.cp(), rstd.c.get(), inp.cp(), w.c.get(), N, C, s.eps);
      g->rmsnorm_forward(out.gp(), rstd.g.get(), inp.gp(), w.g.get(), N, C, s.eps);
      expect_close("rmsnorm_forward out", out, act_tol(*g));
      expect_close("rmsnorm_forward rstd", rstd, kFp32Rel);
      Act dout(*g, rnd(n, 303)), dinp(*g, rnd(n, 304));
      Twin<float> dw(rnd(C, 305), g), dw2(rnd(C, 305), g);
      be().cpu->rmsnorm_backward(dinp.cp(), dw.c.get(), dout.cp(), inp.cp(), w.c.get(), rstd.c.get(), N, C);
      g->rmsnorm_backward(dinp.gp(), dw.g.get(), dout.gp(), inp.gp(), w.g.get(), rstd.g.get(), N, C);
      expect_close("rmsnorm_backward dinp (+=)", dinp, act_tol(*g));
      expect_close("rmsnorm_backward dw (+=)", dw, kFp32Rel);
      g->rmsnorm_backward(dinp.gp(), dw2.g.get(), dout.gp(), inp.gp(), w.g.get(), rstd.g.get(), N, C);
      CHECK(down(*g, dw2.g) == down(*g, dw.g));
    }
  }
}

// residual_rmsnorm_forward against its definition, residual_forward then rmsnorm_forward on the same backend:
// the same bits for res, out and rstd, fp32 and bf16, 16-byte rows (C = 768, 2048, 4096) and element-wise
// rows (C = 100, 50, 2049), rows kept in registers and rows read back from res (longer than 256 vectors:
// C = 4096, 2049, and 2048 in fp32), and with res overwriting a.
TEST_CASE("residual_rmsnorm_forward gives the bits of residual_forward + rmsnorm_forward") {
  const float eps = 1e-5f;
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (int C : {768, 100, 50, 2048, 4096, 2049}) {
      CAPTURE(C);
      CAPTURE(g->activation_bytes());
      const int N = 37;
      const size_t n = size_t(N) * C;
      Act a(*g, rnd(n, 311, -3.0, 3.0)), b(*g, rnd(n, 312)), res(*g, filled(n)), out(*g, filled(n));
      Act res2(*g, filled(n)), out2(*g, filled(n)), a3(*g, rnd(n, 311, -3.0, 3.0)), out3(*g, filled(n));
      Twin<float> w(rnd(C, 313), g), rstd(filled(N), g), rstd2(filled(N), g);
      g->residual_forward(res.gp(), a.gp(), b.gp(), n);
      g->rmsnorm_forward(out.gp(), rstd.g.get(), res.gp(), w.g.get(), N, C, eps);
      g->residual_rmsnorm_forward(res2.gp(), out2.gp(), rstd2.g.get(), a.gp(), b.gp(), w.g.get(), N, C, eps);
      CHECK(res2.gpu_bytes() == res.gpu_bytes());
      CHECK(out2.gpu_bytes() == out.gpu_bytes());
      CHECK(down(*g, rstd2.g) == down(*g, rstd.g));
      g->residual_rmsnorm_forward(a3.gp(), out3.gp(), rstd2.g.get(), a3.gp(), b.gp(), w.g.get(), N, C, eps);  // res = a
      CHECK(a3.gpu_bytes() == res.gpu_bytes());
      CHECK(out3.gpu_bytes() == out.gpu_bytes());
      CHECK(down(*g, rstd2.g) == down(*g, rstd.g));
    }
  }
}

// Rotary embeddings in place on the q and k heads; the whole qkv buffer is compared, so v heads must stay as
// they were. Multi-head (KVH = NH) and grouped-query (KVH < NH) layouts, the start position null (0) and 1000
// in device memory (angles of ~1000 radians: cosf/sinf's full-range reduction), two bases. Both kernels of
// rotary.cu (cuda::RotaryRoute): the row kernel for HS = 64 and 128 (several positions per block, the last
// block part empty; 72 heads of HS = 128 in fp32: more vectors than threads along a row, so threads loop),
// the pair kernel for HS = 20 (HS/2 a multiple of neither vector width) and, in bf16, HS = 24 (fp32 takes
// rows). The angles equal the oracle's bit for bit (the host's inv_freq table, rotary.cu), so the fp32
// difference is that of cosf/sinf and of fp32 products: kFp32Rel.
TEST_CASE("rotary forward and backward against the CPU: GQA, HS 20 to 128, a device start position") {
  struct Shape { int B, T, NH, KVH, HS; float theta; };
  const Shape shapes[] = {{2, 17, 4, 4, 64, 10000.0f}, {3, 5, 8, 2, 128, 500000.0f}, {1, 33, 6, 3, 64, 10000.0f},
                          {1, 3, 64, 8, 128, 500000.0f}, {2, 9, 3, 1, 20, 10000.0f}, {3, 4, 2, 2, 24, 10000.0f}};
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (const Shape s : shapes) {
      for (int start : {-1, 1000}) {  // -1: pos null
        CAPTURE(g->activation_bytes());
        CAPTURE(s.NH);
        CAPTURE(s.KVH);
        CAPTURE(s.HS);
        CAPTURE(start);
        const size_t n = size_t(s.B) * s.T * (s.NH + 2 * s.KVH) * s.HS;
        Twin<int32_t> pos(std::vector<int32_t>{start}, g);
        const int32_t* cpos = start < 0 ? nullptr : pos.c.get();
        const int32_t* gpos = start < 0 ? nullptr : pos.g.get();
        Act qkv(*g, rnd(n, 321, -2.0, 2.0)), dqkv(*g, rnd(n, 322));
        be().cpu->rotary_forward(qkv.cp(), cpos, s.B, s.T, s.NH, s.KVH, s.HS, s.theta);
        g->rotary_forward(qkv.gp(), gpos, s.B, s.T, s.NH, s.KVH, s.HS, s.theta);
        expect_close("rotary_forward qkv", qkv, act_tol(*g));
        be().cpu->rotary_backward(dqkv.cp(), s.B, s.T, s.NH, s.KVH, s.HS, s.theta);
        g->rotary_backward(dqkv.gp(), s.B, s.T, s.NH, s.KVH, s.HS, s.theta);
        expect_close("rotary_backward dqkv", dqkv, act_tol(*g));
      }
    }
  }
  // the routes the shapes above take (16-byte vectors: 4 fp32, 8 bf16 elements; the buffers are aligned)
  Act any(*be().gpu, filled(8));
  CHECK(cuda::rotary_route(cuda_op_context(*be().gpu), any.gp(), 24) == cuda::RotaryRoute::rows);
  CHECK(cuda::rotary_route(cuda_op_context(g16()), any.gp(), 24) == cuda::RotaryRoute::pairs);
  CHECK(cuda::rotary_route(cuda_op_context(*be().gpu), any.gp(), 20) == cuda::RotaryRoute::pairs);
  CHECK(cuda::rotary_route(cuda_op_context(g16()), any.gp(), 128) == cuda::RotaryRoute::rows);
  Act odd(*be().gpu, filled(size_t(3) * 63));  // B = T = NH = KVH = 1: 3 heads of HS = 63
  CHECK_THROWS_AS(be().gpu->rotary_forward(odd.gp(), nullptr, 1, 1, 1, 1, 63, 10000.0f), Error);
}

namespace {

// rotary_routes_agree: the values v of qkv (B,T,(NH+2*KVH)*HS) through rotary_forward (start position: device
// pointer gpos, or null) and then rotary_backward on the forward's result, once on each route of rotary.cu: the
// row kernel on a 16-byte aligned buffer, the pair kernel on the same values one element further on (not
// 16-byte aligned: the dispatch's fallback; cuda::rotary_route says which runs). The bytes must be equal after
// each. The row route's forward is also checked against the CPU oracle (start position cpos), so that two
// kernels agreeing on a wrong answer fails too.
void rotary_routes_agree(Backend& g, const std::vector<float>& v, const int32_t* cpos, const int32_t* gpos, int B,
                         int T, int NH, int KVH, int HS, float theta) {
  const cuda::OpContext& ctx = cuda_op_context(g);
  const size_t eb = g.activation_bytes(), n = v.size();
  std::vector<float> shifted(n + 1, 0.0f);
  std::copy(v.begin(), v.end(), shifted.begin() + 1);
  Act rows(g, v), pairs(g, shifted);
  void* rp = rows.gp();
  void* pp = static_cast<unsigned char*>(pairs.gp()) + eb;
  REQUIRE(cuda::rotary_route(ctx, rp, HS) == cuda::RotaryRoute::rows);
  REQUIRE(cuda::rotary_route(ctx, pp, HS) == cuda::RotaryRoute::pairs);
  const std::vector<unsigned char> input = rows.gpu_bytes();
  for (const bool forward : {true, false}) {
    CAPTURE(forward);
    if (forward) {
      g.rotary_forward(rp, gpos, B, T, NH, KVH, HS, theta);
      g.rotary_forward(pp, gpos, B, T, NH, KVH, HS, theta);
    } else {
      g.rotary_backward(rp, B, T, NH, KVH, HS, theta);
      g.rotary_backward(pp, B, T, NH, KVH, HS, theta);
    }
    const std::vector<unsigned char> r = rows.gpu_bytes(), p = pairs.gpu_bytes();
    REQUIRE(p.size() == r.size() + eb);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += std::memcmp(&r[i * eb], &p[(i + 1) * eb], eb) != 0;
    MESSAGE((forward ? "rotary_forward" : "rotary_backward") << " row vs pair kernel, " << n << " elements"
            << (eb == 2 ? " (bf16)" : "") << ": " << differ << " differ");
    CHECK(differ == 0);
    if (forward) {
      CHECK(r != input);  // the rotation ran (angles of 0 only would leave q and k as they were)
      be().cpu->rotary_forward(rows.cp(), cpos, B, T, NH, KVH, HS, theta);
      expect_close("rotary_forward qkv (row kernel)", rows, act_tol(g));
    }
  }
}

}  // namespace

// The row kernel's bits are the pair kernel's (rotary_routes_agree) at Llama 3.2 1B's attention layout (NH = 32,
// KVH = 8, HS = 64, theta 500000): a training micro-batch at T = 2048 (angles up to 2047 radians), and decoding
// rows (T = 1) at device position 131000, within the 131072-token context (angles past 1e5 radians, where
// cosf/sinf switch to their slow argument reduction).
TEST_CASE("rotary row kernel equals the pair kernel bit for bit: Llama 3.2 1B heads, T 2048, decoding at 131000") {
  const int NH = 32, KVH = 8, HS = 64;
  const float theta = 500000.0f;
  for (Backend* g : {be().gpu.get(), &g16()}) {
    CAPTURE(g->activation_bytes());
    {
      const int B = 2, T = 2048;
      rotary_routes_agree(*g, rnd(size_t(B) * T * (NH + 2 * KVH) * HS, 361, -2.0, 2.0), nullptr, nullptr, B, T, NH,
                          KVH, HS, theta);
    }
    {
      const int B = 3, T = 1;
      Twin<int32_t> pos(std::vector<int32_t>{131000}, g);
      rotary_routes_agree(*g, rnd(size_t(B) * T * (NH + 2 * KVH) * HS, 362, -2.0, 2.0), pos.c.get(), pos.g.get(), B,
                          T, NH, KVH, HS, theta);
    }
  }
}

// rotary_backward after rotary_forward (positions from 0) gives the input back: the backward is the
// rotation's transpose, an orthogonal map, so only fp32 rounding remains (kFp32Rel).
TEST_CASE("rotary backward undoes rotary forward (fp32)") {
  const int B = 2, T = 40, NH = 4, KVH = 2, HS = 64;
  const size_t n = size_t(B) * T * (NH + 2 * KVH) * HS;
  Backend& g = *be().gpu;
  Act x(g, rnd(n, 331, -2.0, 2.0));
  g.rotary_forward(x.gp(), nullptr, B, T, NH, KVH, HS, 10000.0f);
  g.rotary_backward(x.gp(), B, T, NH, KVH, HS, 10000.0f);
  // x's CPU copy still holds the input
  const double err = test::rel_err(test::to_double(x.gpu_values()), test::to_double(down(*be().cpu, x.c)));
  MESSAGE("rotary backward(forward(x)) vs x: " << err << " (tolerance " << kFp32Rel << ")");
  CHECK(err <= kFp32Rel);
}

// SwiGLU on the fused (N,2F) [gate | up] buffer: 16-byte packs (F = 256), F = 100 (packs for fp32 only),
// F = 50 and 1 (element by element), odd N. Gates in [-8, 8] reach both tails of the sigmoid. dinp starts
// as NaN on both sides: it is assigned, and any read of the old value would spread the NaN.
TEST_CASE("swiglu forward and backward against the CPU, fp32 and bf16") {
  struct Shape { int N, F; };
  const float kNaN = std::nanf("");
  for (Backend* g : {be().gpu.get(), &g16()}) {
    for (const Shape s : {Shape{37, 256}, Shape{5, 100}, Shape{33, 50}, Shape{3, 1}}) {
      CAPTURE(g->activation_bytes());
      CAPTURE(s.N);
      CAPTURE(s.F);
      const size_t nf = size_t(s.N) * s.F;
      Act inp(*g, rnd(2 * nf, 341, -8.0, 8.0)), out(*g, filled(nf)), dout(*g, rnd(nf, 342));
      Act dinp(*g, filled(2 * nf, kNaN));
      be().cpu->swiglu_forward(out.cp(), inp.cp(), s.N, s.F);
      g->swiglu_forward(out.gp(), inp.gp(), s.N, s.F);
      expect_close("swiglu_forward out", out, act_tol(*g));
      be().cpu->swiglu_backward(dinp.cp(), dout.cp(), inp.cp(), s.N, s.F);
      g->swiglu_backward(dinp.gp(), dout.gp(), inp.gp(), s.N, s.F);
      expect_close("swiglu_backward dinp (assigned)", dinp, act_tol(*g));
    }
  }
}

// The encoder without learned positions (wpe, dwpe null): out = wte[tok] (fp32: the same value, bit for
// bit; bf16: one rounding), dwte the same sums in the same order as the CPU's (exact).
TEST_CASE("encoder without learned positions (wpe null)") {
  const int B = 3, T = 17, C = 40, V = 9;
  for (Backend* g : {be().gpu.get(), &g16()}) {
    CAPTURE(g->activation_bytes());
    Twin<int32_t> tok(test::random_tokens(size_t(B) * T, V, 351), g);
    Twin<float> wte(rnd(size_t(V) * C, 352), g), dwte(rnd(size_t(V) * C, 353), g);
    Act out(*g, filled(size_t(B) * T * C)), dout(*g, rnd(size_t(B) * T * C, 354));
    be().cpu->encoder_forward(out.cp(), tok.c.get(), wte.c.get(), nullptr, B, T, C);
    g->encoder_forward(out.gp(), tok.g.get(), wte.g.get(), nullptr, B, T, C);
    expect_close("encoder_forward out (no wpe)", out, g->activation_bytes() == 2 ? kBf16StoreRel : kExact);
    be().cpu->encoder_backward(dwte.c.get(), nullptr, dout.cp(), tok.c.get(), B, T, C);
    g->encoder_backward(dwte.g.get(), nullptr, dout.gp(), tok.g.get(), B, T, C);
    expect_close("encoder_backward dwte (no dwpe)", dwte, kExact);
  }
}
