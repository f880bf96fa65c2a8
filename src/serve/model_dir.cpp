// Reading model directories (src/serve/export.h): config.json -> GPTConfig, model.safetensors
// -> xtrain's flat parameter buffer, through the same layout table the exporter writes with.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>

#include "core/digest.h"
#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/host_memory.h"
#include "core/io.h"
#include "core/json.h"
#include <xtrain/backend/weight_upload.h>
#include <xtrain/data/tokenizer.h>
#include "export_layout.h"
#include "export_commit.h"
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
// field: config.json's `key` as a T, `fallback` when absent; Error naming the field when it has another
// JSON type, null included (nlohmann's own message names neither the file nor the field).
template <class T>
T field(const json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key)) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    XT_FAIL(path << ": " << key << " has the wrong JSON type, found " << json_echo(j[key]));
  }
}

// config_from_json: the sizes of config.json; Error naming a field of the wrong type.
// token_id_fields: the special-token ids of a config.json or generation_config.json (PretrainedConfig's
// and GenerationConfig's bos_token_id, eos_token_id, pad_token_id: an integer, or a list of them, as
// Llama 3 gives several eos ids; absent or null: none), for check_model_config. Error naming the field
// for another JSON type. pad_token_id -1 (signed; 2^64-1 is out of range) is none too: older Hugging Face config.json files write it so
// (GPT-2 era configs, some conversions); any other negative id, and -1 in another field or in a list,
// stays an id out of range.
std::vector<TokenIdField> token_id_fields(const json& j, const std::string& path) {
  std::vector<TokenIdField> out;
  auto id_of = [&](const json& v, const std::string& name) {
    if (v.is_number_unsigned()) {  // past long long: kept out of range, the message quoting the JSON
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<long long>::max()))
        XT_FAIL(path << ": " << name << " " << json_echo(v) << " is not a token id of the vocabulary");
      return out.push_back({name, static_cast<long long>(u)});
    }
    if (!v.is_number_integer())
      XT_FAIL(path << ": " << name << " must be an integer token id (or a list of them), found " << json_echo(v));
    out.push_back({name, v.get<long long>()});
  };
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    // a signed -1 only: 18446744073709551615 (an unsigned JSON number) would also read as -1 through long long
    if (std::string_view(key) == "pad_token_id" && j[key].is_number_integer() && !j[key].is_number_unsigned() &&
        j[key].get<long long>() == -1)
      continue;
    if (!j[key].is_array()) {
      id_of(j[key], key);
      continue;
    }
    for (size_t i = 0; i < j[key].size(); ++i) id_of(j[key][i], std::string(key) + "[" + std::to_string(i) + "]");
  }
  return out;
}

