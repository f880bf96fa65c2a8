// Model directories (src/serve/export.h): export -> load is bitwise in both layouts and both families,
// the hf layout has GPT-2's names and Conv1D orientation or Llama's names with q/k/v and gate/up split
// (any head size, LlamaConfig's head_dim, also in a directory written by hand),
// files saved the way transformers does load, configs xtrain does not compute are refused naming the
// field, mismatches name the tensor with expected and found shapes, and the tokenizer fingerprint an
// export records refuses another tokenizer (two merges swapped) naming both fingerprints, and a model the
// readers refuse (odd head size, kv heads not dividing heads, eps or theta non-finite or out of range) is
// never exported.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include "error_test_util.h"
#include "fixtures.h"
#include "core/digest.h"
#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/rng.h>
#include <xtrain/serve/export.h>
#include "serve/export_commit.h"
#include "test_tokenizer_util.h"

using namespace xtrain;

namespace {
// A byte-level GPT-2 style tokenizer: 256 byte tokens in GPT-2's byte-to-unicode alphabet (Radford et
// al. 2019, encoder.py bytes_to_unicode), <|endoftext|> = 256 and one token per merge after it, in the
// merged tokens' order (a merge "a b" of printable ASCII gives the token "ab"). V = 257 + merges.
struct TinyTokenizer {
  std::string encoder, bpe;
  explicit TinyTokenizer(const test::ScratchDir& d, const std::vector<std::string>& merges = {}, const std::string& tag = "")
      : encoder(d.file("encoder" + tag + ".json")), bpe(d.file("vocab" + tag + ".bpe")) {
    nlohmann::json enc;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : 256 + n++;
      std::string utf8 = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      enc[utf8] = b;
    }
    enc["<|endoftext|>"] = 256;
    std::string text = "#version: 0.2\n";
    std::set<std::string> merged;  // ids in the order of the merged tokens, whatever the merges' order
    for (const std::string& m : merges) {
      merged.insert(std::string(m).erase(m.find(' '), 1));
      text += m + "\n";
    }
    for (const std::string& t : merged) enc[t] = int(enc.size());
    write_file_atomic(encoder, enc.dump());
    write_file_atomic(bpe, text);
  }
};

GPTConfig tiny_config(int kvh = 4, int hs = 8) { return test::model_config(257, 16, 32, 2, 4, kvh, hs, 48); }

// tiny_llama: a Llama of tiny_config's sizes, tied or with its own head, eps and theta off their defaults
GPTConfig tiny_llama(int kvh, bool tied, int hs = 8) {
  GPTConfig c = tiny_config(kvh, hs);
  c.arch = Arch::llama, c.tie_embeddings = tied ? 1 : 0, c.norm_eps = 1e-6f, c.rope_theta = 500000.0f;
  return c;
}

// random_params: every parameter drawn (padding rows of wte and lm_head zero, as init_params leaves them)
std::vector<float> random_params(const GPTConfig& c) {
  const std::vector<ParamTensor> pl = param_layout(c);
  std::vector<float> p(pl.back().offset + pl.back().count);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(normal(42, i));
  for (const ParamTensor& t : pl)
    if (t.spec->rows == ParamDim::Vp && t.count > 0)
      std::fill(p.begin() + t.offset + size_t(c.V) * c.C, p.begin() + t.offset + t.count, 0.0f);
  return p;
}

using test::error_of;
}  // namespace

TEST_CASE("export -> load_model_dir is bitwise in both layouts and both families, and deterministic") {
  test::ScratchDir dir;
  TinyTokenizer tok(dir);
  const uint64_t fingerprint = Tokenizer::from_gpt2_files(tok.encoder, tok.bpe).fingerprint();
  BackendOptions bo;
  bo.device = Device::cpu;
  const std::unique_ptr<Backend> cpu = make_backend(bo);
  int n = 0;
  // Llamas with a head size other than dim / heads (16 and 6 at dim 32, heads 4) go to the hf layout too
  for (const GPTConfig& cfg : {tiny_config(), tiny_config(2, 8), tiny_config(4, 16), tiny_llama(2, false), tiny_llama(4, true),
                               tiny_llama(2, true, 16), tiny_llama(2, false, 6)}) {
    const ModelLayout layout = hf_unsupported(cfg).empty() ? ModelLayout::Hf : ModelLayout::Xtrain;
    CAPTURE(cfg.describe());
    const std::vector<float> params = random_params(cfg);
    const ExportFiles files = make_export(cfg, params, layout, tok.encoder, tok.bpe);
    CHECK(files == make_export(cfg, params, layout, tok.encoder, tok.bpe));
    const std::string out = dir.file("model_" + std::to_string(n++));
    write_export(out, files);
    const ModelDir m = load_model_dir(out);
    CHECK(m.layout == layout);
    CHECK(m.cfg.describe() == cfg.describe());  // the Llama fields (eps, theta, tie) included
    REQUIRE(m.params.size() == params.size());
    CHECK(std::memcmp(m.params.data(), params.data(), 4 * params.size()) == 0);
    CHECK(read_file(m.vocab_json) == read_file(tok.encoder));
    CHECK(read_file(m.merges_txt) == read_file(tok.bpe));
    CHECK(m.tokenizer_fingerprint == fingerprint);  // recorded in config.json
    // into the caller's memory (xtrain_generate's CPU backend): the same bits, the rows no tensor of the file
    // holds (wte's padding) zeroed over what the memory held, ModelDir::params left empty
    std::vector<float> into(params.size() + 1, std::numeric_limits<float>::quiet_NaN());
    GPTConfig asked;
    const ModelDir direct = load_model_dir(out, [&](const GPTConfig& c) { return asked = c, into.data(); });
    CHECK(asked.describe() == cfg.describe());
    CHECK(direct.params.empty());
    CHECK(std::memcmp(into.data(), params.data(), 4 * params.size()) == 0);
    CHECK(std::isnan(into.back()));  // nothing written past num_params
    // uploaded into a backend's parameters (make_weight_upload; xtrain_generate on CUDA): the same bits
    GPT model(cfg, *cpu, 0, /*with_grads=*/false);
    std::fill(model.params(), model.params() + params.size(), std::numeric_limits<float>::quiet_NaN());
    const ModelDir uploaded = load_model_dir(out, [&](const GPTConfig&) { return model.params(); }, *cpu);
    CHECK(uploaded.params.empty());
    CHECK(std::memcmp(model.params(), params.data(), 4 * params.size()) == 0);
  }
}

