// Helpers shared by the inference tests (CPU and CUDA): a small GQA config with a padded vocabulary,
// random parameters that make every tensor matter, and the norm-wise logits difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/model.h"

namespace xtrain::test {

// small_config: V 90 (Vp 128: the head's padding columns are exercised), GQA 4 query / 2 kv heads.
inline GPTConfig small_config() {
  GPTConfig c;
  c.V = 90, c.maxT = 80, c.C = 32, c.L = 2, c.NH = 4, c.KVH = 2, c.HS = 8, c.F = 48;
  return c;
}

// random_params: every parameter N(0, sd) (biases and LayerNorm gains included; wte padding rows kept
// zero), so attention is far from uniform and every tensor matters.
inline void random_params(GPT& m, uint64_t seed, double sd) {
  std::vector<float> p(m.num_params());
  const GPTConfig& c = m.config();
  for (size_t i = 0; i < p.size(); ++i) p[i] = float(sd * normal(seed, i));
  for (size_t i = size_t(c.V) * c.C; i < size_t(c.Vp()) * c.C; ++i) p[i] = 0.0f;
  m.backend().copy_to_device(m.params(), p.data(), p.size() * sizeof(float));
}

// rel_diff: max |a - b| / max |b| over n values.
inline double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - b[i])), m = std::max(m, std::fabs(double(b[i])));
  return d / m;
}

}  // namespace xtrain::test