GPTConfig config_from_json(const json& j, const std::string& path, ModelLayout* layout_out) {
  const std::string type = field<std::string>(j, "model_type", "", path);
  if (type != "gpt2" && type != "llama" && type != kXtrainModelType)
    XT_FAIL(path << ": model_type \"" << echo_value(type) << "\" is none of gpt2, llama, " << kXtrainModelType);
  const ModelLayout layout = type == kXtrainModelType ? ModelLayout::Xtrain : ModelLayout::Hf;
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
  // positive: a positive finite number field of `obj` (eps, theta), as the float xtrain computes with
  auto positive = [&](const json& obj, const char* key, float fallback) -> float {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    const double v = obj[key].is_number() ? obj[key].get<double>() : -1.0;
    if (!(v > 0) || !std::isfinite(float(v))) XT_FAIL(path << ": " << key << " must be a positive number, found " << json_echo(obj[key]));
    return float(v);
  };
  GPTConfig c;
  if (type == "llama") {
    // transformers' LlamaConfig (configuration_llama.py): field names and the defaults of absent fields
    c.arch = Arch::llama;
    c.V = size("vocab_size", 0);
    c.C = size("hidden_size", 0);
    c.F = size("intermediate_size", 0);
    c.L = size("num_hidden_layers", 0);
    c.NH = size("num_attention_heads", 0);
    c.KVH = size("num_key_value_heads", c.NH);
    c.maxT = size("max_position_embeddings", 2048);
    // head_dim: LlamaConfig's own field (q_proj (NH*head_dim, C), o_proj (C, NH*head_dim)); absent or
    // null, hidden_size / num_attention_heads
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      c.HS = size("head_dim", 0);
    } else {
      if (c.C % c.NH != 0)
        XT_FAIL(path << ": hidden_size " << c.C << " is not divisible by num_attention_heads " << c.NH << " and there is no head_dim");
      c.HS = c.C / c.NH;
    }
    c.norm_eps = positive(j, "rms_norm_eps", 1e-6f);
    c.rope_theta = positive(j, "rope_theta", 10000.0f);
    c.tie_embeddings = field<bool>(j, "tie_word_embeddings", false, path) ? 1 : 0;
    const std::string act = field<std::string>(j, "hidden_act", "silu", path);
    if (act != "silu") XT_FAIL(path << ": hidden_act " << echo_value(act) << " is not supported (xtrain computes SwiGLU with silu)");
    for (const char* bias : {"attention_bias", "mlp_bias"})
      if (field<bool>(j, bias, false, path)) XT_FAIL(path << ": " << bias << " true is not supported (xtrain's Llama has no biases)");
    // plain rotary only: rope_scaling (transformers 4) or rope_parameters (transformers 5, which also
    // moves rope_theta there) of any rope_type but "default" changes the angles
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      if (!j.contains(key) || j[key].is_null()) continue;
      const json& r = j[key];
      const std::string rope_type = r.is_object() ? r.value("rope_type", r.value("type", "default")) : std::string();
      if (!r.is_object() || rope_type != "default")
        XT_FAIL(path << ": " << key << " " << json_echo(r) << " is not supported (xtrain computes plain rotary, rope_type default)");
      c.rope_theta = positive(r, "rope_theta", c.rope_theta);
    }
  } else {
    c.V = size("vocab_size", 0);
    c.maxT = size("n_positions", 0);
    c.C = size("n_embd", 0);
    c.L = size("n_layer", 0);
    c.NH = size("n_head", 0);
    c.F = size("n_inner", 4LL * c.C);  // transformers: n_inner None -> 4 * n_embd
    c.KVH = layout == ModelLayout::Xtrain ? size("n_kv_head", 0) : c.NH;
    if (layout == ModelLayout::Hf && c.C % c.NH != 0) XT_FAIL(path << ": n_embd " << c.C << " is not divisible by n_head " << c.NH);
    c.HS = layout == ModelLayout::Xtrain ? size("head_dim", 0) : c.C / c.NH;
    if (layout == ModelLayout::Xtrain && j.contains("arch")) {
      try {
        c.arch = parse_arch(field<std::string>(j, "arch", "", path));
      } catch (const UsageError&) {
        XT_FAIL(path << ": arch " << json_echo(j["arch"]) << " is neither gpt2 nor llama");
      }
    }
  }
  if (type == kXtrainModelType && c.llama()) {  // xtrain's layout of a Llama model: LlamaConfig's names, no defaults
    for (const char* key : {"rms_norm_eps", "rope_theta", "tie_word_embeddings"})
      if (!j.contains(key)) XT_FAIL(path << ": missing " << key);
    c.norm_eps = positive(j, "rms_norm_eps", 0.0f);
    c.rope_theta = positive(j, "rope_theta", 0.0f);
    c.tie_embeddings = field<bool>(j, "tie_word_embeddings", false, path) ? 1 : 0;
  } else if (!c.llama()) {
    // Variants of GPT-2 that xtrain does not compute (transformers' GPT2Config fields and defaults).
    const std::string act = field<std::string>(j, "activation_function", "gelu_new", path);
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      XT_FAIL(path << ": activation_function " << echo_value(act) << " is not supported (xtrain computes the tanh GELU, gelu_new)");
    const double eps = field<double>(j, "layer_norm_epsilon", 1e-5, path);
    if (std::fabs(eps - 1e-5) > 1e-12) XT_FAIL(path << ": layer_norm_epsilon " << eps << " is not supported (xtrain uses 1e-5)");
    if (!field<bool>(j, "tie_word_embeddings", true, path)) XT_FAIL(path << ": tie_word_embeddings false is not supported (xtrain ties the head to wte)");
    if (!field<bool>(j, "scale_attn_weights", true, path)) XT_FAIL(path << ": scale_attn_weights false is not supported");
    if (field<bool>(j, "scale_attn_by_inverse_layer_idx", false, path)) XT_FAIL(path << ": scale_attn_by_inverse_layer_idx is not supported");
  }
  // the check of checkpoints and exports too, with the special-token ids config.json records
  check_model_config(c, path + ": the model is invalid", token_id_fields(j, path));
  if (layout_out) *layout_out = layout;
  return c;
}
}  // namespace