TEST_CASE("hf layout of a Llama: LlamaForCausalLM's names, q/k/v and gate/up split by rows, lm_head only when untied") {
  const GPTConfig cfg = tiny_llama(2, false);  // C 32, NH 4, KVH 2, HS 8, F 48
  const std::vector<float> params = random_params(cfg);
  std::vector<std::vector<float>> storage;
  const std::vector<StTensorF32> t = export_tensors(cfg, params, ModelLayout::Hf, storage);
  std::map<std::string, const StTensorF32*> by;
  for (const StTensorF32& x : t) by[x.name] = &x;
  std::set<std::string> want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
  for (int l = 0; l < cfg.L; ++l)
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      want.insert("model.layers." + std::to_string(l) + "." + n + ".weight");
  std::set<std::string> got;
  for (const auto& kv : by) got.insert(kv.first);
  CHECK(got == want);
  CHECK(storage.empty());  // nn.Linear is (out, in) as xtrain: nothing transposed
  // shapes [out, in] as PyTorch's Linear; V rows of the embedding and the head
  CHECK(by["model.embed_tokens.weight"]->shape == std::vector<int64_t>{257, 32});
  CHECK(by["lm_head.weight"]->shape == std::vector<int64_t>{257, 32});
  CHECK(by["model.layers.1.self_attn.q_proj.weight"]->shape == std::vector<int64_t>{32, 32});  // NH*HS
  CHECK(by["model.layers.1.self_attn.k_proj.weight"]->shape == std::vector<int64_t>{16, 32});  // KVH*HS
  CHECK(by["model.layers.1.self_attn.v_proj.weight"]->shape == std::vector<int64_t>{16, 32});
  CHECK(by["model.layers.1.self_attn.o_proj.weight"]->shape == std::vector<int64_t>{32, 32});
  CHECK(by["model.layers.1.mlp.gate_proj.weight"]->shape == std::vector<int64_t>{48, 32});
  CHECK(by["model.layers.1.mlp.up_proj.weight"]->shape == std::vector<int64_t>{48, 32});
  CHECK(by["model.layers.1.mlp.down_proj.weight"]->shape == std::vector<int64_t>{32, 48});
  // the rows: q = qkv rows [0, 32), k = [32, 48), v = [48, 64) (QkvLayout); gate = fc rows [0, 48), up = [48, 96)
  const std::vector<ParamTensor> pl = param_layout(cfg);
  const float* qkv = params.data() + pl[layer_param_index(1, kQkvW)].offset;
  const float* fc = params.data() + pl[layer_param_index(1, kFcW)].offset;
  const QkvLayout q = qkv_layout(1, 1, cfg.NH, cfg.KVH, cfg.HS);
  CHECK(by["model.layers.1.self_attn.q_proj.weight"]->data[3 * 32 + 5] == qkv[size_t(q.q_col(0) + 3) * 32 + 5]);
  CHECK(by["model.layers.1.self_attn.k_proj.weight"]->data[9 * 32 + 7] == qkv[size_t(q.k_col(1) + 1) * 32 + 7]);
  CHECK(by["model.layers.1.self_attn.v_proj.weight"]->data[15 * 32 + 31] == qkv[size_t(q.v_col(1) + 7) * 32 + 31]);
  CHECK(by["model.layers.1.mlp.gate_proj.weight"]->data[47 * 32 + 2] == fc[47 * 32 + 2]);
  CHECK(by["model.layers.1.mlp.up_proj.weight"]->data[0 * 32 + 2] == fc[48 * 32 + 2]);
  // tied: no lm_head.weight (transformers' _tied_weights_keys restores it from embed_tokens)
  const GPTConfig tied = tiny_llama(2, true);
  const std::vector<float> tied_params = random_params(tied);
  for (const StTensorF32& x : export_tensors(tied, tied_params, ModelLayout::Hf, storage)) CHECK(x.name != "lm_head.weight");
  // head_dim 16 != hidden_size 32 / 4 heads: LlamaConfig.head_dim sizes q/k/v_proj's rows and o_proj's columns
  const GPTConfig wide = tiny_llama(2, false, 16);
  CHECK(hf_unsupported(wide).empty());
  const std::vector<float> wide_params = random_params(wide);
  std::map<std::string, std::vector<int64_t>> wide_shape;
  for (const StTensorF32& x : export_tensors(wide, wide_params, ModelLayout::Hf, storage)) wide_shape[x.name] = x.shape;
  CHECK(wide_shape["model.layers.0.self_attn.q_proj.weight"] == std::vector<int64_t>{64, 32});  // (NH*head_dim, C)
  CHECK(wide_shape["model.layers.0.self_attn.k_proj.weight"] == std::vector<int64_t>{32, 32});  // (KVH*head_dim, C)
  CHECK(wide_shape["model.layers.0.self_attn.v_proj.weight"] == std::vector<int64_t>{32, 32});
  CHECK(wide_shape["model.layers.0.self_attn.o_proj.weight"] == std::vector<int64_t>{32, 64});  // (C, NH*head_dim)
  CHECK(nlohmann::json::parse(model_config_json(wide, ModelLayout::Hf))["head_dim"] == 16);
  // GPT-2's config has no head size field: GPT2LMHeadModel keeps refusing it
  const GPTConfig gpt2_wide = tiny_config(4, 16);
  CHECK(error_of([&] { export_tensors(gpt2_wide, random_params(gpt2_wide), ModelLayout::Hf, storage); })
            .find("GPT2LMHeadModel layout cannot express this model: --heads 4 x --head-dim 16 != --dim 32: GPT-2's head size is "
                  "n_embd / n_head") != std::string::npos);
  // config.json: what transformers' LlamaConfig reads
  ConfigTokens ids;
  ids.bos_id = 255, ids.eos_id = 256, ids.fingerprint = 0x0123456789abcdefULL;
  const nlohmann::json j = nlohmann::json::parse(model_config_json(cfg, ModelLayout::Hf, ids));
  CHECK(j["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
  CHECK(j["model_type"] == "llama");
  CHECK(j["num_key_value_heads"] == 2);
  CHECK(j["head_dim"] == 8);
  CHECK(j["intermediate_size"] == 48);
  CHECK(j["rms_norm_eps"].get<double>() == 1e-6);  // the shortest decimal of the float, not 9.99999997e-07
  CHECK(j["rope_theta"].get<double>() == 500000.0);
  CHECK(j["tie_word_embeddings"] == false);
  CHECK(j["hidden_act"] == "silu");
  CHECK(j["attention_bias"] == false);
  CHECK(j["mlp_bias"] == false);
  CHECK(j["bos_token_id"] == 255);  // each role its own id, as the tokenizer defines them
  CHECK(j["eos_token_id"] == 256);
  CHECK(!j.contains("pad_token_id"));  // none defined: none written
  CHECK(j[kTokenizerFingerprintKey] == "0123456789abcdef");
}

TEST_CASE("a Llama saved the way transformers does loads; wrong ones name the tensor") {
  test::ScratchDir dir;
  TinyTokenizer tok(dir);
  for (const bool tied : {false, true}) {
    const GPTConfig cfg = tiny_llama(2, tied);
    CAPTURE(tied);
    const std::vector<float> params = random_params(cfg);
    const std::string out = dir.file(tied ? "tied" : "untied");
    write_export(out, make_export(cfg, params, ModelLayout::Hf, tok.encoder, tok.bpe));
    std::vector<std::vector<float>> storage;
    const std::vector<StTensorF32> t = export_tensors(cfg, params, ModelLayout::Hf, storage);
    auto rewrite = [&](const std::vector<StTensorF32>& tensors) {
      write_file_atomic(out + "/" + kModelFile, safetensors_bytes(tensors, {{"format", "pt"}}));
    };
    // older transformers stored the rotary inv_freq buffers; a tied head may be saved as a copy
    std::vector<StTensorF32> saved = t;
    const std::vector<float> inv_freq(4, 0.5f);
    saved.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {4}, inv_freq.data()});
    if (tied) saved.push_back({"lm_head.weight", {257, 32}, params.data()});
    rewrite(saved);
    CHECK(std::memcmp(load_model_dir(out).params.data(), params.data(), 4 * params.size()) == 0);
    if (tied) {
      saved.back().data = params.data() + 1;
      rewrite(saved);
      CHECK(error_of([&] { load_model_dir(out); }).find("lm_head.weight differs from the token embedding") != std::string::npos);
    }
    std::vector<StTensorF32> missing;
    for (const StTensorF32& x : t)
      if (x.name != "model.layers.1.self_attn.k_proj.weight") missing.push_back(x);
    rewrite(missing);
    CHECK(error_of([&] { load_model_dir(out); }) ==
          "safetensors " + out + "/" + kModelFile + ": tensor model.layers.1.self_attn.k_proj.weight is missing");
    std::vector<StTensorF32> wrong = t;
    for (StTensorF32& x : wrong)
      if (x.name == "model.layers.0.mlp.down_proj.weight") x.shape = {48, 32};
    rewrite(wrong);
    CHECK(error_of([&] { load_model_dir(out); }).find("tensor model.layers.0.mlp.down_proj.weight: expected shape [32, 48], found [48, 32]") !=
          std::string::npos);
    std::vector<StTensorF32> extra = t;
    extra.push_back({"model.layers.0.self_attn.q_proj.bias", {32}, params.data()});
    rewrite(extra);
    CHECK(error_of([&] { load_model_dir(out); }).find("unexpected tensor model.layers.0.self_attn.q_proj.bias") != std::string::npos);
  }
}

