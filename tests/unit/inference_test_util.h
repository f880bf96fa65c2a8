// Helpers shared by the inference tests (CPU and CUDA): small GQA configs with a padded vocabulary in
// both model families, random parameters that make every tensor matter, and the norm-wise logits
// difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/model.h"

namespace xtrain::test {

// small_config: V 90 (Vp 128: the head's padding columns are exercised), GQA 4 query / 2 kv heads; gpt2
// by default. llama: its own head (lm_head) unless tied, and a rotary base other than the default, so
// a decoder that read the default would differ.
inline GPTConfig small_config(Arch arch = Arch::gpt2, bool tied = false) {
  GPTConfig c;
  c.V = 90, c.maxT = 80, c.C = 32, c.L = 2, c.NH = 4, c.KVH = 2, c.HS = 8, c.F = 48;
  if (arch == Arch::llama) c.arch = arch, c.tie_embeddings = tied ? 1 : 0, c.rope_theta = 500.0f;
  return c;
}

// The configs every inference test runs on: each family (docs/design.md, "Model"), llama with its own
// head and tied.
struct NamedConfig {
  std::string name;
  GPTConfig cfg;
};
inline std::vector<NamedConfig> inference_configs() {
  return {{"gpt2", small_config()},
          {"llama", small_config(Arch::llama)},
          {"llama tied", small_config(Arch::llama, /*tied=*/true)}};
}

// random_params: every parameter N(0, sd) (biases and norm gains included; the padding rows [V, Vp) of
// wte and lm_head kept zero), so attention is far from uniform and every tensor matters.
inline void random_params(GPT& m, uint64_t seed, double sd) {
  std::vector<float> p(m.num_params());
  const GPTConfig& c = m.config();
  for (size_t i = 0; i < p.size(); ++i) p[i] = float(sd * normal(seed, i));
  for (size_t head : {size_t(kWte), final_param_index(c.L, kLmHead)}) {
    const ParamTensor& t = m.layout()[head];  // (Vp,C), or no elements (lm_head when tied)
    for (size_t i = t.offset + size_t(c.V) * c.C; i < t.offset + t.count; ++i) p[i] = 0.0f;
  }
  m.backend().copy_to_device(m.params(), p.data(), p.size() * sizeof(float));
}

// rel_diff: max |a - b| / max |b| over n values.
inline double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - b[i])), m = std::max(m, std::fabs(double(b[i])));
  return d / m;
}

}  // namespace xtrain::test
