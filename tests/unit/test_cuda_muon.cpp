// Muon's CUDA ops against the CPU oracle: the bf16 tensor-core Newton-Schulz batched over matrices of one
// shape (wide, tall and square, GPT-2 124M's shapes among them), the momentum with Nesterov and the update.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <xtrain/core/error.h>
#include "cuda_ops_test_util.h"

using namespace xtrain;
using namespace xtrain::test::gpu;

namespace {
// bf16 Newton-Schulz (as PyTorch runs it) vs the fp32 CPU oracle: the input and every product of the 5 steps
// are rounded to bf16 (2^-8 relative each, ~15 roundings, each step's polynomial with slope up to a = 3.4 on
// the small singular values), so a few 1e-2 norm-wise (max|diff| / max|ref|); a transposed operand, a
// missing coefficient or a wrong stride gives O(1).
constexpr double kBf16NsRel = 5e-2;
// 0 steps: X / ||X||_F through bf16 as PyTorch runs it, vs the fp32 oracle. bf16 keeps 8 significant bits, so
// one rounding is within u = 2^-8 relative; the input's rounding moves the sum of squares by up to 2u and its
// square root by u, the norm's own rounding adds u, and the input and the quotient one each: 4u = 1.6e-2 at
// worst (seen on one H100: 9.1e-3). A misplaced (transposed, shifted) element or a norm summed over the wrong
// elements gives O(1).
constexpr double kBf16NormRel = 4.0 / 256.0;
}  // namespace

TEST_CASE("newton_schulz: bf16 tensor cores batched over the matrices vs the fp32 CPU oracle") {
  struct Shape {
    int batch, rows, cols;
  };
  for (const Shape& s : {Shape{3, 768, 768}, Shape{2, 3072, 768}, Shape{2, 768, 3072}, Shape{4, 24, 8}, Shape{1, 8, 24},
                         Shape{0, 16, 16}}) {
    CAPTURE(s.batch);
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const size_t n = size_t(s.batch) * s.rows * s.cols;
    Twin<float> x(rnd(n, 401 + s.rows, -0.02, 0.02));  // gradient-sized values: the norm, not the scale, matters
    be().cpu->newton_schulz(x.c.get(), s.batch, s.rows, s.cols, 5, kMuonEps);
    be().gpu->newton_schulz(x.g.get(), s.batch, s.rows, s.cols, 5, kMuonEps);
    if (n > 0) expect_close("newton_schulz", x, kBf16NsRel);
  }
  // a shape-mismatched argument is refused as on the CPU
  DeviceBuffer<float> y(*be().gpu, 4);
  CHECK_THROWS_AS(be().gpu->newton_schulz(y.get(), 1, 0, 4, 5, kMuonEps), Error);
}

TEST_CASE("newton_schulz with 0 steps: X / ||X||_F, any alignment, the same bits alone as in a batch") {
  struct Shape {
    int batch, rows, cols;
  };
  // norms over several blocks per matrix (n > 16384), tall ones through the transposing tiles with partial
  // tiles at the edges, odd sizes (no float4 path) and tiny ones
  for (const Shape& s : {Shape{3, 200, 300}, Shape{3, 300, 200}, Shape{2, 129, 301}, Shape{2, 301, 129},
                         Shape{3, 7, 5}, Shape{2, 5, 7}}) {
    CAPTURE(s.batch);
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const size_t per = size_t(s.rows) * s.cols, n = s.batch * per;
    const std::vector<float> v = rnd(n + 1, 601 + s.rows, -0.02, 0.02);
    for (int off : {0, 1}) {  // off 1: the matrices start 4 bytes past a 16-byte boundary (element paths)
      CAPTURE(off);
      Twin<float> x(v);
      be().cpu->newton_schulz(x.c.get() + off, s.batch, s.rows, s.cols, 0, kMuonEps);
      be().gpu->newton_schulz(x.g.get() + off, s.batch, s.rows, s.cols, 0, kMuonEps);
      expect_close("newton_schulz, 0 steps", x, kBf16NormRel);
      if (off != 0) continue;
      // a matrix's result does not depend on the batch it is in (ranks share a group's matrices out)
      const std::vector<float> batched = down(*be().gpu, x.g);
      for (int b = 0; b < s.batch; ++b) {
        CAPTURE(b);
        DeviceBuffer<float> one(*be().gpu, per);
        be().gpu->copy_to_device(one.get(), v.data() + b * per, one.bytes());
        be().gpu->newton_schulz(one.get(), 1, s.rows, s.cols, 0, kMuonEps);
        const std::vector<float> alone = down(*be().gpu, one);
        CHECK(std::equal(alone.begin(), alone.end(), batched.begin() + b * per));
      }
    }
  }
}

TEST_CASE("muon_momentum and muon_apply: the CPU oracle's fp32 arithmetic, every span in one launch") {
  const size_t n = 100003;
  // three matrices in a different order in each buffer, with gaps; several chunks (> 16Ki elements) and a
  // short one; each with its own lr ratio
  const std::vector<MuonSpan> spans = {
      {0, 60003, 0, 40000, 1.0}, {50000, 0, 40000, 50003, 2.0}, {40001, 50003, 90003, 7, 0.2 * std::sqrt(3072.0)}};
  Twin<float> buf(filled(n)), out(filled(n)), p(rnd(n, 501));
  for (int t = 1; t <= 3; ++t) {
    Twin<float> grad(rnd(n, 510 + t, -0.1, 0.1));
    for (Backend* b : {be().cpu.get(), be().gpu.get()}) {
      const bool gpu = b == be().gpu.get();
      b->muon_momentum(gpu ? buf.g.get() : buf.c.get(), gpu ? out.g.get() : out.c.get(),
                       gpu ? grad.g.get() : grad.c.get(), spans, 0.95f, true, 0.7f);
      b->muon_apply(gpu ? p.g.get() : p.c.get(), gpu ? out.g.get() : out.c.get(), spans, 0.998f, 0.02f * t);
    }
  }
  expect_close("muon momentum", buf, kFp32Rel);
  expect_close("muon update", out, kFp32Rel);
  expect_close("muon param", p, kFp32Rel);
  // overlapping spans are refused as on the CPU
  CHECK_THROWS_AS(be().gpu->muon_apply(p.g.get(), out.g.get(), {{0, 0, 0, 4}, {2, 4, 4, 4}}, 0.9f, 0.1f), Error);
}