TEST_CASE("config.json: Llama variants xtrain does not compute are refused naming the field") {
  test::ScratchDir dir;
  auto config_error = [&](const std::string& text) {
    write_file_atomic(dir.file("config.json"), text);
    return error_of([&] { read_model_config(dir.path.string()); });
  };
  const std::string base = R"("model_type":"llama","vocab_size":257,"hidden_size":32,"intermediate_size":48,)"
                           R"("num_hidden_layers":2,"num_attention_heads":4)";
  // LlamaConfig's defaults for absent fields
  write_file_atomic(dir.file("config.json"), "{" + base + "}");
  const GPTConfig d = read_model_config(dir.path.string());
  CHECK(d.llama());
  CHECK(d.KVH == 4);
  CHECK(d.HS == 8);
  CHECK(d.norm_eps == 1e-6f);
  CHECK(d.rope_theta == 10000.0f);
  CHECK(!d.tied());
  CHECK(d.maxT == 2048);
  // transformers 5 keeps rope_theta in rope_parameters
  write_file_atomic(dir.file("config.json"), "{" + base + R"(,"rope_parameters":{"rope_type":"default","rope_theta":500000.0}})");
  CHECK(read_model_config(dir.path.string()).rope_theta == 500000.0f);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0})", "rope_scaling"},
      {R"(,"rope_scaling":{"type":"linear","factor":2.0})", "rope_scaling"},
      {R"(,"rope_parameters":{"rope_type":"yarn","rope_theta":10000.0})", "rope_parameters"},
      {R"(,"attention_bias":true)", "attention_bias true is not supported"},
      {R"(,"mlp_bias":true)", "mlp_bias true is not supported"},
      {R"(,"hidden_act":"gelu")", "hidden_act gelu is not supported"},
      {R"(,"head_dim":0)", "head_dim must be an integer in [1, 1048576], found 0"},
      {R"(,"head_dim":"16")", "head_dim must be an integer in [1, 1048576], found \"16\""},
      {R"(,"head_dim":7)", "--head-dim must be even with --arch llama"},
      {R"(,"rms_norm_eps":0)", "rms_norm_eps must be a positive number"},
      {R"(,"rope_theta":"big")", "rope_theta must be a positive number"},
      {R"(,"num_key_value_heads":3)", "the model is invalid: --kv-heads (3) must divide"},
      {R"(,"xtrain_tokenizer_fingerprint":"12")", "xtrain_tokenizer_fingerprint must be 16 hex digits"},
      // zero is what "none recorded" is held as: read, it would switch the tokenizer check off
      {R"(,"xtrain_tokenizer_fingerprint":"0000000000000000")", "xtrain_tokenizer_fingerprint is 0000000000000000, which no tokenizer has"},
      {R"(,"tie_word_embeddings":"yes")", "tie_word_embeddings has the wrong JSON type, found \"yes\""},
      {R"(,"attention_bias":"false")", "attention_bias has the wrong JSON type"},
      {R"(,"hidden_act":7)", "hidden_act has the wrong JSON type"},
  };
  for (const auto& edit : refused) {
    const std::string& field = edit.first;  // no structured binding: CAPTURE's lambda may not capture one (clang 14)
    const std::string& why = edit.second;
    CAPTURE(field);
    const std::string e = config_error("{" + base + field + "}");
    CHECK(e.find(why) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);  // one line
  }
  CHECK(config_error(R"({"model_type":"llama","vocab_size":257})").find("missing hidden_size") != std::string::npos);
  // head_dim: LlamaConfig's field, any even size; null is absent (hidden_size / num_attention_heads)
  write_file_atomic(dir.file("config.json"), "{" + base + R"(,"head_dim":16})");
  CHECK(read_model_config(dir.path.string()).HS == 16);
  write_file_atomic(dir.file("config.json"), "{" + base + R"(,"head_dim":null})");
  CHECK(read_model_config(dir.path.string()).HS == 8);
  const std::string odd_width = R"("model_type":"llama","vocab_size":257,"hidden_size":30,"intermediate_size":48,)"
                                R"("num_hidden_layers":2,"num_attention_heads":4)";
  write_file_atomic(dir.file("config.json"), "{" + odd_width + R"(,"head_dim":8})");
  CHECK(read_model_config(dir.path.string()).HS == 8);  // 30 / 4 is no head size, but head_dim gives one
  CHECK(config_error("{" + odd_width + "}").find("hidden_size 30 is not divisible by num_attention_heads 4 and there is no head_dim") !=
        std::string::npos);
}

