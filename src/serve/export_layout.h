// The tensors of a model-directory layout (private to export.cpp and model_dir.cpp): for every tensor
// of param_layout(cfg), its name(s) and shape in the layout, whether it is stored transposed and which of
// its rows a file tensor holds, derived from the parameter table (src/model/model_params.h: name,
// hf_name, hf_transpose for GPT-2; hf_llama, hf_llama_parts for Llama; file_dim). Export and import both
// go through layout_tensors, so the names and the fused-row splits have this one home.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/serve/export.h>

namespace xtrain {

struct LayoutTensor {
  std::string name;            // e.g. "transformer.h.0.attn.c_attn.weight", "model.layers.0.self_attn.k_proj.weight", "h0.attn.qkv.w"
  std::vector<int64_t> shape;  // shape in the file
  size_t index = 0;            // index into param_layout(cfg)
  bool transpose = false;      // file holds the (in, out) transpose of xtrain's (out, in) matrix
  size_t row0 = 0;             // first row of xtrain's tensor the file tensor holds (Llama's q/k/v, gate/up parts)
  // elements into xtrain's flat buffer where the file tensor's data starts (row0 rows into tensor `index`)
  size_t offset(const std::vector<ParamTensor>& pl) const {
    return pl[index].offset + row0 * (pl[index].shape.size() > 1 ? size_t(pl[index].shape[1]) : 1);
  }
};

// layout_tensors: one entry per param_layout(cfg) tensor in the same order, a fused Llama tensor giving
// one entry per HfPart (in row order) in the hf layout. wte and lm_head have V rows (not Vp).
std::vector<LayoutTensor> layout_tensors(const GPTConfig& cfg, ModelLayout layout);

constexpr const char* kXtrainModelType = "xtrain-gpt";

}  // namespace xtrain
