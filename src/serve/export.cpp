// Model directory layouts (src/serve/export.h): the tensors of a layout, named and shaped from the
// parameter table (src/model/model_params.h), used by both the writer (export) and the reader
// (load_model_dir in model_dir.cpp).
#include "serve/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"
#include "core/progress.h"
#include "data/tokenizer.h"
#include "serve/export_layout.h"
#include "model/param_check.h"

namespace xtrain {

const char* layout_name(ModelLayout l) { return l == ModelLayout::Hf ? "hf" : "xtrain"; }

std::string hf_unsupported(const GPTConfig& c) {
  if (c.KVH != c.NH)
    return "--kv-heads " + std::to_string(c.KVH) + " < --heads " + std::to_string(c.NH) +
           ": GPT-2 has no grouped-query attention";
  if (c.NH * c.HS != c.C)
    return "--heads " + std::to_string(c.NH) + " x --head-dim " + std::to_string(c.HS) + " != --dim " + std::to_string(c.C) +
           ": GPT-2's head size is n_embd / n_head";
  return "";
}

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
    XT_FAIL("the Hugging Face GPT-2 layout cannot express this model: " << hf_unsupported(cfg) << " (use --format xtrain)");
  const std::vector<ParamTensor> pl = param_layout(cfg);
  XT_CHECK(params.size() == pl.back().offset + pl.back().count, "parameter count " << params.size());
  std::vector<StTensorF32> out;
  storage.clear();
  for (const LayoutTensor& t : layout_tensors(cfg, layout)) {
    const float* src = params.data() + pl[t.index].offset;
    if (t.transpose) {  // (out, in) -> (in, out)
      const size_t rows = pl[t.index].shape[0], cols = pl[t.index].shape[1];
      std::vector<float>& dst = storage.emplace_back(rows * cols);
      for (size_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < cols; ++k) dst[k * rows + r] = src[r * cols + k];
      src = dst.data();
    }
    out.push_back({t.name, t.shape, src});  // wte: its first V rows are contiguous, no copy needed
  }
  return out;
}

std::string model_config_json(const GPTConfig& c, ModelLayout layout, int eot_id) {
  nlohmann::json j = {{"vocab_size", c.V},          {"n_positions", c.maxT}, {"n_embd", c.C},
                      {"n_layer", c.L},             {"n_head", c.NH},        {"n_inner", c.F},
                      {"layer_norm_epsilon", 1e-5}, {"activation_function", "gelu_new"},
                      {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
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
  return j.dump(2) + "\n";
}

ExportFiles make_export(const GPTConfig& cfg, const std::vector<float>& params, ModelLayout layout,
                        const std::string& encoder_json, const std::string& vocab_bpe, uint64_t tokenizer_fingerprint) {
  // model directories hold the GPT-2 family only: a Llama model is refused, never written as a wrong GPT-2
  if (cfg.llama()) XT_FAIL("cannot export a Llama model yet (" << cfg.describe() << "): model directories hold GPT-2 models only");
  // a NaN behind a valid checksum (model/param_check.h) is refused before anything is built or written
  if (const std::string bad = non_finite_param(cfg, params); !bad.empty())
    XT_FAIL("the weights are not finite: " << bad << "; not exporting");
  const Tokenizer tok = Tokenizer::from_gpt2_files(encoder_json, vocab_bpe);
  if (tokenizer_fingerprint != 0 && tok.fingerprint() != tokenizer_fingerprint)
    XT_FAIL("tokenizer " << encoder_json << " + " << vocab_bpe << " is not the one the model was trained with (fingerprints differ)");
  if (tok.vocab_size() != cfg.V)
    XT_FAIL("tokenizer " << encoder_json << " has " << tok.vocab_size() << " tokens, the model " << cfg.V
                         << " (give the --encoder-json/--vocab-bpe the model was trained with)");
  std::vector<std::vector<float>> storage;
  const std::vector<StTensorF32> tensors = export_tensors(cfg, params, layout, storage);
  // "format": "pt" is what transformers' from_pretrained requires of safetensors metadata
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"xtrain_layout", layout_name(layout)}};
  ExportFiles files;
  files[kModelFile] = safetensors_bytes(tensors, meta);
  files[kConfigFile] = model_config_json(cfg, layout, tok.eot_id());
  files[kVocabFile] = read_file(encoder_json);
  files[kMergesFile] = read_file(vocab_bpe);
  return files;
}

}  // namespace xtrain