TEST_CASE("a LlamaForCausalLM directory with head_dim != hidden_size / heads, written by hand, loads its rows where the model reads them") {
  // transformers' shapes (modeling_llama.py, head_dim 16, hidden 32, 4 heads, 2 kv heads): q_proj
  // (NH*head_dim, C) = (64, 32), k/v_proj (KVH*head_dim, C) = (32, 32), o_proj (C, NH*head_dim) = (32, 64)
  test::ScratchDir dir;
  write_file_atomic(dir.file("config.json"),
                    R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","vocab_size":257,"hidden_size":32,)"
                    R"("intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,)"
                    R"("head_dim":16,"max_position_embeddings":16,"tie_word_embeddings":true})");
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {257, 32}},
      {"model.norm.weight", {32}},
      {"model.layers.0.input_layernorm.weight", {32}},
      {"model.layers.0.post_attention_layernorm.weight", {32}},
      {"model.layers.0.self_attn.q_proj.weight", {64, 32}},
      {"model.layers.0.self_attn.k_proj.weight", {32, 32}},
      {"model.layers.0.self_attn.v_proj.weight", {32, 32}},
      {"model.layers.0.self_attn.o_proj.weight", {32, 64}},
      {"model.layers.0.mlp.gate_proj.weight", {48, 32}},
      {"model.layers.0.mlp.up_proj.weight", {48, 32}},
      {"model.layers.0.mlp.down_proj.weight", {32, 48}}};
  // every element its own value: tensor k's element i is 10000 k + i (exact in fp32)
  std::vector<std::vector<float>> values;
  std::vector<StTensorF32> tensors;
  for (size_t k = 0; k < shapes.size(); ++k) {
    size_t n = 1;
    for (int64_t d : shapes[k].second) n *= size_t(d);
    values.emplace_back(n);
    for (size_t i = 0; i < n; ++i) values.back()[i] = float(10000 * k + i);
  }
  for (size_t k = 0; k < shapes.size(); ++k) tensors.push_back({shapes[k].first, shapes[k].second, values[k].data()});
  write_file_atomic(dir.file(kModelFile), safetensors_bytes(tensors, {{"format", "pt"}}));
  const ModelDir m = load_model_dir(dir.path.string());
  CHECK(m.layout == ModelLayout::Hf);
  CHECK(m.cfg.NH == 4);
  CHECK(m.cfg.KVH == 2);
  CHECK(m.cfg.HS == 16);
  const std::vector<ParamTensor> pl = param_layout(m.cfg);
  const float* qkv = m.params.data() + pl[layer_param_index(0, kQkvW)].offset;   // ((NH + 2 KVH) HS, C) = (128, 32)
  const float* proj = m.params.data() + pl[layer_param_index(0, kAttProjW)].offset;  // (C, NH HS) = (32, 64)
  const QkvLayout q = qkv_layout(1, 1, 4, 2, 16);
  // query head 3, dim 5 is q_proj row 3*16+5; key and value head 1, dim 15 are k/v_proj row 1*16+15
  CHECK(qkv[size_t(q.q_col(3) + 5) * 32 + 7] == float(10000 * 4 + (3 * 16 + 5) * 32 + 7));
  CHECK(qkv[size_t(q.k_col(1) + 15) * 32 + 0] == float(10000 * 5 + (1 * 16 + 15) * 32 + 0));
  CHECK(qkv[size_t(q.v_col(1) + 15) * 32 + 31] == float(10000 * 6 + (1 * 16 + 15) * 32 + 31));
  CHECK(q.v_col(1) + 16 == pl[layer_param_index(0, kQkvW)].shape[0]);  // v is the last row block
  CHECK(proj[31 * 64 + 63] == float(10000 * 7 + 31 * 64 + 63));  // o_proj's last element: no transpose
  CHECK(proj[1 * 64 + 0] == float(10000 * 7 + 64));
}

