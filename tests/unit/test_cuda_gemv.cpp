// The few-row matmul route (gemv.cu: N <= kGemvMaxRows of gemv.h, decoding) against the CPU oracle, N across the
// threshold, fp32 and bf16, with and without bias, the fc layer's GELU variant; and that a row's output has the
// same bits computed alone and among other rows (what RowKernels::per_row relies on). Part of the test_cuda_ops
// executable (its main skips with 77 when no GPU is visible).
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include <xtrain/backend/backend.h>
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/ops.h"
#include "cpu_ops_test_util.h"
#include "cuda_ops_test_util.h"

using namespace xtrain;
using namespace xtrain::test::gpu;
using xtrain::cuda::kGemvMaxRows;

namespace {

struct Shape { int IC, OC; };
// 768 x 200: 16-byte loads; 3072 x 40: a wide IC split over warps (gemv.cu's split_for) with few columns;
// 100 x 52: a multiple of fp32's 4-element pack, not of bf16's 8 (bf16 takes the scalar path); 37 x 29: the
// scalar path and an odd OC (the last two-column group has one column).
// 4096 x 24: split over 4 warps; 9216 x 6: more packs per lane than one load round of the one-row kernel
// (gemv_row_kernel's loop); 64 x 16390: many blocks, the last column group part-filled.
const Shape kShapes[] = {{768, 200}, {3072, 40}, {100, 52}, {37, 29}, {4096, 24}, {9216, 6}, {64, 16390}};

// rows [r0, r0 + n) of an (N, C) host matrix
std::vector<float> rows_of(const std::vector<float>& m, int C, int r0, int n) {
  return std::vector<float>(m.begin() + size_t(r0) * C, m.begin() + size_t(r0 + n) * C);
}

// bytes [r0, r0 + n) rows of an (N, C) activation buffer read back as bytes (ab bytes per element)
std::vector<unsigned char> row_bytes(const std::vector<unsigned char>& m, size_t ab, int C, int r0, int n) {
  return std::vector<unsigned char>(m.begin() + size_t(r0) * C * ab, m.begin() + size_t(r0 + n) * C * ab);
}

}  // namespace

// N = 1 .. kGemvMaxRows take the GEMV kernel, kGemvMaxRows + 1 cuBLAS(Lt): both within the matmul tolerances
// (kFp32Rel, kBf16GemmRel). out and pre start at 7: an element left unwritten is an O(1) error; a bias over the
// wrong axis, a row read with another row's stride or a GELU of the rounded pre (bf16) shows up too.
TEST_CASE("few-row matmul and fc + GELU against the CPU, N across kGemvMaxRows, fp32 and bf16") {
  for (Backend* g : {be().gpu.get(), &g16()}) {
    const bool b16 = g->activation_bytes() == 2;
    const double tol = b16 ? kBf16GemmRel : kFp32Rel;
    for (const Shape s : kShapes) {
      for (int N = 1; N <= kGemvMaxRows + 1; ++N) {
        for (const bool with_bias : {true, false}) {
          CAPTURE(b16);
          CAPTURE(s.IC);
          CAPTURE(s.OC);
          CAPTURE(N);
          CAPTURE(with_bias);
          const size_t nin = size_t(N) * s.IC, nout = size_t(N) * s.OC;
          Act inp(*g, rnd(nin, 321)), out(*g, filled(nout, 7.0f)), pre(*g, filled(nout, 7.0f)),
              act(*g, filled(nout, 7.0f));
          Twin<float> w(rnd(size_t(s.OC) * s.IC, 322), g), bias(rnd(s.OC, 323), g);
          const float* bc = with_bias ? bias.c.get() : nullptr;
          const float* bg = with_bias ? bias.g.get() : nullptr;
          be().cpu->matmul_forward(out.cp(), inp.cp(), w.c.get(), bc, N, s.IC, s.OC);
          g->matmul_forward(out.gp(), inp.gp(), w.g.get(), bg, N, s.IC, s.OC);
          expect_close("few-row matmul_forward out", out, tol);
          be().cpu->matmul_gelu_forward(pre.cp(), act.cp(), inp.cp(), w.c.get(), bc, N, s.IC, s.OC);
          g->matmul_gelu_forward(pre.gp(), act.gp(), inp.gp(), w.g.get(), bg, N, s.IC, s.OC);
          expect_close("few-row matmul_gelu_forward pre", pre, tol);
          expect_close("few-row matmul_gelu_forward out", act, tol);
        }
      }
    }
  }
}

