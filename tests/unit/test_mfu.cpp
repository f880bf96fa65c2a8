// MFU: the FLOPs-per-token formula on GPT-2 124M (parameter count as llm.c reports it), the peak table
// lookup for known and unknown GPUs, and the ratio.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <set>
#include <string>

#include <xtrain/core/error.h>
#include "train/mfu.h"
#include "fixtures.h"

using namespace xtrain;

using test::gpt2_124m;

TEST_CASE("flops_per_token: 6N + 12*L*A*T on GPT-2 124M") {
  const GPTConfig c = gpt2_124m();
  // N = 124,439,808: GPT-2 124M's parameter count as OpenAI's and Hugging Face's models report it
  // (V = 50257 rows of wte), not the 124,475,904 of the layout padded to Vp = 50304.
  const double N = 124439808.0;
  CHECK(flops_per_token(c, 1024) == doctest::Approx(6 * N + 12.0 * 12 * 768 * 1024).epsilon(1e-12));
  CHECK(flops_per_token(c, 1024) == doctest::Approx(859885056.0).epsilon(1e-12));
  // T enters only the attention term: 12*L*A per token and position.
  CHECK(flops_per_token(c, 1024) - flops_per_token(c, 512) == doctest::Approx(12.0 * 12 * 768 * 512));
  CHECK_THROWS_AS(flops_per_token(c, 0), Error);
}

TEST_CASE("flops_per_token: the attention width is NH*HS, not C") {
  const GPTConfig c = test::model_config(100, 16, 64, 3, 4, 2, 8, 96);  // A = NH*HS = 32 != C
  GPTConfig wide = c;
  wide.HS = 16;  // A = 64: only the parameter count and the attention term change
  const auto N = [](const GPTConfig& g) {  // V = 100 is not a multiple of 64: Vp = 128 rows in the layout
    const auto layout = param_layout(g);
    return static_cast<double>(layout.back().offset + layout.back().count) - (g.Vp() - g.V) * g.C;
  };
  CHECK(flops_per_token(c, 16) == doctest::Approx(6 * N(c) + 12.0 * 3 * 32 * 16));
  CHECK(flops_per_token(wide, 16) == doctest::Approx(6 * N(wide) + 12.0 * 3 * 64 * 16));
}

TEST_CASE("find_gpu_peak: known devices by name, compute capability and SM count") {
  const auto h200 = find_gpu_peak({"NVIDIA H200", 9, 0, 132});
  REQUIRE(h200);
  CHECK(h200->bf16_tflops == doctest::Approx(989.5));  // 1,979 with sparsity in the datasheet
  CHECK(h200->fp32_tflops == doctest::Approx(67.0));
  const auto h100 = find_gpu_peak({"NVIDIA H100 80GB HBM3", 9, 0, 132});
  REQUIRE(h100);
  CHECK(h100->bf16_tflops == doctest::Approx(989.5));
  const auto pcie = find_gpu_peak({"NVIDIA H100 PCIe", 9, 0, 114});
  REQUIRE(pcie);
  CHECK(pcie->bf16_tflops == doctest::Approx(756.5));
  const auto a100 = find_gpu_peak({"NVIDIA A100-SXM4-80GB", 8, 0, 108});
  REQUIRE(a100);
  CHECK(a100->bf16_tflops == doctest::Approx(312.0));
  // GeForce: the fp32-accumulate figure, half the fp16-accumulate one.
  const auto rtx4090 = find_gpu_peak({"NVIDIA GeForce RTX 4090", 8, 9, 128});
  REQUIRE(rtx4090);
  CHECK(rtx4090->bf16_tflops == doctest::Approx(165.2));
  REQUIRE(find_gpu_peak({"NVIDIA GeForce RTX 5090", 12, 0, 170}));
  REQUIRE(find_gpu_peak({"NVIDIA L40S", 8, 9, 142}));

  REQUIRE(peak_flops({"NVIDIA H200", 9, 0, 132}, "bf16"));
  CHECK(*peak_flops({"NVIDIA H200", 9, 0, 132}, "bf16") == doctest::Approx(989.5e12));
  CHECK(*peak_flops({"NVIDIA H200", 9, 0, 132}, "fp32") == doctest::Approx(67.0e12));
  CHECK_THROWS_AS(peak_flops({"NVIDIA H200", 9, 0, 132}, "fp16"), Error);
}

TEST_CASE("find_gpu_peak: unknown or altered devices have no peak") {
  CHECK_FALSE(find_gpu_peak({"NVIDIA H300", 9, 0, 132}));
  CHECK_FALSE(find_gpu_peak({"", 0, 0, 0}));
  CHECK_FALSE(find_gpu_peak({"NVIDIA H200 (0000:1b:00.0)", 9, 0, 132}));  // Backend::device_name(), not the CUDA name
  CHECK_FALSE(find_gpu_peak({"nvidia h200", 9, 0, 132}));                 // exact names only
  CHECK_FALSE(find_gpu_peak({"NVIDIA H200", 9, 0, 16}));                  // a MIG slice: fewer SMs
  CHECK_FALSE(find_gpu_peak({"NVIDIA H200", 8, 0, 132}));                 // wrong compute capability
  CHECK_FALSE(peak_flops({"NVIDIA H300", 9, 0, 132}, "bf16"));
}

TEST_CASE("gpu_peak_table: one row per name, every figure dense and cited") {
  std::set<std::string> names;
  for (const GpuPeak& p : gpu_peak_table()) {
    INFO(p.name);
    CHECK(names.insert(p.name).second);
    CHECK(p.fp32_tflops > 0);
    CHECK(p.bf16_tflops > p.fp32_tflops);  // tensor cores beat the CUDA cores on every listed part
    // Dense bf16 is at most ~16x FP32 on the listed parts (A100 16.0, H100 SXM 14.8); a figure with
    // 2:4 sparsity doubles that and fails here.
    CHECK(p.bf16_tflops < 20 * p.fp32_tflops);
    CHECK(std::string(p.source).find("NVIDIA") == 0);
    CHECK(p.sm_count > 0);
  }
}

TEST_CASE("mfu: achieved over peak FLOP/s, over all devices") {
  const double fpt = flops_per_token(gpt2_124m(), 1024);
  // bench/results/training_h200_2026-11.md: GPT-2 124M bf16 on one H200 at 395.9K tok/s is 34.4% MFU.
  CHECK(mfu(395.9e3, fpt, 989.5e12, 1) == doctest::Approx(0.3441).epsilon(1e-3));
  // Two devices at twice the tokens: the same utilization.
  CHECK(mfu(2 * 395.9e3, fpt, 989.5e12, 2) == doctest::Approx(mfu(395.9e3, fpt, 989.5e12, 1)));
  CHECK(mfu(0, fpt, 989.5e12, 1) == 0);
  CHECK_THROWS_AS(mfu(1, fpt, 0, 1), Error);
  CHECK_THROWS_AS(mfu(1, 0, 1e12, 1), Error);
  CHECK_THROWS_AS(mfu(1, fpt, 1e12, 0), Error);
  CHECK_THROWS_AS(mfu(-1, fpt, 1e12, 1), Error);
}
