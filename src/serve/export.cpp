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

std::string model_config_json(const GPTConfig& c, ModelLayout layout, int eot_id, uint64_t tokenizer_fingerprint) {
  check_model_config(c, "config.json: not writing the model");  // one the readers refuse is never written
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
    if (eot_id >= 0) j["bos_token_id"] = j["eos_token_id"] = eot_id;
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
      if (eot_id >= 0) j["bos_token_id"] = j["eos_token_id"] = eot_id;
    } else {
      j["model_type"] = kXtrainModelType;
      j["n_kv_head"] = c.KVH;
      j["head_dim"] = c.HS;
      if (eot_id >= 0) j["eos_token_id"] = eot_id;
    }
  }
  if (tokenizer_fingerprint != 0) j[kTokenizerFingerprintKey] = hex64(tokenizer_fingerprint);
  return j.dump(2) + "\n";
}

ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                        const std::string& encoder_json, const std::string& vocab_bpe, uint64_t tokenizer_fingerprint,
                        bool tokenizer_files_optional) {
  // the check of every reader (check_model_config): an export that --model would refuse is never written
  check_model_config(cfg, "the model (" + cfg.describe() + ") is invalid; not exporting");
  // a NaN behind a valid checksum (model/param_check.h) is refused before anything is built or written
  if (const std::string bad = non_finite_param(cfg, params); !bad.empty())
    XT_FAIL("the weights are not finite: " << bad << "; not exporting");
  // The GPT-2 pair is the one form xtrain writes a tokenizer in. Optional: a model trained with another
  // tokenizer (another fingerprint, or the files absent) gets none, and its fingerprint alone.
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_gpt2_files(encoder_json, vocab_bpe));
  } catch (const Error&) {
    if (!tokenizer_files_optional || tokenizer_fingerprint == 0) throw;
  }
  if (tok && tokenizer_fingerprint != 0 && tok->fingerprint() != tokenizer_fingerprint) {
    if (!tokenizer_files_optional)
      XT_FAIL("tokenizer " << encoder_json << " + " << vocab_bpe << " (fingerprint " << hex64(tok->fingerprint())
                           << ") is not the one the model was trained with (" << hex64(tokenizer_fingerprint) << ")");
    tok.reset();
  }
  if (tok && tok->vocab_size() != cfg.V)
    XT_FAIL("tokenizer " << encoder_json << " has " << tok->vocab_size() << " tokens, the model " << cfg.V
                         << " (give the --encoder-json/--vocab-bpe the model was trained with)");
  std::vector<std::vector<float>> storage;
  const std::vector<StTensorF32> tensors = export_tensors(cfg, params, layout, storage);
  // "format": "pt" is what transformers' from_pretrained requires of safetensors metadata
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"xtrain_layout", layout_name(layout)}};
  ExportFiles files;
  files[kModelFile] = safetensors_bytes(tensors, meta);
  files[kConfigFile] = model_config_json(cfg, layout, tok ? tok->eot_id() : -1, tok ? tok->fingerprint() : tokenizer_fingerprint);
  if (tok) {
    files[kVocabFile] = read_file(encoder_json);
    files[kMergesFile] = read_file(vocab_bpe);
  }
  return files;
}

}  // namespace xtrain