// The GEMV kernel's summation order depends on IC and the path, not on N: every row of an 8-row call (the
// route forced, MatmulRoute::gemv, as bench_cuda_ops times it, since kGemvMaxRows may be smaller) equals, bit for
// bit, the same row computed alone (N = 1, another register tile) and the first three rows computed as N = 3 (a
// third tile size). A kernel that split the work by N, or let rows share partial sums, fails.
TEST_CASE("few-row matmul: a row's bits do not depend on the rows computed with it") {
  for (Backend* g : {be().gpu.get(), &g16()}) {
    const size_t ab = g->activation_bytes();
    for (const Shape s : kShapes) {
      CAPTURE(ab);
      CAPTURE(s.IC);
      CAPTURE(s.OC);
      const int N = 8;
      const cuda::OpContext& ctx = cuda_op_context(*g);
      const auto gemv = cuda::MatmulRoute::gemv;
      const std::vector<float> x = rnd(size_t(N) * s.IC, 331);
      Twin<float> w(rnd(size_t(s.OC) * s.IC, 332), g), bias(rnd(s.OC, 333), g);
      Act inp(*g, x), out(*g, filled(size_t(N) * s.OC)), pre(*g, filled(size_t(N) * s.OC)),
          act(*g, filled(size_t(N) * s.OC));
      cuda::matmul_forward(ctx, out.gp(), inp.gp(), w.g.get(), bias.g.get(), N, s.IC, s.OC, gemv);
      CHECK(cuda::matmul_gelu_forward(ctx, pre.gp(), act.gp(), inp.gp(), w.g.get(), bias.g.get(), N, s.IC, s.OC, gemv));
      const std::vector<unsigned char> all_out = out.gpu_bytes(), all_pre = pre.gpu_bytes(), all_act = act.gpu_bytes();
      for (const int n : {1, 3}) {
        for (int r0 = 0; r0 + n <= N; r0 += n) {
          CAPTURE(n);
          CAPTURE(r0);
          Act part_inp(*g, rows_of(x, s.IC, r0, n)), part_out(*g, filled(size_t(n) * s.OC)),
              part_pre(*g, filled(size_t(n) * s.OC)), part_act(*g, filled(size_t(n) * s.OC));
          cuda::matmul_forward(ctx, part_out.gp(), part_inp.gp(), w.g.get(), bias.g.get(), n, s.IC, s.OC, gemv);
          CHECK(cuda::matmul_gelu_forward(ctx, part_pre.gp(), part_act.gp(), part_inp.gp(), w.g.get(), bias.g.get(), n,
                                          s.IC, s.OC, gemv));
          CHECK(part_out.gpu_bytes() == row_bytes(all_out, ab, s.OC, r0, n));
          CHECK(part_pre.gpu_bytes() == row_bytes(all_pre, ab, s.OC, r0, n));
          CHECK(part_act.gpu_bytes() == row_bytes(all_act, ab, s.OC, r0, n));
        }
      }
    }
  }
}