GPTConfig read_model_config(const std::string& dir, ModelLayout* layout_out, uint64_t* tokenizer_fingerprint) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  const json j = read_json_file(path);  // bounded in size and depth (core/json.h)
  if (!j.is_object()) XT_FAIL(path << ": not a JSON object");
  try {
    const GPTConfig c = config_from_json(j, path, layout_out);
    uint64_t fingerprint = 0;
    if (j.contains(kTokenizerFingerprintKey) &&
        !(j[kTokenizerFingerprintKey].is_string() && parse_hex64(j[kTokenizerFingerprintKey].get<std::string>(), &fingerprint)))
      XT_FAIL(path << ": " << kTokenizerFingerprintKey << " must be 16 hex digits, found " << json_echo(j[kTokenizerFingerprintKey]));
    // 0 stands for "none recorded" (check_model_tokenizer then checks nothing), which the key's absence
    // says; export never writes it, so a zero here would only switch the tokenizer check off.
    if (j.contains(kTokenizerFingerprintKey) && fingerprint == 0)
      XT_FAIL(path << ": " << kTokenizerFingerprintKey << " is 0000000000000000, which no tokenizer has (without a "
                   << "recorded tokenizer the key is left out)");
    if (tokenizer_fingerprint) *tokenizer_fingerprint = fingerprint;
    // generation_config.json, where present: its special-token ids are the model's tokens too
    const std::string gen_path = (fs::path(dir) / kGenerationConfigFile).string();
    std::error_code ec;
    if (fs::exists(gen_path, ec)) {
      const json g = read_json_file(gen_path);
      if (!g.is_object()) XT_FAIL(gen_path << ": not a JSON object");
      check_model_config(c, gen_path + ": the model's special tokens are invalid", token_id_fields(g, gen_path));
    }
    return c;
  } catch (const json::exception& e) {
    XT_FAIL(path << ": a field has the wrong type (" << e.what() << ")");
  }
}

