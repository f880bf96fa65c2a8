// The parameter table: every parameter tensor of both model families (GPTConfig::arch) once, with its
// shape in model dimensions, where it exists, its initialisation, whether AdamW weight decay applies, which
// optimizer updates it under --optimizer muon, and its Hugging Face names (GPT-2: transformers' modeling_gpt2.py GPT2Model; Llama: modeling_llama.py
// LlamaForCausalLM, fused rows split by HfPart) (llm.c's ParameterTensors). param_layout (offsets), init_params, the decay mask, the
// block's and the decoder's weight lookups and the export/import name map (src/serve/export.cpp) derive from it.
#pragma once

#include <cstddef>

namespace xtrain {

struct GPTConfig;

// Buffer order: the embedding tensors, then kPerLayer tensors for each of the L blocks, then the final
// LayerNorm. The tables below give one row for each, in this order.
enum EmbedParam { kWte, kWpe, kNumEmbedParams };
enum LayerParam { kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kPerLayer };
enum FinalParam { kLnfW, kLnfB, kLmHead, kNumFinalParams };
constexpr int kLayerBase = kNumEmbedParams;  // index of layer 0's first tensor

// Tensor indices into param_layout(cfg).
constexpr size_t layer_param_index(int l, int which) { return kLayerBase + size_t(l) * kPerLayer + size_t(which); }
constexpr size_t final_param_index(int L, int which) { return layer_param_index(L, 0) + size_t(which); }
constexpr size_t num_param_tensors(int L) { return final_param_index(L, kNumFinalParams); }

// The sizes the table is written in. Vp: the vocabulary padded to a multiple of 64 (GPTConfig::Vp);
// rows [V, Vp) of a Vp-row tensor start at zero and never leave the process (an export writes V rows).
// QKV = (NH + 2*KVH)*HS (QkvLayout::row_width), A = NH*HS, KV = KVH*HS. FC: the fc layer's outputs, F
// for gpt2 and 2F for llama ([gate; up] stacked, so one GEMM gives swiglu_forward's (N,2F) input).
// `one`: a vector.
enum class ParamDim { one, C, Vp, maxT, QKV, A, KV, F, FC, count };
// param_dim: the size of d for cfg; file_dim: the same in a model directory (Vp written as V).
int param_dim(const GPTConfig& cfg, ParamDim d);
int file_dim(const GPTConfig& cfg, ParamDim d);

// Initialisation. gpt2 (Radford et al. 2019; residual scaling sec. 2.3): LayerNorm gains 1, biases 0,
// weights N(0, 0.02), the projections into the residual stream N(0, 0.02/sqrt(2L)). llama (transformers'
// LlamaPreTrainedModel._init_weights): every Linear and the embedding N(0, initializer_range = 0.02),
// normal_residual included (no residual scaling), RMSNorm gains 1.
enum class ParamInit { ones, zeros, normal, normal_residual };

// Where a row exists: in both families, in gpt2 only (biases, wpe), or only with an untied head (lm_head,
// llama with --tie-embeddings false). A row absent from a model has zero elements there (rows 0).
enum class ParamIn { all, gpt2, untied };

// Hugging Face Llama (transformers' modeling_llama.py) keeps apart what xtrain fuses: one HfPart is one
// of its nn.Linear weights, holding `rows` consecutive rows of the fused (out, in) tensor, the parts in
// row order. Export splits by this table and import joins by it (src/serve/export.cpp, layout_tensors).
struct HfPart {
  const char* name;  // after "model.layers.<l>."
  ParamDim rows;
};
// qkv rows: [NH q heads | KVH k heads | KVH v heads] (QkvLayout). Rotary is HF's rotate-half in both, so
// the q and k rows need no permutation.
constexpr HfPart kQkvHfParts[] = {
    {"self_attn.q_proj.weight", ParamDim::A}, {"self_attn.k_proj.weight", ParamDim::KV}, {"self_attn.v_proj.weight", ParamDim::KV}};
// fc rows: [gate; up] (swiglu_forward's order: out = silu(gate) * up)
constexpr HfPart kFcHfParts[] = {{"mlp.gate_proj.weight", ParamDim::F}, {"mlp.up_proj.weight", ParamDim::F}};
struct HfParts {
  const HfPart* part = nullptr;
  int count = 0;
};

// One table row: tensor `id` of shape (rows, cols), or (rows) when cols is `one`.
struct ParamSpec {
  int id;
  const char* name;     // xtrain's name; a block's follows "h<l>." ("h3.attn.qkv.w")
  ParamDim rows, cols;
  ParamInit init;
  bool decay;           // AdamW weight decay applies (the matrices)
  const char* hf_name;  // GPT-2's name after "transformer." (a block's after "transformer.h.<l>."); "": none
  bool hf_transpose;    // GPT-2 stores it transposed: Conv1D keeps (in, out), xtrain (out, in)
  ParamIn in = ParamIn::all;
  // Llama's (LlamaForCausalLM) full name, a block's after "model.layers.<l>.", "" where absent or split;
  // no transposes (nn.Linear keeps (out, in) as xtrain). A fused row is split into hf_llama_parts.
  const char* hf_llama = "";
  HfParts hf_llama_parts = {};
  // With --optimizer muon: Muon updates this tensor (the blocks' hidden matrices), AdamW the others
  // (embeddings, the output head, norms, biases), as Muon's authors and torch.optim.Muon's docs advise.
  // A fused matrix is orthogonalized per part (muon_parts, src/train/muon.h): q, k, v and gate, up apart.
  bool muon = false;
  constexpr bool matrix() const { return cols != ParamDim::one; }
};

constexpr ParamSpec kEmbedParamTable[] = {
    {kWte, "wte", ParamDim::Vp, ParamDim::C, ParamInit::normal, true, "wte.weight", false, ParamIn::all,
     "model.embed_tokens.weight"},                                                                              // (Vp,C) also the tied head
    {kWpe, "wpe", ParamDim::maxT, ParamDim::C, ParamInit::normal, true, "wpe.weight", false, ParamIn::gpt2},  // (maxT,C)
};
constexpr ParamSpec kLayerParamTable[] = {  // per block l
    {kLn1W, "ln1.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_1.weight", false, ParamIn::all,
     "input_layernorm.weight"},  // (C)
    {kLn1B, "ln1.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_1.bias", false, ParamIn::gpt2,
     ""},  // (C)
    {kQkvW, "attn.qkv.w", ParamDim::QKV, ParamDim::C, ParamInit::normal, true, "attn.c_attn.weight", true, ParamIn::all,
     "", {kQkvHfParts, 3}, true},  // (QKV,C)
    {kQkvB, "attn.qkv.b", ParamDim::QKV, ParamDim::one, ParamInit::zeros, false, "attn.c_attn.bias", false, ParamIn::gpt2,
     ""},  // (QKV)
    {kAttProjW, "attn.proj.w", ParamDim::C, ParamDim::A, ParamInit::normal_residual, true, "attn.c_proj.weight", true, ParamIn::all,
     "self_attn.o_proj.weight", {}, true},  // (C,A)
    {kAttProjB, "attn.proj.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "attn.c_proj.bias", false, ParamIn::gpt2,
     ""},  // (C)
    {kLn2W, "ln2.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_2.weight", false, ParamIn::all,
     "post_attention_layernorm.weight"},  // (C)
    {kLn2B, "ln2.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_2.bias", false, ParamIn::gpt2,
     ""},  // (C)
    {kFcW, "mlp.fc.w", ParamDim::FC, ParamDim::C, ParamInit::normal, true, "mlp.c_fc.weight", true, ParamIn::all,
     "", {kFcHfParts, 2}, true},  // (FC,C) llama: [gate; up]
    {kFcB, "mlp.fc.b", ParamDim::FC, ParamDim::one, ParamInit::zeros, false, "mlp.c_fc.bias", false, ParamIn::gpt2,
     ""},  // (FC)
    {kFcProjW, "mlp.proj.w", ParamDim::C, ParamDim::F, ParamInit::normal_residual, true, "mlp.c_proj.weight", true, ParamIn::all,
     "mlp.down_proj.weight", {}, true},  // (C,F) llama: down
    {kFcProjB, "mlp.proj.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "mlp.c_proj.bias", false, ParamIn::gpt2,
     ""},  // (C)
};
constexpr ParamSpec kFinalParamTable[] = {
    {kLnfW, "lnf.w", ParamDim::C, ParamDim::one, ParamInit::ones, false, "ln_f.weight", false, ParamIn::all,
     "model.norm.weight"},                                                                                // (C)
    {kLnfB, "lnf.b", ParamDim::C, ParamDim::one, ParamInit::zeros, false, "ln_f.bias", false, ParamIn::gpt2},  // (C)
    // the untied head (llama only; gpt2's head is always wte): rows [V, Vp) stay zero as wte's
    {kLmHead, "lm_head", ParamDim::Vp, ParamDim::C, ParamInit::normal, true, "", false, ParamIn::untied,
     "lm_head.weight"},                                                                                // (Vp,C)
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
      if (same_str(t[i].name, t[j].name) || (*t[i].hf_name && same_str(t[i].hf_name, t[j].hf_name)) ||
          (*t[i].hf_llama && same_str(t[i].hf_llama, t[j].hf_llama)))
        return false;
    const bool llama_named = *t[i].hf_llama || t[i].hf_llama_parts.count > 0;
    if (!*t[i].hf_name != (t[i].in == ParamIn::untied) || !llama_named != (t[i].in == ParamIn::gpt2))
      return false;  // a name exactly where the row exists
    if (*t[i].hf_llama && t[i].hf_llama_parts.count > 0) return false;  // one name or parts, not both
    if (t[i].muon && !t[i].matrix()) return false;  // Muon is for 2-D tensors only
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
// Muon takes exactly the blocks' matrices: never an embedding, the head or a vector.
static_assert([] {
  for (const ParamSpec& s : kLayerParamTable)
    if (s.muon != s.matrix()) return false;
  for (const ParamSpec& s : kEmbedParamTable)
    if (s.muon) return false;
  for (const ParamSpec& s : kFinalParamTable)
    if (s.muon) return false;
  return true;
}(), "Muon updates the blocks' matrices, and only they");

}  // namespace xtrain