// gemv_fused_forward (the decoder's batch-1 step) gives the bits of the ops it replaces: layernorm_forward or
// rmsnorm_forward of the raw row, then gemv_forward (and its fc GELU variant); gemv_forward then residual_forward
// (out aliasing the residual, as the decoder calls it). One wrong rounding, a statistic summed in another order or a
// GELU of the residual sum changes bits. 100 x 52 (bf16: not a multiple of 8) must decline, doing nothing.
TEST_CASE("fused one-row GEMV: norm prologue and residual epilogue give the unfused ops' bits") {
  const Shape shapes[] = {{768, 200}, {3072, 40}, {4096, 24}, {768, 16390}, {64, 30}};
  for (Backend* g : {be().gpu.get(), &g16()}) {
    const cuda::OpContext& ctx = cuda_op_context(*g);
    for (const Shape s : shapes) {
      for (const int norm : {0, 1, 2}) {  // none, LayerNorm, RMSNorm
        for (const bool gelu : {false, true}) {
          CAPTURE(g->activation_bytes());
          CAPTURE(s.IC);
          CAPTURE(s.OC);
          CAPTURE(norm);
          CAPTURE(gelu);
          Act raw(*g, rnd(s.IC, 341, -3.0, 5.0)), w(*g, rnd(size_t(s.OC) * s.IC, 342)), ln(*g, filled(s.IC, 7.0f));
          Act res(*g, rnd(s.OC, 343)), ref_out(*g, filled(s.OC, 7.0f)), ref_pre(*g, filled(s.OC, 7.0f));
          Act out(*g, filled(s.OC, 7.0f)), pre(*g, filled(s.OC, 7.0f)), ref_res(*g, rnd(s.OC, 343));
          Twin<float> bias(rnd(s.OC, 344), g), nw(rnd(s.IC, 345, 0.5, 1.5), g), nb(rnd(s.IC, 346), g),
              stats(filled(2), g);
          cuda::GemvFusion f;
          f.prefetch_weights = gelu;  // both launch orders: w read before or after the previous kernel ends
          const void* x = raw.gp();
          if (norm == 1) {
            cuda::layernorm_forward(ctx, ln.gp(), stats.g.get(), stats.g.get() + 1, raw.gp(), nw.g.get(), nb.g.get(), 1,
                                    s.IC);
            f.norm_w = nw.g.get(), f.norm_b = nb.g.get();
            x = ln.gp();
          } else if (norm == 2) {
            cuda::rmsnorm_forward(ctx, ln.gp(), stats.g.get(), raw.gp(), nw.g.get(), 1, s.IC, 1e-6f);
            f.norm_w = nw.g.get(), f.rms_eps = 1e-6f;
            x = ln.gp();
          }
          cuda::gemv_forward(ctx, ref_out.gp(), gelu ? ref_pre.gp() : nullptr, x, w.gp(), s.IC, bias.g.get(), 1, s.IC,
                             s.OC);
          if (!gelu) {  // the residual epilogue: res += the product, in place
            cuda::residual_forward(ctx, ref_res.gp(), ref_res.gp(), ref_out.gp(), size_t(s.OC));
            f.residual = res.gp();
          }
          void* dst = gelu ? out.gp() : res.gp();
          REQUIRE(cuda::gemv_fused_forward(ctx, dst, gelu ? pre.gp() : nullptr, raw.gp(), w.gp(), s.IC, bias.g.get(),
                                           s.IC, s.OC, f));
          if (gelu) {
            CHECK(out.gpu_bytes() == ref_out.gpu_bytes());
            CHECK(pre.gpu_bytes() == ref_pre.gpu_bytes());
          } else {
            CHECK(res.gpu_bytes() == ref_res.gpu_bytes());
          }
        }
      }
    }
  }
  Act raw(g16(), rnd(100, 351)), w(g16(), rnd(52 * 100, 352)), out(g16(), filled(52, 7.0f));
  const std::vector<unsigned char> before = out.gpu_bytes();
  CHECK_FALSE(cuda::gemv_fused_forward(cuda_op_context(g16()), out.gp(), nullptr, raw.gp(), w.gp(), 100, nullptr, 100,
                                       52, cuda::GemvFusion{}));
  CHECK(out.gpu_bytes() == before);
}
