// Model directories (src/serve/export.h): export -> load is bitwise in both layouts, the hf
// layout has GPT-2's names and Conv1D orientation, files saved the way transformers does load, and
// mismatches name the tensor with expected and found shapes.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/io.h"
#include "core/rng.h"
#include "serve/export.h"
#include "test_tokenizer_util.h"

using namespace xtrain;

namespace {
// A byte-level GPT-2 style tokenizer with no merges: 256 byte tokens in GPT-2's byte-to-unicode
// alphabet (Radford et al. 2019, encoder.py bytes_to_unicode) and <|endoftext|> = 256. V = 257.
struct TinyTokenizer {
  std::string encoder, bpe;
  explicit TinyTokenizer(const test::ScratchDir& d) : encoder(d.file("encoder.json")), bpe(d.file("vocab.bpe")) {
    nlohmann::json enc;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int cp = printable ? b : 256 + n++;
      std::string utf8 = cp < 0x80 ? std::string(1, char(cp)) : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
      enc[utf8] = b;
    }
    enc["<|endoftext|>"] = 256;
    write_file_atomic(encoder, enc.dump());
    write_file_atomic(bpe, "#version: 0.2\n");
  }
};

GPTConfig tiny_config(int kvh = 4, int hs = 8) {
  GPTConfig c;
  c.V = 257, c.maxT = 16, c.C = 32, c.L = 2, c.NH = 4, c.KVH = kvh, c.HS = hs, c.F = 48;
  return c;
}

// random_params: every parameter drawn (padding rows of wte zero, as init_params leaves them)
std::vector<float> random_params(const GPTConfig& c) {
  const std::vector<ParamTensor> pl = param_layout(c);
  std::vector<float> p(pl.back().offset + pl.back().count);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>(normal(42, i));
  std::fill(p.begin() + static_cast<size_t>(c.V) * c.C, p.begin() + pl[0].count, 0.0f);
  return p;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("export -> load_model_dir is bitwise in both layouts, and deterministic") {
  test::ScratchDir dir;
  TinyTokenizer tok(dir);
  for (const GPTConfig& cfg : {tiny_config(), tiny_config(2, 8), tiny_config(4, 16)}) {
    const ModelLayout layout = hf_unsupported(cfg).empty() ? ModelLayout::Hf : ModelLayout::Xtrain;
    CAPTURE(cfg.describe());
    const std::vector<float> params = random_params(cfg);
    const ExportFiles files = make_export(cfg, params, layout, tok.encoder, tok.bpe);
    CHECK(files == make_export(cfg, params, layout, tok.encoder, tok.bpe));
    const std::string out = dir.file(std::string("model_") + layout_name(layout) + std::to_string(cfg.KVH) + std::to_string(cfg.HS));
    write_export(out, files);
    const ModelDir m = load_model_dir(out);
    CHECK(m.layout == layout);
    CHECK(m.cfg.describe() == cfg.describe());
    REQUIRE(m.params.size() == params.size());
    CHECK(std::memcmp(m.params.data(), params.data(), 4 * params.size()) == 0);
    CHECK(read_file(m.vocab_json) == read_file(tok.encoder));
    CHECK(read_file(m.merges_txt) == read_file(tok.bpe));
  }
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
  CHECK(config_error(R"({"model_type":"llama"})").find("model_type \"llama\"") != std::string::npos);
  CHECK(config_error(R"({"model_type":"gpt2","vocab_size":257})").find("missing n_positions") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"n_inner":-3})").find("n_inner must be an integer") != std::string::npos);
  CHECK(config_error("not json").find("not valid JSON") != std::string::npos);
  CHECK(config_error("{" + base + R"(,"activation_function":null})").find("wrong type") != std::string::npos);
}
