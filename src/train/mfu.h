// Model FLOPs utilization (MFU): the FLOPs a training step needs by the PaLM convention, the dense
// peak of the GPU it runs on (a small table of NVIDIA datasheet figures), and their ratio.
// The one home of the FLOPs-per-token formula and of the peak figures; an unknown GPU has no peak,
// so callers print no MFU rather than a wrong one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>  // GpuId
#include <xtrain/model/model.h>

namespace xtrain {

// flops_per_token: training FLOPs (forward + backward) per token at sequence length T, by the PaLM
// convention (Chowdhery et al. 2022, appendix B): 6*N + 12*L*A*T, with N = every parameter of the
// model, embeddings included, with V vocabulary rows of wte (the padding rows [V, Vp) are not model
// work and not counted: GPT-2 124M has N = 124,439,808), L layers, A = NH*HS the attention width
// (= C for the usual head sizes) and the attention score and value products counted in full (the
// causal half is not taken off). FLOPs, not FLOP/s. The one home of this convention (docs cite it).
// Throws Error for T < 1.
double flops_per_token(const GPTConfig& cfg, int T);

// GpuPeak: one row of the table. Figures are dense (no 2:4 sparsity), at the boost clock, in
// TFLOP/s (1e12 FLOP/s), as the vendor's datasheet or architecture whitepaper gives them.
struct GpuPeak {
  const char* name;  // cudaDeviceProp::name, matched exactly
  int cc_major, cc_minor, sm_count;
  // bf16 x bf16 tensor-core products with fp32 accumulation (what --dtype bf16 runs). On GeForce
  // cards this is half the fp16-accumulate figure; the whitepapers list both.
  double bf16_tflops;
  // plain FP32 on the CUDA cores, FMA = 2 FLOPs, not TF32: --dtype fp32 runs cuBLAS with
  // CUBLAS_DEFAULT_MATH and CUBLAS_COMPUTE_32F, which never use TF32 tensor cores.
  double fp32_tflops;
  const char* source;  // the vendor document the figures come from
};

// gpu_peak_table: every known GPU (for docs and tests).
const std::vector<GpuPeak>& gpu_peak_table();

// find_gpu_peak: the row whose name, compute capability and SM count all equal the device's;
// nullopt for anything else (an unknown name, a MIG slice, a renamed part), never a guess.
std::optional<GpuPeak> find_gpu_peak(const GpuId& gpu);

// peak_flops: the device's dense peak in FLOP/s for a training dtype ("bf16" or "fp32", as
// Backend::dtype()); nullopt for an unknown GPU. Throws Error for any other dtype.
std::optional<double> peak_flops(const GpuId& gpu, const std::string& dtype);

// mfu: achieved / peak FLOP/s as a fraction (0.344 = 34.4%). tok_per_s: tokens per second over
// `devices` devices (global tok/s with devices = world size); flops_per_token as above; peak_flops
// per device (FLOP/s). Throws Error unless tok_per_s >= 0, flops_per_token > 0, peak_flops > 0 and
// devices >= 1.
double mfu(double tok_per_s, double flops_per_token, double peak_flops, int devices);

}  // namespace xtrain