TEST_CASE("the fingerprint an export records refuses a same-size tokenizer with two merges swapped, naming both") {
  test::ScratchDir dir;
  const TinyTokenizer tok(dir, {"a b", "c d"}, "1"), swapped(dir, {"c d", "a b"}, "2");
  const uint64_t fp = Tokenizer::from_gpt2_files(tok.encoder, tok.bpe).fingerprint();
  const uint64_t fp_swapped = Tokenizer::from_gpt2_files(swapped.encoder, swapped.bpe).fingerprint();
  REQUIRE(Tokenizer::from_gpt2_files(swapped.encoder, swapped.bpe).vocab_size() == 259);
  REQUIRE(fp != fp_swapped);
  GPTConfig cfg = tiny_llama(2, false);
  cfg.V = 259;
  const std::string out = dir.file("m");
  write_export(out, make_export(cfg, random_params(cfg), ModelLayout::Hf, tok.encoder, tok.bpe, fp));
  const ModelDir m = load_model_dir(out);
  CHECK(m.tokenizer_fingerprint == fp);
  const Tokenizer mine = Tokenizer::from_gpt2_files(tok.encoder, tok.bpe), theirs = Tokenizer::from_gpt2_files(swapped.encoder, swapped.bpe);
  check_model_tokenizer(m, mine, "--model " + out);  // the model's own: accepted
  std::string e;
  try {
    check_model_tokenizer(m, theirs, "--model " + out);
  } catch (const UsageError& u) {
    e = u.what();
  }
  CHECK(e == "--model " + out + " was trained with GPT-2 BPE (fingerprint " + hex64(fp) +
                 ", its config.json); the tokenizer options give " + theirs.describe() + " (fingerprint " + hex64(fp_swapped) +
                 "): drop the tokenizer options to use the directory's tokenizer, or give the ones it was trained with");
  // with no option, the directory's own tokenizer: tokenizer.json, the model's fingerprint
  const Tokenizer own = model_dir_tokenizer(m, "--model " + out);
  CHECK(own.kind() == Tokenizer::Kind::HfJson);
  CHECK(own.fingerprint() == fp);
  // through the tokenizer table cache: the first start writes the tokenizer.json's entry, the next reads it
  TokenizerFiles cache;
  cache.cache_dir = dir.file("tables");
  auto entries = [&] {
    return std::distance(std::filesystem::directory_iterator(cache.cache_dir), std::filesystem::directory_iterator());
  };
  for (int start = 0; start < 2; ++start) {
    const Tokenizer cached = model_dir_tokenizer(m, "--model " + out, cache);
    CHECK(cached.kind() == Tokenizer::Kind::HfJson);
    CHECK(cached.fingerprint() == fp);
    CHECK(cached.encode("abcd dcba") == own.encode("abcd dcba"));
    CHECK(entries() == 1);
  }
  // the directory's own merges.txt swapped under a recorded fingerprint: the files are named
  write_file_atomic(out + "/" + kMergesFile, read_file(swapped.bpe));
  try {
    check_model_tokenizer(load_model_dir(out), mine, "--init-from " + out);
  } catch (const UsageError& u) {
    e = u.what();
  }
  CHECK(e.find("its vocab.json and merges.txt have fingerprint " + hex64(fp_swapped) + "; the tokenizer options give " + mine.describe() +
               " (fingerprint " + hex64(fp) + ")") != std::string::npos);
  // its tokenizer.json replaced by another tokenizer's: refused naming the file and both fingerprints
  write_file_atomic(out + "/" + kTokenizerJsonFile, theirs.hf_tokenizer_json());
  CHECK(error_of([&] { model_dir_tokenizer(load_model_dir(out), "--model " + out); })
            .find(out + "/tokenizer.json (fingerprint " + hex64(fp_swapped) + ") is not the tokenizer the model was trained with, GPT-2 BPE (fingerprint " +
                  hex64(fp)) != std::string::npos);
  CHECK(error_of([&] { model_dir_tokenizer(load_model_dir(out), "--model " + out, cache); })  // cached: the same refusal
            .find(out + "/tokenizer.json (fingerprint " + hex64(fp_swapped) + ") is not the tokenizer the model was trained with") !=
        std::string::npos);
  CHECK(entries() == 2);  // its own entry: other source bytes
  // another tokenizer at export time: refused naming both, a usage error (exit 2) as at --init-from
  // (check_model_tokenizer above) and in xtrain_generate and xtrain_eval
  CHECK(error_of([&] { make_export(cfg, random_params(cfg), ModelLayout::Hf, swapped.encoder, swapped.bpe, fp); })
            .find("(fingerprint " + hex64(fp_swapped) + ") is not the one the model was trained with (" + hex64(fp) + ")") !=
        std::string::npos);
  CHECK_THROWS_AS(make_export(cfg, random_params(cfg), ModelLayout::Hf, swapped.encoder, swapped.bpe, fp), UsageError);
  // a tokenizer of another size than the model's vocabulary (a checkpoint that records no fingerprint): a usage
  // error too, as xtrain_generate and xtrain_eval refuse it
  GPTConfig wider = cfg;
  wider.V = cfg.V + 1;
  CHECK_THROWS_AS(make_export(wider, random_params(wider), ModelLayout::Hf, swapped.encoder, swapped.bpe, 0), UsageError);
}

