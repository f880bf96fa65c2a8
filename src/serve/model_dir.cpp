// Reading model directories (src/serve/export.h): config.json -> GPTConfig, model.safetensors
// -> xtrain's flat parameter buffer, through the same layout table the exporter writes with.
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/echo.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/io.h"
#include "core/json.h"
#include "export_layout.h"
#include "model/param_check.h"

namespace xtrain {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os.str() + "]";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

namespace {
// config_from_json: the sizes of config.json; json::type_error for a field of the wrong type.
GPTConfig config_from_json(const json& j, const std::string& path, ModelLayout* layout_out) {
  const std::string type = j.value("model_type", "");
  if (type != "gpt2" && type != kXtrainModelType)
    XT_FAIL(path << ": model_type \"" << echo_value(type) << "\" is neither gpt2 nor " << kXtrainModelType);
  const ModelLayout layout = type == "gpt2" ? ModelLayout::Hf : ModelLayout::Xtrain;
  // size: a positive integer field (bounded like the command-line sizes, far from int overflow)
  auto size = [&](const char* key, long long fallback) -> int {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback > 0) return static_cast<int>(fallback);
      XT_FAIL(path << ": missing " << key);
    }
    if (!j[key].is_number_integer() || j[key].get<long long>() <= 0 || j[key].get<long long>() > (1 << 20))
      XT_FAIL(path << ": " << key << " must be an integer in [1, 1048576], found " << json_echo(j[key]));
    return j[key].get<int>();
  };
  GPTConfig c;
  c.V = size("vocab_size", 0);
  c.maxT = size("n_positions", 0);
  c.C = size("n_embd", 0);
  c.L = size("n_layer", 0);
  c.NH = size("n_head", 0);
  c.F = size("n_inner", 4LL * c.C);  // transformers: n_inner None -> 4 * n_embd
  c.KVH = layout == ModelLayout::Xtrain ? size("n_kv_head", 0) : c.NH;
  if (layout == ModelLayout::Hf && c.C % c.NH != 0) XT_FAIL(path << ": n_embd " << c.C << " is not divisible by n_head " << c.NH);
  c.HS = layout == ModelLayout::Xtrain ? size("head_dim", 0) : c.C / c.NH;
  // Variants of GPT-2 that xtrain does not compute (transformers' GPT2Config fields and defaults).
  const std::string act = j.value("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    XT_FAIL(path << ": activation_function " << echo_value(act) << " is not supported (xtrain computes the tanh GELU, gelu_new)");
  const double eps = j.value("layer_norm_epsilon", 1e-5);
  if (std::fabs(eps - 1e-5) > 1e-12) XT_FAIL(path << ": layer_norm_epsilon " << eps << " is not supported (xtrain uses 1e-5)");
  if (!j.value("tie_word_embeddings", true)) XT_FAIL(path << ": tie_word_embeddings false is not supported (xtrain ties the head to wte)");
  if (!j.value("scale_attn_weights", true)) XT_FAIL(path << ": scale_attn_weights false is not supported");
  if (j.value("scale_attn_by_inverse_layer_idx", false)) XT_FAIL(path << ": scale_attn_by_inverse_layer_idx is not supported");
  try {
    c.validate();
  } catch (const UsageError& e) {
    XT_FAIL(path << ": inconsistent sizes: " << e.what());
  }
  if (layout_out) *layout_out = layout;
  return c;
}
}  // namespace

GPTConfig read_model_config(const std::string& dir, ModelLayout* layout_out) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  const json j = read_json_file(path);  // bounded in size and depth (core/json.h)
  if (!j.is_object()) XT_FAIL(path << ": not a JSON object");
  try {
    return config_from_json(j, path, layout_out);
  } catch (const json::exception& e) {
    XT_FAIL(path << ": a field has the wrong type (" << e.what() << ")");
  }
}

