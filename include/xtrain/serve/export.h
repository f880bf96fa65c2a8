// Model directories: what `xtrain_export` writes and what `xtrain_mpi --init-from` and
// `xtrain_generate --model` read. A directory holds model.safetensors, config.json, generation_config.json
// and the tokenizer the model was trained with in the form transformers' AutoTokenizer loads with no
// other package: tokenizer.json, tokenizer_config.json and special_tokens_map.json (plus vocab.json and
// merges.txt for GPT-2's files, tokenizer.model for a SentencePiece model), in one of two layouts
// (docs/serving.md):
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
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <xtrain/data/tokenizer.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/safetensors.h>

namespace xtrain {

enum class ModelLayout { Hf, Xtrain };

// File names inside a model directory.
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kConfigFile = "config.json";
inline constexpr const char* kVocabFile = "vocab.json";   // GPT-2 encoder.json
inline constexpr const char* kMergesFile = "merges.txt";  // GPT-2 vocab.bpe
inline constexpr const char* kTokenizerJsonFile = "tokenizer.json";
inline constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
inline constexpr const char* kSpecialTokensMapFile = "special_tokens_map.json";
inline constexpr const char* kSentencePieceFile = "tokenizer.model";  // a SentencePiece model
inline constexpr const char* kGenerationConfigFile = "generation_config.json";
// kExportFileNames: every file an export may write (a previous export's file that this one does not
// write is removed; none of them may be an input of the export).
inline constexpr const char* kExportFileNames[] = {kModelFile,          kConfigFile,          kVocabFile,
                                                   kMergesFile,         kTokenizerJsonFile,   kTokenizerConfigFile,
                                                   kSpecialTokensMapFile, kSentencePieceFile, kGenerationConfigFile};
// config.json's key for the tokenizer fingerprint (Tokenizer::fingerprint, as 16 hex digits); configs
// written by transformers have none. transformers keeps an unknown key as a config attribute.
inline constexpr const char* kTokenizerFingerprintKey = "xtrain_tokenizer_fingerprint";
// The export's tokenizer.json converted from another form (a tiktoken encoding) hashes to another
// fingerprint than the model's: config.json records the file's sha256 under this key, and a reader whose
// tokenizer.json has that sha256 gives the tokenizer read from it the model's fingerprint
// (Tokenizer::adopt_fingerprint), so caches and checkpoints made with the original agree with it.
inline constexpr const char* kTokenizerJsonShaKey = "xtrain_tokenizer_json_sha256";
// What the tokenizer is ("tiktoken cl100k_base", "GPT-2 BPE", "tokenizer.json", "SentencePiece"), for messages.
inline constexpr const char* kTokenizerLabelKey = "xtrain_tokenizer";
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
  std::string dir;
  std::string vocab_json, merges_txt;  // tokenizer paths inside the directory ("" when absent)
  std::string tokenizer_json, tokenizer_model;  // tokenizer.json, tokenizer.model ("" when absent)
  uint64_t tokenizer_fingerprint = 0;  // config.json's kTokenizerFingerprintKey; 0 when absent
  std::string tokenizer_json_sha256, tokenizer_label;  // config.json's kTokenizerJsonShaKey, kTokenizerLabelKey
  bool has_tokenizer() const { return !tokenizer_model.empty() || !tokenizer_json.empty() || !vocab_json.empty(); }
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
// a missing or unexpected tensor is an Error naming it; model.safetensors truncated or rewritten in
// place while it is read, "safetensors <file>: truncated or rewritten while it was read". Never a mix
// of two exports: a directory whose export lock is held (an export into it running), or whose files
// were replaced while they were read, is refused in one line (Error "model directory <dir>: ...; read
// it again").
ModelDir load_model_dir(const std::string& dir);
// load_model_dir with the weights written where params_for(cfg) says, once config.json gave cfg: host
// memory of param_layout(cfg)'s num_params floats (a CPU backend's parameter buffer, filled in one
// conversion from the file); ModelDir::params stays empty then. A null result (or params_for
// empty) means ModelDir::params, as above. The same checks and errors as load_model_dir; on an Error
// the memory may hold part of the weights.
ModelDir load_model_dir(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for);
// load_model_dir into `device`'s parameter memory (params_for's, required): each tensor read in parts
// into the host buffers of make_weight_upload(device) (xtrain/backend/weight_upload.h: pinned on CUDA,
// each part copied while the next is read, widened and transposed on the device), so no host copy of
// the model is made; what no tensor fills zeroed and every value checked finite on the device
// (Backend::sum per tensor; the one found named as above). The same checks and errors.
ModelDir load_model_dir(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend& device);
// read_model_dir: load_model_dir without the weights (params empty): config.json and the tokenizer
// files present, for picking the tokenizer before the weights are read.
ModelDir read_model_dir(const std::string& dir);

// fit_to_config: adapts a loaded model to a training config that may differ only in maxT (fewer
// positions: the first rows of wpe are kept) and must otherwise equal it; throws Error naming the
// family field (arch, tie, eps, theta) or the tensor with expected and found shape otherwise.
std::vector<float> fit_to_config(const ModelDir& m, const GPTConfig& want);

// model_dir_tokenizer: the tokenizer of model directory m, for runs given no tokenizer option:
// tokenizer.model (SentencePiece) when present, else tokenizer.json (a byte-level BPE one, as
// Tokenizer::from_hf_json reads), else vocab.json + merges.txt. A tokenizer.json whose sha256 is
// config.json's kTokenizerJsonShaKey takes config.json's fingerprint. Throws UsageError "<what>: <dir>
// holds no tokenizer ..." when there is none, Error when the file read is not the tokenizer config.json
// records (another fingerprint) or its vocabulary is not the model's. cache: only its cache_dir,
// cache_dir_origin and log_prefix are read: where load_tokenizer keeps the tables it derives from a
// tokenizer.json or vocab.json + merges.txt, so that a later start reads them ("" = derive them each time).
Tokenizer model_dir_tokenizer(const ModelDir& m, const std::string& what, const TokenizerFiles& cache = {});

// check_model_tokenizer: the tokenizer `given` by options, about to be used with model directory m,
// must be the one it was trained with: config.json's fingerprint when recorded, and (check_files) the
// directory's own vocab.json + merges.txt when present. Throws UsageError "<what> was trained with <the directory's
// tokenizer> (fingerprint ..); the tokenizer options give <given> (fingerprint ..): drop them ..."
// otherwise. `what` names the option, e.g. "--init-from models/run".
void check_model_tokenizer(const ModelDir& m, const Tokenizer& given, const std::string& what, bool check_files = true);

// export_tensors: the layout's tensors for params (param_layout(cfg) order, num_params floats).
// `storage` receives the transposed copies that the returned views point into (keep it alive).
// Throws Error with hf_unsupported()'s reason when the hf layout cannot express cfg.
std::vector<StTensorF32> export_tensors(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                                        std::vector<std::vector<float>>& storage);

// ConfigTokens: what config.json records of the tokenizer: the special-token ids (-1: none), the
// fingerprint (0: none) and, for a converted tokenizer.json, its sha256 and the tokenizer's label.
struct ConfigTokens {
  int bos_id = -1, eos_id = -1, pad_id = -1;
  uint64_t fingerprint = 0;
  std::string json_sha256, label;
  // ids: the ids set (not -1), as check_model_config takes them: ("bos_token_id", bos_id), ...
  std::vector<TokenIdField> ids() const;
};

// model_config_json: config.json text for cfg in that layout; throws Error (check_model_config) for a
// model the readers refuse or a token id of `tokens` outside the vocabulary (deterministic: sorted keys, 2-space
// indent, trailing newline). hf gpt2: model_type gpt2, architectures [GPT2LMHeadModel], n_embd, n_layer,
// n_head, n_positions, n_inner, vocab_size, layer_norm_epsilon 1e-5, activation_function
// gelu_new, dropouts 0, torch_dtype float32, tie_word_embeddings true. hf llama: transformers'
// LlamaConfig fields (docs/serving.md lists them). bos_token_id, eos_token_id, pad_token_id where
// defined; kTokenizerFingerprintKey, kTokenizerJsonShaKey, kTokenizerLabelKey where set.
std::string model_config_json(const GPTConfig& cfg, ModelLayout layout, const ConfigTokens& tokens = {});

// Bytes of a whole export, in memory: file name -> contents: model.safetensors, config.json,
// generation_config.json and the tokenizer (the header comment lists the files; docs/serving.md which
// file each tokenizer gives). Deterministic for given inputs. Throws UsageError when tok's fingerprint is
// not tokenizer_fingerprint (when != 0, e.g. a checkpoint's), naming both and the options that pick a
// tokenizer; Error when its vocabulary size is not cfg.V, when it cannot be written as a tokenizer.json
// exactly (Tokenizer::hf_tokenizer_json's reason), and export_tensors' error for hf.
using ExportFiles = std::map<std::string, std::string>;
ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout, const Tokenizer& tok,
                        uint64_t tokenizer_fingerprint = 0);
// make_export with GPT-2's encoder.json + vocab.bpe (loaded by Tokenizer::from_gpt2_files).
ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                        const std::string& encoder_json, const std::string& vocab_bpe, uint64_t tokenizer_fingerprint = 0);

}  // namespace xtrain