TEST_CASE("hf layout: GPT-2 names, Conv1D (in, out) weights, V rows of wte, no lm_head") {
  const GPTConfig cfg = tiny_config();
  const std::vector<float> params = random_params(cfg);
  std::vector<std::vector<float>> storage;
  const std::vector<StTensorF32> t = export_tensors(cfg, params, ModelLayout::Hf, storage);
  CHECK(t.size() == 2 + 12 * 2 + 2);
  std::map<std::string, const StTensorF32*> by;
  for (const StTensorF32& x : t) by[x.name] = &x;
  CHECK(by.count("lm_head.weight") == 0);  // tied: transformers' _tied_weights_keys restores it
  REQUIRE(by.count("transformer.h.1.attn.c_attn.weight"));
  const StTensorF32& qkv = *by["transformer.h.1.attn.c_attn.weight"];
  CHECK(qkv.shape == std::vector<int64_t>{32, 96});  // (C, 3C)
  const std::vector<ParamTensor> pl = param_layout(cfg);
  const ParamTensor& src = pl[2 + 12 + 2];  // h1.attn.qkv.w (3C, C)
  REQUIRE(src.name == "h1.attn.qkv.w");
  CHECK(qkv.data[5 * 96 + 70] == params[src.offset + 70 * 32 + 5]);  // file [in=5][out=70] = xtrain [70][5]
  CHECK(by["transformer.wte.weight"]->shape == std::vector<int64_t>{257, 32});
  CHECK(by["transformer.h.0.mlp.c_fc.weight"]->shape == std::vector<int64_t>{32, 48});
  CHECK(by["transformer.h.0.mlp.c_proj.weight"]->shape == std::vector<int64_t>{48, 32});
  CHECK(by.count("transformer.ln_f.bias") == 1);
  const std::string gqa = error_of([&] { export_tensors(tiny_config(2, 8), random_params(tiny_config(2, 8)), ModelLayout::Hf, storage); });
  CHECK(gqa.find("grouped-query") != std::string::npos);
  const std::string hs = error_of([&] { export_tensors(tiny_config(4, 16), random_params(tiny_config(4, 16)), ModelLayout::Hf, storage); });
  CHECK(hs.find("head size is n_embd / n_head") != std::string::npos);
}