ModelDir load_model_dir(const std::string& dir) {
  ModelDir m;
  m.cfg = read_model_config(dir, &m.layout);
  const std::string model_path = (fs::path(dir) / kModelFile).string();
  const std::vector<ParamTensor> pl = param_layout(m.cfg);
  // What config.json and the file ask for, against the host's memory before any of it is taken: the
  // file's bytes, the parameter buffer and one widened tensor (at most the buffer) at a time.
  struct stat fst{};
  const double param_bytes = 4.0 * double(pl.back().offset + pl.back().count);
  const double need = (::stat(model_path.c_str(), &fst) == 0 ? double(fst.st_size) : 0.0) + 2 * param_bytes;
  const double avail = double(available_host_memory_bytes());
  if (avail > 0 && need > avail)
    XT_FAIL(dir << ": loading the model needs " << need / 1e9 << " GB of host memory (config.json: " << m.cfg.describe()
                << "; " << kModelFile << " and the parameters), " << avail / 1e9 << " GB are available");
  const SafeTensors st = SafeTensors::read(model_path);
  m.params.assign(pl.back().offset + pl.back().count, 0.0f);
  std::set<std::string> used;
  auto lookup = [&](const std::string& name) -> const StEntry* {
    // checkpoints of the GPT-2 family on the Hub name GPT2Model's tensors without the prefix
    const StEntry* e = st.find(name);
    const std::string bare = name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (!e && m.layout == ModelLayout::Hf) e = st.find(bare);
    return e;
  };
  for (const LayoutTensor& t : layout_tensors(m.cfg, m.layout)) {
    const StEntry* e = lookup(t.name);
    if (!e) XT_FAIL("safetensors " << st.label() << ": tensor " << t.name << " is missing");
    if (e->shape != t.shape)
      XT_FAIL("safetensors " << st.label() << ": tensor " << t.name << ": expected shape " << shape_str(t.shape) << ", found "
                             << shape_str(e->shape));
    used.insert(e->name);
    const std::vector<float> v = st.to_f32(*e);
    float* dst = m.params.data() + pl[t.index].offset;
    if (t.transpose) {  // file (in, out) -> xtrain (out, in)
      const size_t rows = pl[t.index].shape[0], cols = pl[t.index].shape[1];
      for (size_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < cols; ++k) dst[r * cols + k] = v[k * rows + r];
    } else {
      std::copy(v.begin(), v.end(), dst);  // wte: V rows; the padding rows stay zero
    }
  }
  for (const StEntry& e : st.entries()) {
    if (used.count(e.name)) continue;
    // transformers' causal-mask buffers (non-persistent today, stored by older versions)
    if (m.layout == ModelLayout::Hf && (ends_with(e.name, ".attn.bias") || ends_with(e.name, ".attn.masked_bias"))) continue;
    if (m.layout == ModelLayout::Hf && e.name == "lm_head.weight") {
      const std::vector<float> head = st.to_f32(e);
      const bool tied = e.shape == std::vector<int64_t>{m.cfg.V, m.cfg.C} &&
                        std::equal(head.begin(), head.end(), m.params.begin());
      if (!tied) XT_FAIL("safetensors " << st.label() << ": lm_head.weight differs from the token embedding (xtrain ties the head to wte)");
      continue;
    }
    XT_FAIL("safetensors " << st.label() << ": unexpected tensor " << e.name << " (not part of a " << layout_name(m.layout)
                           << "-layout model with " << m.cfg.describe() << ")");
  }
  // the impossible value (model/param_check.h): refused here, not as a sampler check or a NaN loss later
  if (const std::string bad = non_finite_param(m.cfg, m.params); !bad.empty())
    XT_FAIL("safetensors " << st.label() << ": " << bad << " (weights must be finite)");
  const fs::path vocab = fs::path(dir) / kVocabFile, merges = fs::path(dir) / kMergesFile;
  if (fs::is_regular_file(vocab) && fs::is_regular_file(merges)) m.vocab_json = vocab.string(), m.merges_txt = merges.string();
  return m;
}

std::vector<float> fit_to_config(const ModelDir& m, const GPTConfig& want) {
  const GPTConfig& have = m.cfg;
  // Compare tensor by tensor in the directory's layout so errors name the tensors of its files.
  const std::vector<LayoutTensor> h = layout_tensors(have, m.layout), w = layout_tensors(want, m.layout);
  const std::vector<ParamTensor> hp = param_layout(have), wp = param_layout(want);
  // the depth first: the tensors (param_layout's, a fixed set per layer) pair up by position only at one depth
  if (have.L != want.L)
    XT_FAIL("--init-from: the model has " << have.L << " layers, expected " << want.L << " (--layers)");
  for (size_t i = 0; i < h.size(); ++i) {
    const bool fewer_positions = hp[i].spec->rows == ParamDim::maxT && want.maxT < have.maxT && w[i].shape[1] == h[i].shape[1];
    if ((h[i].name != w[i].name || h[i].shape != w[i].shape) && !fewer_positions)
      XT_FAIL("--init-from: tensor " << h[i].name << ": expected shape " << shape_str(w[i].shape) << ", found "
                                     << shape_str(h[i].shape));
  }
  if (have.NH != want.NH || have.KVH != want.KVH || have.HS != want.HS)
    XT_FAIL("--init-from: the model has " << have.NH << " heads, " << have.KVH << " kv heads of size " << have.HS
                                          << ", expected " << want.NH << ", " << want.KVH << " of size " << want.HS);
  if (want.maxT == have.maxT) return m.params;
  // Fewer positions than the model was trained with: keep the first rows of wpe.
  std::vector<float> out(wp.back().offset + wp.back().count);
  for (size_t i = 0; i < wp.size(); ++i)
    std::copy_n(m.params.begin() + hp[i].offset, wp[i].count, out.begin() + wp[i].offset);
  return out;
}

}  // namespace xtrain
