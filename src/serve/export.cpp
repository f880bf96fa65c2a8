// Model directory layouts (src/serve/export.h): the tensors of a layout, named and shaped from the
// parameter table (src/model/model_params.h), used by both the writer (export) and the reader
// (load_model_dir in model_dir.cpp).
#include <xtrain/serve/export.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/digest.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/progress.h>
#include <xtrain/data/tokenizer.h>
#include "serve/export_layout.h"
#include "model/param_check.h"

namespace xtrain {

const char* layout_name(ModelLayout l) { return l == ModelLayout::Hf ? "hf" : "xtrain"; }

std::string hf_unsupported(const GPTConfig& c) {
  // LlamaForCausalLM has grouped-query attention and its own head size (LlamaConfig.head_dim: q_proj
  // (NH*head_dim, C), k/v_proj (KVH*head_dim, C), o_proj (C, NH*head_dim)): every xtrain Llama
  if (c.llama()) return "";
  if (c.KVH != c.NH)
    return "--kv-heads " + std::to_string(c.KVH) + " < --heads " + std::to_string(c.NH) +
           ": GPT-2 has no grouped-query attention";
  if (c.NH * c.HS != c.C)
    return "--heads " + std::to_string(c.NH) + " x --head-dim " + std::to_string(c.HS) + " != --dim " + std::to_string(c.C) +
           ": GPT-2's head size is n_embd / n_head";
  return "";
}

const char* hf_architecture(const GPTConfig& c) { return c.llama() ? "LlamaForCausalLM" : "GPT2LMHeadModel"; }

std::vector<LayoutTensor> layout_tensors(const GPTConfig& c, ModelLayout layout) {
  // names, file shapes and transposes from the parameter table (src/model/model_params.h)
  std::vector<LayoutTensor> out;
  const std::vector<ParamTensor> params = param_layout(c);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamTensor& p = params[i];
    const ParamSpec& s = *p.spec;
    if (p.count == 0) continue;  // a row absent from this family (gpt2's lm_head)
    LayoutTensor t;
    t.index = i;
    t.shape = {file_dim(c, s.rows)};  // wte: V rows, the padding rows [V, Vp) are not exported
    if (s.matrix()) t.shape.push_back(file_dim(c, s.cols));
    if (layout == ModelLayout::Xtrain) {
      t.name = p.name;
    } else if (c.llama()) {
      // LlamaForCausalLM's module paths (transformers' modeling_llama.py); nn.Linear keeps (out, in) as
      // xtrain, so no transposes; a fused tensor is one file tensor per HfPart, in row order
      const std::string block = p.layer >= 0 ? "model.layers." + std::to_string(p.layer) + "." : std::string();
      if (s.hf_llama_parts.count == 0) {
        t.name = block + s.hf_llama;
      } else {
        int row = 0;
        for (int k = 0; k < s.hf_llama_parts.count; ++k) {
          const HfPart& part = s.hf_llama_parts.part[k];
          LayoutTensor pt = t;
          pt.name = block + part.name;
          pt.shape[0] = file_dim(c, part.rows);
          pt.row0 = size_t(row);
          row += file_dim(c, part.rows);
          out.push_back(std::move(pt));
        }
        XT_CHECK(row == p.shape[0], p.name << ": the Llama parts cover " << row << " of " << p.shape[0] << " rows");
        continue;
      }
    } else {
      // GPT-2 module paths (transformers' modeling_gpt2.py); Conv1D stores (in, out)
      // (pytorch_utils.Conv1D: y = x W + b) where xtrain stores (out, in)
      t.name = "transformer." + (p.layer >= 0 ? "h." + std::to_string(p.layer) + "." : std::string()) + s.hf_name;
      t.transpose = s.hf_transpose;
      if (t.transpose) std::swap(t.shape[0], t.shape[1]);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<StTensorF32> export_tensors(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                                        std::vector<std::vector<float>>& storage) {
  if (layout == ModelLayout::Hf && !hf_unsupported(cfg).empty())
    XT_FAIL("the Hugging Face " << hf_architecture(cfg) << " layout cannot express this model: " << hf_unsupported(cfg)
                                << " (use --format xtrain)");
  const std::vector<ParamTensor> pl = param_layout(cfg);
  XT_CHECK(params.size() == pl.back().offset + pl.back().count, "parameter count " << params.size());
  std::vector<StTensorF32> out;
  storage.clear();
  for (const LayoutTensor& t : layout_tensors(cfg, layout)) {
    const float* src = params.data() + t.offset(pl);
    if (t.transpose) {  // (out, in) -> (in, out)
      const size_t rows = pl[t.index].shape[0], cols = pl[t.index].shape[1];
      std::vector<float>& dst = storage.emplace_back(rows * cols);
      for (size_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < cols; ++k) dst[k * rows + r] = src[r * cols + k];
      src = dst.data();
    }
    out.push_back({t.name, t.shape, src});  // wte, a Llama part: contiguous rows, no copy needed
  }
  return out;
}

namespace {
// json_float: f as the shortest decimal that reads back as f (1e-5f -> 1e-05, not 9.999999747378752e-06),
// so config.json shows the value given on the command line and a reader's float(double) gives f back.
double json_float(float f) {
  // JSON has no inf or NaN (nlohmann writes them as null, which readers take as "absent": the default)
  XT_CHECK(std::isfinite(f), "config.json: a non-finite number (" << f << ") is never written");
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}
}  // namespace

std::vector<TokenIdField> ConfigTokens::ids() const {
  std::vector<TokenIdField> out;
  for (const auto& [field, id] : {std::pair{"bos_token_id", bos_id}, {"eos_token_id", eos_id}, {"pad_token_id", pad_id}})
    if (id != -1) out.push_back({field, id});
  return out;
}

std::string model_config_json(const GPTConfig& c, ModelLayout layout, const ConfigTokens& t) {
  // one the readers refuse is never written, nor token ids they refuse
  check_model_config(c, "config.json: not writing the model", t.ids());
  nlohmann::json j;
  if (layout == ModelLayout::Hf && c.llama()) {
    // transformers' LlamaConfig: every field its LlamaForCausalLM reads, with the values xtrain computes
    j = {{"model_type", "llama"},          {"architectures", {"LlamaForCausalLM"}},
         {"vocab_size", c.V},               {"hidden_size", c.C},
         {"intermediate_size", c.F},        {"num_hidden_layers", c.L},
         {"num_attention_heads", c.NH},     {"num_key_value_heads", c.KVH},
         {"head_dim", c.HS},                {"hidden_act", "silu"},
         {"max_position_embeddings", c.maxT}, {"rms_norm_eps", json_float(c.norm_eps)},
         {"rope_theta", json_float(c.rope_theta)}, {"rope_scaling", nullptr},
         {"attention_bias", false},         {"attention_dropout", 0.0},
         {"mlp_bias", false},               {"tie_word_embeddings", c.tied()},
         {"torch_dtype", "float32"},        {"initializer_range", 0.02},
         {"pretraining_tp", 1},             {"use_cache", true}};
  } else {
    j = {{"vocab_size", c.V}, {"n_positions", c.maxT}, {"n_embd", c.C}, {"n_layer", c.L}, {"n_head", c.NH},
         {"n_inner", c.F},    {"torch_dtype", "float32"}};
    if (c.llama()) {  // xtrain's layout of a Llama model: the family's fields under LlamaConfig's names
      j["arch"] = to_string(c.arch);
      j["rms_norm_eps"] = json_float(c.norm_eps);
      j["rope_theta"] = json_float(c.rope_theta);
      j["tie_word_embeddings"] = c.tied();
    } else {
      j["layer_norm_epsilon"] = 1e-5;
      j["activation_function"] = "gelu_new";
      j["tie_word_embeddings"] = true;
    }
    if (layout == ModelLayout::Hf) {
      j["model_type"] = "gpt2";
      j["architectures"] = {"GPT2LMHeadModel"};
      for (const char* k : {"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout"}) j[k] = 0.0;
    } else {
      j["model_type"] = kXtrainModelType;
      j["n_kv_head"] = c.KVH;
      j["head_dim"] = c.HS;
    }
  }
  // the special-token ids as the tokenizer defines them (PretrainedConfig's bos/eos/pad_token_id)
  if (t.bos_id >= 0) j["bos_token_id"] = t.bos_id;
  if (t.eos_id >= 0) j["eos_token_id"] = t.eos_id;
  if (t.pad_id >= 0) j["pad_token_id"] = t.pad_id;
  if (t.fingerprint != 0) j[kTokenizerFingerprintKey] = hex64(t.fingerprint);
  if (!t.json_sha256.empty()) j[kTokenizerJsonShaKey] = t.json_sha256;
  if (!t.label.empty()) j[kTokenizerLabelKey] = t.label;
  return j.dump(2) + "\n";
}

namespace {

// tokenizer_label: kTokenizerLabelKey's value: what the tokenizer is, without local paths.
std::string tokenizer_label(const Tokenizer& tok) {
  switch (tok.kind()) {
    case Tokenizer::Kind::Gpt2Files: return "GPT-2 BPE";
    case Tokenizer::Kind::Tiktoken: return tok.describe();
    case Tokenizer::Kind::HfJson: return "tokenizer.json";
    case Tokenizer::Kind::SentencePiece: break;
  }
  return "SentencePiece";
}

// tokenizer_files: the tokenizer's files of an export (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, and vocab.json + merges.txt or tokenizer.model) into *files; its ids and
// identity into *t (config.json).
void tokenizer_files(const Tokenizer& tok, const GPTConfig& cfg, ExportFiles* files, ConfigTokens* t) {
  std::string json;
  try {
    json = tok.hf_tokenizer_json();
  } catch (const Error& e) {
    XT_FAIL("tokenizer " << tok.describe() << " cannot be exported as a tokenizer.json that gives its ids: " << e.what()
                         << "; not exporting");
  }
  const Tokenizer::HfTokenRoles r = tok.hf_token_roles();
  t->bos_id = r.bos_id, t->eos_id = r.eos_id, t->pad_id = r.pad_id;
  t->fingerprint = tok.fingerprint();
  t->label = tokenizer_label(tok);
  // a tokenizer.json that is not the run's own file reads back with another fingerprint: its sha256 lets
  // a reader give it the model's (kTokenizerJsonShaKey)
  if (tok.kind() == Tokenizer::Kind::Tiktoken) t->json_sha256 = sha256_hex(json);
  (*files)[kTokenizerJsonFile] = std::move(json);
  // tokenizer_config.json: the generic fast tokenizer over tokenizer.json (no class of a model family,
  // whose own defaults, a BOS added or a slow tokenizer converted, would change the ids), the roles as
  // the tokenizer defines them, a BOS only where the tokenizer adds one (training joined documents with
  // encode's ids: no BOS otherwise)
  nlohmann::ordered_json cfg_json = {{"tokenizer_class", "PreTrainedTokenizerFast"}};
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"bos_token", &r.bos}, {"eos_token", &r.eos},
                                   {"unk_token", &r.unk}, {"pad_token", &r.pad}})
    if (!value->empty()) cfg_json[key] = map[key] = *value;
  cfg_json["add_bos_token"] = r.add_bos;
  cfg_json["add_eos_token"] = false;
  cfg_json["model_max_length"] = cfg.maxT;
  cfg_json["clean_up_tokenization_spaces"] = false;
  (*files)[kTokenizerConfigFile] = cfg_json.dump(2) + "\n";
  (*files)[kSpecialTokensMapFile] = map.dump(2) + "\n";
  if (tok.kind() == Tokenizer::Kind::Gpt2Files) {  // the pair as today, for tools that read only those
    (*files)[kVocabFile] = read_file(tok.source_files().at(0));
    (*files)[kMergesFile] = read_file(tok.source_files().at(1));
  }
  if (tok.kind() == Tokenizer::Kind::SentencePiece) (*files)[kSentencePieceFile] = tok.sentencepiece_model();
}

}  // namespace

ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout, const Tokenizer& tok,
                        uint64_t tokenizer_fingerprint) {
  // the check of every reader (check_model_config): an export that --model would refuse is never written
  check_model_config(cfg, "the model (" + cfg.describe() + ") is invalid; not exporting");
  // a NaN behind a valid checksum (model/param_check.h) is refused before anything is built or written
  if (const std::string bad = non_finite_param(cfg, params); !bad.empty())
    XT_FAIL("the weights are not finite: " << bad << "; not exporting");
  // the options the user gave picked another tokenizer: a usage error (exit 2), as the trainer's --init-from
  // and xtrain_generate / xtrain_eval refuse it
  if (tokenizer_fingerprint != 0 && tok.fingerprint() != tokenizer_fingerprint)
    throw UsageError("tokenizer " + tok.describe() + " (fingerprint " + hex64(tok.fingerprint()) +
                     ") is not the one the model was trained with (" + hex64(tokenizer_fingerprint) +
                     "): give the run's tokenizer options (--tokenizer NAME, --tokenizer-json FILE, --tokenizer-model FILE "
                     "or --encoder-json/--vocab-bpe)");
  if (tok.vocab_size() != cfg.V)
    throw UsageError("tokenizer " + tok.describe() + " has " + std::to_string(tok.vocab_size()) + " tokens, the model " +
                     std::to_string(cfg.V) + " (give the tokenizer options the model was trained with)");
  std::vector<std::vector<float>> storage;
  const std::vector<StTensorF32> tensors = export_tensors(cfg, params, layout, storage);
  ExportFiles files;
  ConfigTokens t;
  tokenizer_files(tok, cfg, &files, &t);
  // the special-token ids config.json, generation_config.json and tokenizer_config.json record: tokens
  // of the model's vocabulary, checked as every reader checks them
  check_model_config(cfg, "tokenizer " + tok.describe() + ": its special tokens do not fit the model; not exporting", t.ids());
  // "format": "pt" is what transformers' from_pretrained requires of safetensors metadata
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"xtrain_layout", layout_name(layout)}};
  files[kModelFile] = safetensors_bytes(tensors, meta);
  files[kConfigFile] = model_config_json(cfg, layout, t);
  // generation_config.json: GenerationConfig's special-token ids (generate stops at eos_token_id)
  nlohmann::json gen = nlohmann::json::object();
  if (t.bos_id >= 0) gen["bos_token_id"] = t.bos_id;
  if (t.eos_id >= 0) gen["eos_token_id"] = t.eos_id;
  if (t.pad_id >= 0) gen["pad_token_id"] = t.pad_id;
  files[kGenerationConfigFile] = gen.dump(2) + "\n";
  return files;
}

ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout, const std::string& encoder_json,
                        const std::string& vocab_bpe, uint64_t tokenizer_fingerprint) {
  // the model and the weights first, as the other overload checks them before anything else
  check_model_config(cfg, "the model (" + cfg.describe() + ") is invalid; not exporting");
  if (const std::string bad = non_finite_param(cfg, params); !bad.empty())
    XT_FAIL("the weights are not finite: " << bad << "; not exporting");
  return make_export(cfg, params, layout, Tokenizer::from_gpt2_files(encoder_json, vocab_bpe), tokenizer_fingerprint);
}

}  // namespace xtrain