namespace {
// export_running: whether an export into dir holds its lock now (ExportCommit, export_commit.h). A lock
// file left by a killed export is not held.
bool export_running(const std::string& dir) {
  const int fd = ::open((fs::path(dir) / kExportLockName).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

// DirFiles: (device, inode) of the directory's model, config and tokenizer files, (0, 0) for one that is absent. An export
// renames new files over the old ones (new inodes), so a read between two equal snapshots, with no
// export holding the lock at the end, read one export's files, never a mix of two.
using DirFiles = std::array<std::pair<dev_t, ino_t>, 6>;
DirFiles dir_files(const std::string& dir) {
  DirFiles ids{};
  const char* names[6] = {kModelFile, kConfigFile, kVocabFile, kMergesFile, kTokenizerJsonFile, kSentencePieceFile};
  for (size_t i = 0; i < ids.size(); ++i) {
    struct stat st{};
    if (::stat((fs::path(dir) / names[i]).c_str(), &st) == 0) ids[i] = {st.st_dev, st.st_ino};
  }
  return ids;
}

void refuse_if_exporting(const std::string& dir) {
  if (export_running(dir))
    XT_FAIL("model directory " << dir << ": an export into it is running (" << kExportLockName
                               << " is held); read it when the export has ended");
}

// every file, the weights included (below)
ModelDir read_model_files(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend* device);
ModelDir read_model_files_checked(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend* device);
}  // namespace

ModelDir load_model_dir(const std::string& dir) { return load_model_dir(dir, nullptr); }

ModelDir load_model_dir(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for) {
  return read_model_files_checked(dir, params_for, nullptr);
}

ModelDir load_model_dir(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend& device) {
  XT_CHECK(params_for, "load_model_dir: a device load needs the parameter memory");
  return read_model_files_checked(dir, params_for, &device);
}

namespace {
ModelDir read_model_files_checked(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend* device) {
  refuse_if_exporting(dir);
  const DirFiles before = dir_files(dir);
  ModelDir m = read_model_files(dir, params_for, device);
  if (dir_files(dir) != before)
    XT_FAIL("model directory " << dir << ": its files were replaced while they were read (an export into it); read it again");
  refuse_if_exporting(dir);  // one that began while the files were read, not done renaming
  return m;
}
}  // namespace

ModelDir read_model_dir(const std::string& dir) {
  ModelDir m;
  m.cfg = read_model_config(dir, &m.layout, &m.tokenizer_fingerprint);
  m.dir = dir;
  const fs::path vocab = fs::path(dir) / kVocabFile, merges = fs::path(dir) / kMergesFile;
  if (fs::is_regular_file(vocab) && fs::is_regular_file(merges)) m.vocab_json = vocab.string(), m.merges_txt = merges.string();
  if (fs::is_regular_file(fs::path(dir) / kTokenizerJsonFile)) m.tokenizer_json = (fs::path(dir) / kTokenizerJsonFile).string();
  if (fs::is_regular_file(fs::path(dir) / kSentencePieceFile)) m.tokenizer_model = (fs::path(dir) / kSentencePieceFile).string();
  const std::string config = (fs::path(dir) / kConfigFile).string();
  const json j = read_json_file(config);
  m.tokenizer_json_sha256 = field<std::string>(j, kTokenizerJsonShaKey, "", config);
  m.tokenizer_label = field<std::string>(j, kTokenizerLabelKey, "", config);
  return m;
}

namespace {
// non_finite_on_device: non_finite_param of parameters in device memory: a tensor whose sum is not
// finite (a NaN or infinity in it, or an overflow of the sum) is copied back and searched
std::string non_finite_on_device(Backend& device, const GPTConfig& cfg, const float* params) {
  for (const ParamTensor& t : param_layout(cfg)) {
    if (std::isfinite(device.sum(params + t.offset, t.count))) continue;
    std::vector<float> host(t.count);
    device.copy_to_host(host.data(), params + t.offset, t.count * sizeof(float));
    if (std::string bad = non_finite_in(t, host.data(), t.count); !bad.empty()) return bad;
  }
  return "";
}

ModelDir read_model_files(const std::string& dir, const std::function<float*(const GPTConfig&)>& params_for, Backend* device) {
  ModelDir m = read_model_dir(dir);
  const std::string model_path = (fs::path(dir) / kModelFile).string();
  const std::vector<ParamTensor> pl = param_layout(m.cfg);
  const size_t num_params = pl.back().offset + pl.back().count;
  // What config.json and the file ask for, against the host's memory before any of it is taken: the
  // file's pages (page cache as it is read, counted in MemAvailable) and the parameter buffer.
  struct stat fst{};
  const double param_bytes = device ? 0.0 : 4.0 * double(num_params);  // a device's memory is not the host's
  const double need = (::stat(model_path.c_str(), &fst) == 0 ? double(fst.st_size) : 0.0) + param_bytes;
  const double avail = double(available_host_memory_bytes());
  if (avail > 0 && need > avail)
    XT_FAIL(dir << ": loading the model needs " << need / 1e9 << " GB of host memory (config.json: " << m.cfg.describe()
                << "; " << kModelFile << " and the parameters), " << avail / 1e9 << " GB are available");
  const SafeTensors st = SafeTensors::read(model_path);
  // the destination: the caller's (its backend's parameter memory, written once from the file) or params
  float* params = params_for ? params_for(m.cfg) : nullptr;
  if (!params) m.params.resize(num_params), params = m.params.data();
  std::unique_ptr<WeightUpload> upload = device ? make_weight_upload(*device) : nullptr;
  std::vector<std::pair<size_t, size_t>> written;  // [begin, end) elements of params the file's tensors fill
  std::set<std::string> used;
  auto lookup = [&](const std::string& name) -> const StEntry* {
    // checkpoints on the Hub name the base model's tensors (GPT2Model, LlamaModel) without its prefix
    const StEntry* e = st.find(name);
    for (const std::string prefix : {"transformer.", "model."})
      if (!e && m.layout == ModelLayout::Hf && name.rfind(prefix, 0) == 0) e = st.find(name.substr(prefix.size()));
    return e;
  };
  for (const LayoutTensor& t : layout_tensors(m.cfg, m.layout)) {
    const StEntry* e = lookup(t.name);
    if (!e) XT_FAIL("safetensors " << st.label() << ": tensor " << t.name << " is missing");
    if (e->shape != t.shape)
      XT_FAIL("safetensors " << st.label() << ": tensor " << t.name << ": expected shape " << shape_str(t.shape) << ", found "
                             << shape_str(e->shape));
    used.insert(e->name);
    // straight from the file into the destination (F32 read into it; F16/BF16 through a bounded buffer)
    if (upload) st.upload_into(*e, params + t.offset(pl), t.transpose, *upload);
    else if (t.transpose) st.to_f32_transposed_into(*e, params + t.offset(pl));  // file (in, out) -> xtrain (out, in)
    else st.to_f32_into(*e, params + t.offset(pl));  // wte, lm_head: V rows (padding rows below); a Llama part: its rows
    written.emplace_back(t.offset(pl), t.offset(pl) + e->count());
  }
  if (upload) upload->finish();  // every part on the device before the checks below read it there
  // what no tensor of the file fills (wte's and lm_head's rows [V, Vp)) is zero, whatever the destination held
  auto zero = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    if (device) device->zero(params + begin, (end - begin) * sizeof(float));
    else std::fill(params + begin, params + end, 0.0f);
  };
  std::sort(written.begin(), written.end());
  size_t filled = 0;
  for (const auto& [begin, end] : written) {
    zero(filled, begin);
    filled = std::max(filled, end);
  }
  zero(filled, num_params);
  for (const StEntry& e : st.entries()) {
    if (used.count(e.name)) continue;
    // transformers' causal-mask and rotary buffers (non-persistent today, stored by older versions)
    const bool buffer = m.cfg.llama() ? ends_with(e.name, ".rotary_emb.inv_freq")
                                      : ends_with(e.name, ".attn.bias") || ends_with(e.name, ".attn.masked_bias");
    if (m.layout == ModelLayout::Hf && buffer) continue;
    if (m.layout == ModelLayout::Hf && m.cfg.tied() && e.name == "lm_head.weight") {  // a tied head saved anyway
      const std::vector<float> head = st.to_f32(e);
      std::vector<float> wte;  // the token embedding's first rows, as the head's (device memory: copied back)
      if (device && head.size() <= num_params) wte.resize(head.size()), device->copy_to_host(wte.data(), params, head.size() * sizeof(float));
      const float* embedding = device ? wte.data() : params;
      const bool tied = e.shape == std::vector<int64_t>{m.cfg.V, m.cfg.C} && head.size() <= num_params &&
                        std::equal(head.begin(), head.end(), embedding);
      if (!tied)
        XT_FAIL("safetensors " << st.label() << ": lm_head.weight differs from the token embedding (config.json ties the head: "
                               << (m.cfg.llama() ? "tie_word_embeddings true" : "GPT-2") << ")");
      continue;
    }
    XT_FAIL("safetensors " << st.label() << ": unexpected tensor " << e.name << " (not part of a " << layout_name(m.layout)
                           << "-layout model with " << m.cfg.describe() << ")");
  }
  // the impossible value (model/param_check.h): refused here, not as a sampler check or a NaN loss later
  const std::string bad = device ? non_finite_on_device(*device, m.cfg, params) : non_finite_param(m.cfg, params, num_params);
  if (!bad.empty()) XT_FAIL("safetensors " << st.label() << ": " << bad << " (weights must be finite)");
  return m;
}
}  // namespace

std::vector<float> fit_to_config(const ModelDir& m, const GPTConfig& want) {
  const GPTConfig& have = m.cfg;
  // Compare tensor by tensor in the directory's layout so errors name the tensors of its files.
  const std::vector<LayoutTensor> h = layout_tensors(have, m.layout), w = layout_tensors(want, m.layout);
  const std::vector<ParamTensor> hp = param_layout(have), wp = param_layout(want);
  // the depth first: the tensors (param_layout's, a fixed set per layer) pair up by position only at one depth
  if (have.arch != want.arch)
    XT_FAIL("--init-from: the model is " << to_string(have.arch) << ", expected " << to_string(want.arch) << " (--arch)");
  if (have.tied() != want.tied())
    XT_FAIL("--init-from: the model's head is " << (have.tied() ? "tied" : "untied") << ", expected "
                                                << (want.tied() ? "tied" : "untied") << " (--tie-embeddings)");
  if (have.norm_eps != want.norm_eps || have.rope_theta != want.rope_theta)
    XT_FAIL("--init-from: the model has norm eps " << have.norm_eps << " and rope theta " << have.rope_theta << ", expected "
                                                   << want.norm_eps << " and " << want.rope_theta << " (--norm-eps, --rope-theta)");
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

namespace {
// recorded: the directory's tokenizer as config.json names it, for messages
std::string recorded(const ModelDir& m) {
  return (m.tokenizer_label.empty() ? std::string("the tokenizer") : m.tokenizer_label) + " (fingerprint " +
         hex64(m.tokenizer_fingerprint) + ", its config.json)";
}
}  // namespace

Tokenizer model_dir_tokenizer(const ModelDir& m, const std::string& what, const TokenizerFiles& cache) {
  if (!m.has_tokenizer())
    throw UsageError(what + ": " + m.dir + " holds no tokenizer (no " + kSentencePieceFile + ", " + kTokenizerJsonFile + " or " +
                     kVocabFile + " + " + kMergesFile + "): give the tokenizer options the model was trained with");
  std::string file;
  Tokenizer tok = [&] {
    if (!m.tokenizer_model.empty()) return file = m.tokenizer_model, Tokenizer::from_sentencepiece(m.tokenizer_model);
    TokenizerFiles f;  // load_tokenizer: through the table cache when cache.cache_dir is set
    f.cache_dir = cache.cache_dir, f.cache_dir_origin = cache.cache_dir_origin, f.log_prefix = cache.log_prefix;
    f.encoder_json_given = f.vocab_bpe_given = f.any_given = true;
    if (!m.tokenizer_json.empty()) f.tokenizer_json = file = m.tokenizer_json;
    else f.encoder_json = file = m.vocab_json, f.vocab_bpe = m.merges_txt;
    return load_tokenizer(f);
  }();
  // the export's converted tokenizer.json: the model's fingerprint (kTokenizerJsonShaKey)
  if (file == m.tokenizer_json && !m.tokenizer_json_sha256.empty() && m.tokenizer_fingerprint != 0 &&
      sha256_hex(read_file(file)) == m.tokenizer_json_sha256)
    tok.adopt_fingerprint(m.tokenizer_fingerprint);
  if (m.tokenizer_fingerprint != 0 && tok.fingerprint() != m.tokenizer_fingerprint)
    XT_FAIL(what << ": " << file << " (fingerprint " << hex64(tok.fingerprint()) << ") is not the tokenizer the model was trained with, "
                 << recorded(m) << "; give the run's tokenizer options");
  if (tok.vocab_size() != m.cfg.V)
    XT_FAIL(what << ": " << file << " has " << tok.vocab_size() << " tokens, config.json's vocab_size is " << m.cfg.V);
  return tok;
}

void check_model_tokenizer(const ModelDir& m, const Tokenizer& given, const std::string& what, bool check_files) {
  const uint64_t fp = given.fingerprint();
  const std::string drop = ": drop the tokenizer options to use the directory's tokenizer, or give the ones it was trained with";
  if (m.tokenizer_fingerprint != 0 && m.tokenizer_fingerprint != fp)
    throw UsageError(what + " was trained with " + recorded(m) + "; the tokenizer options give " + given.describe() +
                     " (fingerprint " + hex64(fp) + ")" + drop);
  if (!check_files || m.vocab_json.empty()) return;
  // its tokenizer files must be the same tokenizer (the ids and merges), however the files are written
  const uint64_t files = load_tokenizer("", m.vocab_json, m.merges_txt).fingerprint();
  if (files != fp)
    throw UsageError(what + " was trained with another tokenizer: its vocab.json and merges.txt have fingerprint " + hex64(files) +
                     "; the tokenizer options give " + given.describe() + " (fingerprint " + hex64(fp) + ")" + drop);
}

}  // namespace xtrain
