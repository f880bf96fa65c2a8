// Model directories: what `xtrain_export` writes and what `xtrain_mpi --init-from` and
// `xtrain_generate --model` read. A directory holds model.safetensors, config.json and, when the model's
// tokenizer is a GPT-2 BPE pair, vocab.json (= encoder.json) and merges.txt (= vocab.bpe), in one of two
// layouts (docs/serving.md):
//   hf:     Hugging Face's class of the model's family.
//           gpt2: GPT2LMHeadModel (tensor names transformer.*, Conv1D (in, out) weights, V rows of wte,
//           head tied to wte); config.json model_type "gpt2". Needs KVH == NH and NH*HS == C.
//           llama: LlamaForCausalLM (model.*, nn.Linear (out, in) weights, qkv and gate/up split into
//           q/k/v_proj and gate/up_proj, lm_head.weight only when untied); model_type "llama" with head_dim
//           (any head size: LlamaConfig.head_dim).
//   xtrain: xtrain's own names and (out, in) shapes from param_layout, wte with V rows; config.json
//           model_type "xtrain-gpt" with n_kv_head and head_dim (and arch, rms_norm_eps, rope_theta,
//           tie_word_embeddings for llama). Any xtrain shape.
// config.json also records the tokenizer's fingerprint (kTokenizerFingerprintKey) in every export.
// The conversions between a layout and xtrain's flat parameter buffer are written once, here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <xtrain/model/model.h>
#include <xtrain/serve/safetensors.h>

namespace xtrain {

enum class ModelLayout { Hf, Xtrain };

// File names inside a model directory.
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kVocabFile = "vocab.json";   // GPT-2 encoder.json
inline constexpr const char* kMergesFile = "merges.txt";  // GPT-2 vocab.bpe
// config.json's key for the tokenizer fingerprint (Tokenizer::fingerprint, as 16 hex digits); configs
// written by transformers have none. transformers keeps an unknown key as a config attribute.
inline constexpr const char* kTokenizerFingerprintKey = "xtrain_tokenizer_fingerprint";
const char* layout_name(ModelLayout l);  // "hf" | "xtrain"
// hf_architecture: transformers' class of cfg's family ("GPT2LMHeadModel" | "LlamaForCausalLM").
const char* hf_architecture(const GPTConfig& cfg);

// hf_unsupported: "" when the hf layout of cfg's family can express cfg, else the one-line reason
// (e.g. "--kv-heads 2 < --heads 4: GPT-2 has no grouped-query attention").
std::string hf_unsupported(const GPTConfig& cfg);

// A loaded model directory.
struct ModelDir {
  GPTConfig cfg;
  std::vector<float> params;  // (num_params) in param_layout(cfg) order; wte rows [V, Vp) zero
  ModelLayout layout = ModelLayout::Hf;
  std::string vocab_json, merges_txt;  // tokenizer paths inside the directory ("" when absent)
  uint64_t tokenizer_fingerprint = 0;  // config.json's kTokenizerFingerprintKey; 0 when absent
};

// read_model_config: cfg from <dir>/config.json (either layout; the hf layout also accepts configs
// written by transformers: GPT-2 with n_inner null = 4 x n_embd; Llama with LlamaConfig's defaults for
// absent fields: num_key_value_heads = num_attention_heads, head_dim = hidden_size / num_attention_heads,
// rms_norm_eps 1e-6, rope_theta 10000, tie_word_embeddings false, max_position_embeddings 2048). Throws
// Error "<dir>/config.json: <cause>" naming the field for a missing file, bad JSON, a missing/non-integer
// size, a bad fingerprint, or a variant xtrain does not compute: GPT-2 (activation other than
// gelu_new/gelu_pytorch_tanh, layer_norm_epsilon != 1e-5, untied head, scale_attn_by_inverse_layer_idx,
// scale_attn_weights false) and Llama (hidden_act other than silu, attention_bias or mlp_bias true,
// rope_scaling or a rope_parameters rope_type other than default).
GPTConfig read_model_config(const std::string& dir, ModelLayout* layout = nullptr, uint64_t* tokenizer_fingerprint = nullptr);

// load_model_dir: config.json + model.safetensors -> host parameters. Accepts files saved by
// transformers (keys with or without the "transformer." / "model." prefix; the non-persistent attn.bias /
// attn.masked_bias / rotary_emb.inv_freq buffers and, for a tied head, an lm_head.weight equal to the
// token embedding are ignored; F16/BF16 widened).
// Throws Error naming the file, and for a wrong tensor "tensor <name>: expected shape [..], found [..]";
// a missing or unexpected tensor is an Error naming it. Never a mix of two exports: a directory whose
// export lock is held (an export into it running), or whose files were replaced while they were read,
// is refused in one line (Error "model directory <dir>: ...; read it again").
ModelDir load_model_dir(const std::string& dir);

// fit_to_config: adapts a loaded model to a training config that may differ only in maxT (fewer
// positions: the first rows of wpe are kept) and must otherwise equal it; throws Error naming the
// family field (arch, tie, eps, theta) or the tensor with expected and found shape otherwise.
std::vector<float> fit_to_config(const ModelDir& m, const GPTConfig& want);

// check_model_tokenizer: the tokenizer about to be used with model directory m (fingerprint
// tokenizer_fingerprint) must be the one it was trained with: config.json's fingerprint when recorded,
// and the directory's own vocab.json + merges.txt when present. Throws UsageError "<what>: ..." naming
// both fingerprints otherwise. `what` names the option, e.g. "--init-from models/run".
void check_model_tokenizer(const ModelDir& m, uint64_t tokenizer_fingerprint, const std::string& what);

// export_tensors: the layout's tensors for params (param_layout(cfg) order, num_params floats).
// `storage` receives the transposed copies that the returned views point into (keep it alive).
// Throws Error with hf_unsupported()'s reason when the hf layout cannot express cfg.
std::vector<StTensorF32> export_tensors(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                                        std::vector<std::vector<float>>& storage);

// model_config_json: config.json text for cfg in that layout (deterministic: sorted keys, 2-space
// indent, trailing newline). hf gpt2: model_type gpt2, architectures [GPT2LMHeadModel], n_embd, n_layer,
// n_head, n_positions, n_inner, vocab_size, layer_norm_epsilon 1e-5, activation_function
// gelu_new, dropouts 0, torch_dtype float32, tie_word_embeddings true. hf llama: transformers'
// LlamaConfig fields (docs/serving.md lists them). eos (and for hf bos) token id eot_id when >= 0;
// kTokenizerFingerprintKey when tokenizer_fingerprint != 0.
std::string model_config_json(const GPTConfig& cfg, ModelLayout layout, int eot_id = -1, uint64_t tokenizer_fingerprint = 0);

// Bytes of a whole export, in memory: file name -> contents (model.safetensors, config.json with the
// tokenizer fingerprint, vocab.json, merges.txt). Deterministic for given inputs. Throws Error when the
// tokenizer files do not load, their vocabulary size is not cfg.V or (when tokenizer_fingerprint != 0,
// e.g. a checkpoint's) their fingerprint differs, and export_tensors' error for hf. With
// tokenizer_files_optional (the files were defaults, not named by the user) and a known
// tokenizer_fingerprint, files that do not load or have another fingerprint are left out instead: the
// export then has no vocab.json / merges.txt and records tokenizer_fingerprint.
using ExportFiles = std::map<std::string, std::string>;
ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                        const std::string& encoder_json, const std::string& vocab_bpe,
                        uint64_t tokenizer_fingerprint = 0, bool tokenizer_files_optional = false);

}  // namespace xtrain
