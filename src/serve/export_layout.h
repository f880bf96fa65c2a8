// The tensors of a model-directory layout (private to export.cpp and model_dir.cpp): for every tensor
// of param_layout(cfg), its name and shape in the layout and whether it is stored transposed, derived
// from the parameter table (src/model/model_params.h: name, hf_name, hf_transpose, file_dim).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve/export.h"

namespace xtrain {

struct LayoutTensor {
  std::string name;            // e.g. "transformer.h.0.attn.c_attn.weight" (hf) or "h0.attn.qkv.w"
  std::vector<int64_t> shape;  // shape in the file
  size_t index = 0;            // index into param_layout(cfg)
  bool transpose = false;      // file holds the (in, out) transpose of xtrain's (out, in) matrix
};

// layout_tensors: one entry per param_layout(cfg) tensor, same order. wte has V rows (not Vp).
std::vector<LayoutTensor> layout_tensors(const GPTConfig& cfg, ModelLayout layout);

constexpr const char* kXtrainModelType = "xtrain-gpt";

}  // namespace xtrain
