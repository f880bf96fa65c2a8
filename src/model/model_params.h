// The parameter table: every GPT parameter tensor once, with its shape in model dimensions, its
// initialisation, whether AdamW weight decay applies and its Hugging Face GPT-2 name (llm.c's
// ParameterTensors; transformers' modeling_gpt2.py GPT2Model). param_layout (offsets), init_params,
// the decay mask, the block's and the decoder's weight lookups and the export/import name map
// (src/serve/export.cpp) all derive from it.
#pragma once

#include <cstddef>

namespace xtrain {

struct GPTConfig;

// Buffer order: the embedding tensors, then kPerLayer tensors for each of the L blocks, then the final
// LayerNorm. The tables below give one row for each, in this order.
enum EmbedParam { kWte, kWpe, kNumEmbedParams };
enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kPerLayer };
enum FinalParam { kLnfW, kLnfB, kNumFinalParams };
constexpr int kLayerBase = kNumEmbedParams;  // index of layer 0's first tensor

// Tensor indices into param_layout(cfg).
constexpr size_t layer_param_index(int l, int which) { return kLayerBase + size_t(l) * kPerLayer + size_t(which); }
constexpr size_t final_param_index(int L, int which) { return layer_param_index(L, 0) + size_t(which); }
constexpr size_t num_param_tensors(int L) { return final_param_index(L, kNumFinalParams); }

// The sizes the table is written in. Vp: the vocabulary padded to a multiple of 64 (GPTConfig::Vp);
// rows [V, Vp) of a Vp-row tensor start at zero and never leave the process (an export writes V rows).
// QKV = (NH + 2*KVH)*HS (QkvLayout::row_width), A = NH*HS. `one`: the tensor is a vector.
enum class ParamDim { one, C, Vp, maxT, QKV, A, F, count };
// param_dim: the size of d for cfg; file_dim: the same in a model directory (Vp written as V).
int param_dim(const GPTConfig& cfg, ParamDim d);
int file_dim(const GPTConfig& cfg, ParamDim d);

// Initialisation (GPT-2, Radford et al. 2019; residual scaling sec. 2.3): LayerNorm gains 1, biases 0,
// weights N(0, 0.02), the projections into the residual stream N(0, 0.02/sqrt(2L)).
enum class ParamInit { ones, zeros, normal, normal_residual };

// One table row: tensor `id` of shape (rows, cols), or (rows) when cols is `one`.
struct ParamSpec {
  int id;
  const char* name;     // xtrain's name; a block's follows "h<l>." ("h3.attn.qkv.w")
  ParamDim rows, cols;
  ParamInit init;
  bool decay;           // AdamW weight decay applies (the matrices)
  const char* hf_name;  // GPT-2's name after "transformer." (a block's after "transformer.h.<l>.")
  bool hf_transpose;    // GPT-2 stores it transposed: Conv1D keeps (in, out), xtrain (out, in)
  constexpr bool matrix() const { return cols != ParamDim::one; }
};

constexpr ParamSpec kEmbedParamTable[] = {
    {kWte, "wte", ParamDim::Vp, ParamDim::C, ParamInit::normal, true, "wte.weight", false},      // (Vp,C) also the head
    {kWpe, "wpe", ParamDim::maxT, ParamDim::C, ParamInit::normal, true, "wpe.weight", false},    // (maxT,C)
};
constexpr ParamSpec kLayerParamTable[] = {  // per block l
    {kLn1W, "ln1.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_1.weight", false},          // (C)
    {kLn1B, "ln1.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_1.bias", false},           // (C)
    {kQkvW, "attn.qkv.w", ParamDim::QKV, ParamDim::C, ParamInit::normal, true, "attn.c_attn.weight", true},  // (QKV,C)
    {kQkvB, "attn.qkv.b", ParamDim::QKV, ParamDim::one, ParamInit::zeros, false, "attn.c_attn.bias", false},  // (QKV)
    {kAttProjW, "attn.proj.w", ParamDim::C, ParamDim::A, ParamInit::normal_residual, true, "attn.c_proj.weight", true},  // (C,A)
    {kAttProjB, "attn.proj.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "attn.c_proj.bias", false},         // (C)
    {kLn2W, "ln2.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_2.weight", false},          // (C)
    {kLn2B, "ln2.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_2.bias", false},           // (C)
    {kFcW, "mlp.fc.w", ParamDim::F, ParamDim::C, ParamInit::normal, true, "mlp.c_fc.weight", true},      // (F,C)
    {kFcB, "mlp.fc.b", ParamDim::F, ParamDim::one, ParamInit::zeros, false, "mlp.c_fc.bias", false},     // (F)
    {kFcProjW, "mlp.proj.w", ParamDim::C, ParamDim::F, ParamInit::normal_residual, true, "mlp.c_proj.weight", true},  // (C,F)
    {kFcProjB, "mlp.proj.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "mlp.c_proj.bias", false},         // (C)
};
constexpr ParamSpec kFinalParamTable[] = {
    {kLnfW, "lnf.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_f.weight", false},   // (C)
    {kLnfB, "lnf.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_f.bias", false},    // (C)
};

// BlockWeights: one block's tensors in the backend's memory, indexed by LayerParam (GPT::block_weights).
struct BlockWeights {
  const float* w[kPerLayer] = {};
  const float* operator[](int which) const { return w[which]; }
};

namespace detail {
constexpr bool same_str(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
// Every row in enum order; the rules that hold for every tensor: weight decay and the normal
// initialisations exactly on matrices (vectors are gains and biases), a transpose only of a matrix.
constexpr bool well_formed(const ParamSpec* t, int n) {
  for (int i = 0; i < n; ++i) {
    const bool normal = t[i].init == ParamInit::normal || t[i].init == ParamInit::normal_residual;
    if (t[i].id != i || t[i].decay != t[i].matrix() || normal != t[i].matrix()) return false;
    if (t[i].hf_transpose && !t[i].matrix()) return false;
    for (int j = 0; j < i; ++j)
      if (same_str(t[i].name, t[j].name) || same_str(t[i].hf_name, t[j].hf_name)) return false;
  }
  return true;
}
}  // namespace detail
static_assert(sizeof(kEmbedParamTable) / sizeof(ParamSpec) == kNumEmbedParams &&
                  detail::well_formed(kEmbedParamTable, kNumEmbedParams),
              "kEmbedParamTable: one row per EmbedParam, in order, decay and init on matrices");
static_assert(sizeof(kLayerParamTable) / sizeof(ParamSpec) == kPerLayer && detail::well_formed(kLayerParamTable, kPerLayer),
              "kLayerParamTable: one row per LayerParam, in order, decay and init on matrices");
static_assert(sizeof(kFinalParamTable) / sizeof(ParamSpec) == kNumFinalParams &&
                  detail::well_formed(kFinalParamTable, kNumFinalParams),
              "kFinalParamTable: one row per FinalParam, in order, decay and init on matrices");
// GPT-2's Conv1D: every matrix of a block is stored (in, out); the embeddings are (rows, C) in both.
static_assert([] {
  for (const ParamSpec& s : kLayerParamTable)
    if (s.hf_transpose != s.matrix()) return false;
  return !kEmbedParamTable[kWte].hf_transpose && !kEmbedParamTable[kWpe].hf_transpose;
}(), "a block's matrices, and only they, are transposed in the hf layout");

}  // namespace xtrain