TEST_CASE("files saved the way transformers does load; wrong ones name the tensor") {
  test::ScratchDir dir;
  TinyTokenizer tok(dir);
  const GPTConfig cfg = tiny_config();
  const std::vector<float> params = random_params(cfg);
  const std::string out = dir.file("m");
  write_export(out, make_export(cfg, params, ModelLayout::Hf, tok.encoder, tok.bpe));
  std::vector<std::vector<float>> storage;
  std::vector<StTensorF32> t = export_tensors(cfg, params, ModelLayout::Hf, storage);
  auto rewrite = [&](std::vector<StTensorF32> tensors) {
    write_file_atomic(out + "/" + kModelFile, safetensors_bytes(std::move(tensors), {{"format", "pt"}}));
  };
  // Hub-style: GPT2Model names without "transformer.", causal-mask buffers, an explicit tied lm_head
  std::vector<StTensorF32> hub;
  const std::vector<float> mask(16 * 16, 1.0f);
  for (const StTensorF32& x : t) hub.push_back({x.name.substr(12), x.shape, x.data});
  hub.push_back({"h.0.attn.bias", {1, 1, 16, 16}, mask.data()});
  hub.push_back({"lm_head.weight", {257, 32}, params.data()});
  rewrite(hub);
  CHECK(std::memcmp(load_model_dir(out).params.data(), params.data(), 4 * params.size()) == 0);

  hub.back().data = params.data() + 1;  // an untied head
  rewrite(hub);
  CHECK(error_of([&] { load_model_dir(out); }).find("lm_head.weight differs") != std::string::npos);
  std::vector<StTensorF32> extra = t;
  extra.push_back({"transformer.h.9.mlp.c_fc.bias", {1}, params.data()});
  rewrite(extra);
  CHECK(error_of([&] { load_model_dir(out); }).find("unexpected tensor transformer.h.9.mlp.c_fc.bias") != std::string::npos);
  std::vector<StTensorF32> missing(t.begin() + 1, t.end());
  rewrite(missing);
  CHECK(error_of([&] { load_model_dir(out); }).find("is missing") != std::string::npos);
  std::vector<StTensorF32> wrong = t;
  for (StTensorF32& x : wrong)
    if (x.name == "transformer.h.0.mlp.c_fc.weight") x.shape = {48, 32};  // xtrain's orientation
  rewrite(wrong);
  CHECK(error_of([&] { load_model_dir(out); }).find("tensor transformer.h.0.mlp.c_fc.weight: expected shape [32, 48], found [48, 32]") !=
        std::string::npos);

  rewrite(t);
  const ModelDir m = load_model_dir(out);
  GPTConfig want = cfg;
  want.maxT = 8;  // fewer positions: the first rows of wpe
  const std::vector<float> fit = fit_to_config(m, want);
  CHECK(fit.size() == params.size() - 8 * 32);
  CHECK(std::memcmp(fit.data(), params.data(), 4 * (size_t(cfg.Vp()) * 32 + 8 * 32)) == 0);  // wte, wpe rows 0..7
  want = cfg;
  want.C = 64, want.HS = 16;
  CHECK(error_of([&] { fit_to_config(m, want); }).find("tensor transformer.wte.weight: expected shape [257, 64], found [257, 32]") !=
        std::string::npos);
  want = cfg;
  want.NH = 2, want.KVH = 2, want.HS = 16;  // same shapes, other heads
  CHECK(error_of([&] { fit_to_config(m, want); }).find("4 heads") != std::string::npos);
}

TEST_CASE("config.json: GPT-2 variants xtrain does not compute are refused") {
  test::ScratchDir dir;
  auto config_error = [&](const std::string& text) {
    write_file_atomic(dir.file("config.json"), text);
    return error_of([&] { read_model_config(dir.path.string()); });
  };
  const std::string base = R"("model_type":"gpt2","vocab_size":257,"n_positions":16,"n_embd":32,"n_layer":2,"n_head":4)";
  write_file_atomic(dir.file("config.json"), "{" + base + R"(,"n_inner":null})");
  CHECK(read_model_config(dir.path.string()).F == 128);  // transformers: n_inner null = 4 x n_embd
  CHECK(config_error("{" + base + R"(,"activation_function":"relu"})").find("activation_function relu") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"layer_norm_epsilon":1e-6})").find("layer_norm_epsilon") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"tie_word_embeddings":false})").find("tie_word_embeddings") != std::string::npos);
  CHECK(config_error(R"({"model_type":"bert"})").find("model_type \"bert\" is none of gpt2, llama, xtrain-gpt") != std::string::npos);
  CHECK(config_error(R"({"model_type":"gpt2","vocab_size":257})").find("missing n_positions") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"n_inner":-3})").find("n_inner must be an integer") != std::string::npos);
  CHECK(config_error("not json").find("not valid JSON") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"activation_function":null})").find("activation_function has the wrong JSON type, found null") != std::string::npos);
}

