// Rotary position embeddings (Su et al. 2021, "RoFormer", arXiv:2104.09864) in Hugging Face's rotate-half
// convention (transformers' LlamaRotaryEmbedding and rotate_half): the one home of the angle formula, for
// the CPU oracle and the CUDA kernels alike. Head channels i and i + HS/2 (i < HS/2) form a pair rotated by
//   a(p, i) = p * inv_freq(i),   inv_freq(i) = 1 / theta^(2i / HS),
// p the absolute position. Both factors are fp32 values computed as transformers computes them in fp32
// (inv_freq from a float power, one float product), so exported weights need no permutation and the
// angles agree with transformers' to the last bit of the product.
#pragma once

#include <cmath>

#include <xtrain/backend/qkv_layout.h>  // XT_HOST_DEVICE

namespace xtrain {

// rotary_inv_freq: inv_freq(i) for pair i in [0, HS/2) of a head of HS channels (HS even), base theta.
XT_HOST_DEVICE inline float rotary_inv_freq(int i, int HS, float theta) {
  return 1.0f / powf(theta, float(2 * i) / float(HS));
}

// rotary_angle_from: a(p, i) in radians, fp32, from inv_freq(i) computed once (the CUDA kernel takes a table
// of them from the host, whose powf the CPU oracle's angles use too).
XT_HOST_DEVICE inline float rotary_angle_from(int p, float inv_freq) { return float(p) * inv_freq; }

// rotary_angle: a(p, i) in radians, fp32.
XT_HOST_DEVICE inline float rotary_angle(int p, int i, int HS, float theta) {
  return rotary_angle_from(p, rotary_inv_freq(i, HS, theta));
}

}  // namespace xtrain
