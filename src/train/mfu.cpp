// MFU: FLOPs per token (PaLM convention) and the dense peaks of known NVIDIA GPUs. See mfu.h.
#include "train/mfu.h"

#include <xtrain/core/error.h>

namespace xtrain {

double flops_per_token(const GPTConfig& cfg, int T) {
  XT_CHECK(T >= 1, "sequence length " << T << " must be positive");
  const std::vector<ParamTensor> layout = param_layout(cfg);
  // N counts the V vocabulary rows of wte: the padding rows [V, Vp) are an implementation choice
  // (GEMM alignment), work the model does not need, so MFU does not credit them.
  const double N = static_cast<double>(layout.back().offset + layout.back().count) -
                   static_cast<double>(cfg.Vp() - cfg.V) * cfg.C * (cfg.tied() ? 1 : 2);  // wte, lm_head
  const double A = static_cast<double>(cfg.NH) * cfg.HS;
  // 6N: 2 FLOPs per parameter per token forward (one multiply-add), 4 backward (input and weight
  // gradients). 12*L*A*T: per layer, Q K^T and P V cost 2*A*T each forward, twice that backward.
  return 6.0 * N + 12.0 * cfg.L * A * T;
}

// Datasheets give tensor-core figures "with sparsity" and say dense is half: those rows hold half the
// printed figure. The whitepapers' appendix tables list dense and sparse; rows hold the dense one
// "with FP32 Accumulate" (xtrain's bf16 GEMMs accumulate in fp32). A row is added only with figures
// and SM count checked against its vendor document: a part not listed prints no MFU.
const std::vector<GpuPeak>& gpu_peak_table() {
  static const char* const kH100 = "NVIDIA H100 Tensor Core GPU datasheet (BF16 with sparsity / 2; FP32)";
  static const char* const kH200 = "NVIDIA H200 Tensor Core GPU datasheet (BF16 with sparsity / 2; FP32)";
  static const char* const kA100 = "NVIDIA A100 Tensor Core GPU datasheet (BF16 dense; FP32)";
  static const std::vector<GpuPeak> table = {
      {"NVIDIA H100 80GB HBM3", 9, 0, 132, 989.5, 67.0, kH100},  // H100 SXM5
      {"NVIDIA H100 PCIe", 9, 0, 114, 756.5, 51.0, kH100},
      {"NVIDIA H200", 9, 0, 132, 989.5, 67.0, kH200},  // H200 SXM
      {"NVIDIA A100-SXM4-40GB", 8, 0, 108, 312.0, 19.5, kA100},
      {"NVIDIA A100-SXM4-80GB", 8, 0, 108, 312.0, 19.5, kA100},
      {"NVIDIA A100-PCIE-40GB", 8, 0, 108, 312.0, 19.5, kA100},
      {"NVIDIA A100 80GB PCIe", 8, 0, 108, 312.0, 19.5, kA100},
      {"NVIDIA L40S", 8, 9, 142, 362.05, 91.6, "NVIDIA L40S datasheet (BF16 dense; FP32)"},
      {"NVIDIA L40", 8, 9, 142, 181.05, 90.5, "NVIDIA L40 datasheet (BF16 dense; FP32)"},
      {"NVIDIA GeForce RTX 4090", 8, 9, 128, 165.2, 82.6,
       "NVIDIA Ada GPU Architecture whitepaper, appendix A (BF16 with FP32 accumulate, dense; FP32)"},
      {"NVIDIA GeForce RTX 5090", 12, 0, 170, 209.5, 104.8,
       "NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix A (BF16 with FP32 accumulate, dense; FP32)"},
  };
  return table;
}

std::optional<GpuPeak> find_gpu_peak(const GpuId& gpu) {
  for (const GpuPeak& p : gpu_peak_table())
    if (gpu.name == p.name && gpu.cc_major == p.cc_major && gpu.cc_minor == p.cc_minor && gpu.sm_count == p.sm_count)
      return p;
  return std::nullopt;
}

std::optional<double> peak_flops(const GpuId& gpu, const std::string& dtype) {
  XT_CHECK(dtype == "bf16" || dtype == "fp32", "dtype '" << dtype << "' has no peak figure (bf16 or fp32)");
  const std::optional<GpuPeak> p = find_gpu_peak(gpu);
  if (!p) return std::nullopt;
  return (dtype == "bf16" ? p->bf16_tflops : p->fp32_tflops) * 1e12;
}

double mfu(double tok_per_s, double flops_per_token, double peak_flops, int devices) {
  XT_CHECK(tok_per_s >= 0 && flops_per_token > 0 && peak_flops > 0 && devices >= 1,
           "tok/s " << tok_per_s << ", FLOPs/token " << flops_per_token << ", peak " << peak_flops << " FLOP/s, "
                    << devices << " devices");
  return tok_per_s * flops_per_token / (peak_flops * devices);
}

}  // namespace xtrain