TEST_CASE("special-token ids are tokens of the vocabulary: checked on writing config.json and on reading it and generation_config.json") {
  // check_model_config with the ids, the one check of writers and readers
  const GPTConfig c = tiny_llama(2, false);  // vocab_size 257
  const std::string range = " is not a token id of the vocabulary (vocab_size 257: ids 0 to 256)";
  ConfigTokens past;
  past.bos_id = 257;
  ConfigTokens negative;
  negative.eos_id = 1, negative.pad_id = -2;
  for (ModelLayout layout : {ModelLayout::Hf, ModelLayout::Xtrain}) {
    CHECK(error_of([&] { model_config_json(c, layout, past); }) == "config.json: not writing the model: bos_token_id 257" + range);
    CHECK(error_of([&] { model_config_json(c, layout, negative); }) == "config.json: not writing the model: pad_token_id -2" + range);
  }
  ConfigTokens good;
  good.bos_id = 0, good.eos_id = 256;
  CHECK(nlohmann::json::parse(model_config_json(c, ModelLayout::Hf, good))["eos_token_id"] == 256);

  test::ScratchDir dir;
  const std::string base = R"({"model_type":"gpt2","vocab_size":257,"n_positions":16,"n_embd":32,"n_layer":2,"n_head":4)";
  const std::string config = dir.file("config.json"), gen = dir.file("generation_config.json");
  auto read_error = [&](const std::string& ids, const std::string& gen_ids) {
    write_file_atomic(config, base + ids + "}");
    std::filesystem::remove(gen);
    if (!gen_ids.empty()) write_file_atomic(gen, "{" + gen_ids + "}");
    return error_of([&] { read_model_config(dir.path.string()); });
  };
  CHECK(read_error(R"(,"bos_token_id":50256,"eos_token_id":50256)", "") == config + ": the model is invalid: bos_token_id 50256" + range);
  CHECK(read_error(R"(,"eos_token_id":-1)", "") == config + ": the model is invalid: eos_token_id -1" + range);
  CHECK(read_error(R"(,"eos_token_id":[1,2,257])", "") == config + ": the model is invalid: eos_token_id[2] 257" + range);
  CHECK(read_error(R"(,"pad_token_id":"0")", "") == config + ": pad_token_id must be an integer token id (or a list of them), found \"0\"");
  CHECK(read_error(R"(,"eos_token_id":18446744073709551615)", "") ==
        config + ": eos_token_id 18446744073709551615 is not a token id of the vocabulary");
  CHECK(read_error(R"(,"bos_token_id":256,"pad_token_id":null)", R"("eos_token_id":[256,300])") ==
        gen + ": the model's special tokens are invalid: eos_token_id[1] 300" + range);
  CHECK(read_error(R"(,"bos_token_id":256,"eos_token_id":0)", R"("eos_token_id":[256,0],"pad_token_id":null)") == "(no error)");
  // pad_token_id -1: "no pad token" in older Hugging Face config.json files, in either file; only -1, only for pad
  CHECK(read_error(R"(,"eos_token_id":256,"pad_token_id":-1)", R"("pad_token_id":-1)") == "(no error)");
  CHECK(read_error(R"(,"pad_token_id":-2)", "") == config + ": the model is invalid: pad_token_id -2" + range);
  CHECK(read_error(R"(,"bos_token_id":-1)", "") == config + ": the model is invalid: bos_token_id -1" + range);
  CHECK(read_error(R"(,"pad_token_id":[-1])", "") == config + ": the model is invalid: pad_token_id[0] -1" + range);
  // 2^64-1 is an unsigned JSON number that wraps to -1 through long long: an id out of range, not "no pad"
  CHECK(read_error(R"(,"pad_token_id":18446744073709551615)", "") ==
        config + ": pad_token_id 18446744073709551615 is not a token id of the vocabulary");
  CHECK(read_error("", R"("pad_token_id":18446744073709551615)") ==
        gen + ": pad_token_id 18446744073709551615 is not a token id of the vocabulary");
}

TEST_CASE("a model the readers refuse is never exported: config.json gets no null for a non-finite eps or theta") {
  // the configurations a damaged checkpoint can carry (its header behind a valid checksum), each refused by
  // check_model_config, the one check of every loader (checkpoint, config.json) and writer (export)
  test::ScratchDir dir;
  const TinyTokenizer tok(dir);
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad {
    const char* what;
    std::function<void(GPTConfig&)> edit;
    const char* why;
  };
  const std::vector<Bad> bad = {
      {"head size 15", [](GPTConfig& c) { c.HS = 15; }, "--head-dim must be even with --arch llama"},
      {"head size 1", [](GPTConfig& c) { c.HS = 1; }, "--head-dim must be even with --arch llama"},
      {"kv heads 3 of 4", [](GPTConfig& c) { c.KVH = 3; }, "--kv-heads (3) must divide --heads (4)"},
      {"eps +inf", [&](GPTConfig& c) { c.norm_eps = inf; }, "--norm-eps must be in"},
      {"eps 1e30", [](GPTConfig& c) { c.norm_eps = 1e30f; }, "--norm-eps must be in"},
      {"eps 1e-30", [](GPTConfig& c) { c.norm_eps = 1e-30f; }, "--norm-eps must be in"},
      {"eps nan", [](GPTConfig& c) { c.norm_eps = std::nanf(""); }, "--norm-eps must be in"},
      {"theta +inf", [&](GPTConfig& c) { c.rope_theta = inf; }, "--rope-theta must be finite and > 1"},
      {"theta 0.5", [](GPTConfig& c) { c.rope_theta = 0.5f; }, "--rope-theta must be finite and > 1"},
      {"vocabulary 2^30", [](GPTConfig& c) { c.V = 1 << 30; }, "vocabulary size 1073741824 is too large"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    GPTConfig c = tiny_llama(2, false);
    b.edit(c);
    const std::vector<float> params(c.V < (1 << 20) ? c.num_params() : 1, 0.5f);
    for (ModelLayout layout : {ModelLayout::Hf, ModelLayout::Xtrain}) {
      const std::string json_error = error_of([&] { model_config_json(c, layout); });
      CHECK(json_error.find(b.why) != std::string::npos);
      const std::string export_error =
          error_of([&] { make_export(c, params, layout, tok.encoder, tok.bpe, 0); });
      CHECK(export_error.find(b.why) != std::string::npos);
      CHECK(export_error.find("not exporting") != std::string::npos);
      CHECK(export_error.find('\n') == std::string::npos);
    }
  }
  // and the good one still writes its numbers
  const GPTConfig good = tiny_llama(2, false);
  const nlohmann::json j = nlohmann::json::parse(model_config_json(good, ModelLayout::Xtrain));
  CHECK(j["rms_norm_eps"].get<double>() == 1e-6);
  CHECK(j["rope_theta"].get<double>() == 500000.0);
}
