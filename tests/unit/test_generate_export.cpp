// Generation from a checkpoint equals generation from its export: greedy, 5 prompts x 64 tokens, for a
// GPT-2-shaped model (hf layout), a grouped-query one (xtrain layout) and Llamas (hf layout,
// LlamaForCausalLM: untied with grouped-query attention, and tied), through the loaders that
// xtrain_generate uses (load_checkpoint, load_model_dir). Needs the GPT-2 BPE files of data/gpt2
// (scripts/setup.sh); exits 77 (skipped) without them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "fixtures.h"
#include <xtrain/core/data_dir.h>
#include <xtrain/core/rng.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/model/inference.h>
#include <xtrain/serve/export.h>
#include "serve/export_commit.h"
#include <xtrain/serve/generate.h>
#include <xtrain/checkpoint/checkpoint.h>

using namespace xtrain;
namespace fs = std::filesystem;

namespace {

const std::string kEncoder = xtrain::default_data_file("gpt2/encoder.json");
const std::string kVocabBpe = xtrain::default_data_file("gpt2/vocab.bpe");
const std::vector<std::string> kPrompts = {"The jury said", "In the beginning", "Hello, world!",
                                           "He asked whether", "Numbers: 1, 2, 3,"};
constexpr int kNewTokens = 64;

// greedy: kNewTokens greedy tokens per prompt (no end-of-text stop) from host parameters.
std::vector<std::vector<int32_t>> greedy(const GPTConfig& cfg, const std::vector<float>& params, const Tokenizer& tok) {
  auto be = make_cpu_backend();
  GPT model(cfg, *be);
  REQUIRE(params.size() == model.num_params());
  be->copy_to_device(model.params(), params.data(), params.size() * sizeof(float));
  Decoder dec(model, 1);
  GenerateOptions opts;
  opts.max_new_tokens = kNewTokens;
  opts.sampler.temperature = 0.0f;
  std::vector<std::vector<int32_t>> out;
  for (const std::string& p : kPrompts) out.push_back(generate(dec, {tok.encode(p)}, opts, nullptr)[0]);
  return out;
}

void check_round_trip(const GPTConfig& cfg, ModelLayout layout) {
  const Tokenizer tok = Tokenizer::from_gpt2_files(kEncoder, kVocabBpe);
  const fs::path dir = fs::temp_directory_path() / ("xtrain_gen_export_" + std::to_string(getpid()));
  fs::create_directories(dir);
  // random parameters: blocks N(0, 0.3), embeddings N(0, 1) (padding rows of wte zero). Position
  // embeddings as large as token embeddings keep the current token from dominating the tied head
  // (greedy would repeat it) and keep the blocks from one fixed answer, so the continuations vary.
  CheckpointState st;
  st.meta.model = cfg;
  st.meta.tokenizer_fingerprint = tok.fingerprint();
  st.meta.batch = 1, st.meta.total_steps = 1;  // as a training run writes them (the loader checks their range)
  st.meta.num_params = param_layout(cfg).back().offset + param_layout(cfg).back().count;
  st.params.resize(st.meta.num_params);
  // (Llama has no wpe; its own head, when untied, is drawn as the embedding is)
  for (const ParamTensor& t : param_layout(cfg)) {
    const bool embedding = t.spec->rows == ParamDim::Vp || t.spec->rows == ParamDim::maxT;  // wte, wpe, lm_head
    for (size_t i = t.offset; i < t.offset + t.count; ++i) st.params[i] = float((embedding ? 1.0 : 0.3) * normal(21, i));
    if (t.spec->rows == ParamDim::Vp && t.count > 0)
      std::fill(st.params.begin() + t.offset + size_t(cfg.V) * cfg.C, st.params.begin() + t.offset + t.count, 0.0f);
  }
  st.m.assign(st.params.size(), 0.0f), st.v.assign(st.params.size(), 0.0f);
  const std::string ckpt = (dir / "model.ckpt").string();
  save_checkpoint(ckpt, st);
  write_export((dir / "export").string(), make_export(cfg, st.params, layout, kEncoder, kVocabBpe, tok.fingerprint()));

  const CheckpointState loaded = load_checkpoint(ckpt);
  const ModelDir exported = load_model_dir((dir / "export").string());
  CHECK(exported.layout == layout);
  CHECK(exported.cfg.describe() == cfg.describe());
  const auto from_ckpt = greedy(loaded.meta.model, loaded.params, tok);
  const auto from_export = greedy(exported.cfg, exported.params, tok);
  std::set<int32_t> distinct;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    CAPTURE(kPrompts[i]);
    REQUIRE(from_ckpt[i].size() == size_t(kNewTokens));
    CHECK(from_ckpt[i] == from_export[i]);  // token-identical
    distinct.insert(from_ckpt[i].begin(), from_ckpt[i].end());
  }
  // the continuations are not degenerate (one repeated token would make the comparison weak)
  MESSAGE("distinct tokens over " << kPrompts.size() << " x " << kNewTokens << ": " << distinct.size());
  CHECK(distinct.size() > 20);
  fs::remove_all(dir);
}

GPTConfig small_gpt2(int kv_heads) { return test::model_config(50257, 96, 32, 2, 4, kv_heads, 8, 64); }

GPTConfig small_llama(int kv_heads, bool tied) {
  GPTConfig c = small_gpt2(kv_heads);
  c.arch = Arch::llama, c.tie_embeddings = tied ? 1 : 0, c.rope_theta = 500.0f;  // a small theta: positions matter over 96
  return c;
}

}  // namespace

TEST_CASE("greedy generation from a checkpoint equals generation from its hf export") {
  check_round_trip(small_gpt2(4), ModelLayout::Hf);
}

TEST_CASE("greedy generation from a checkpoint equals generation from its xtrain export (GQA)") {
  check_round_trip(small_gpt2(2), ModelLayout::Xtrain);
}

TEST_CASE("greedy generation from a Llama checkpoint equals generation from its LlamaForCausalLM export (untied, GQA)") {
  check_round_trip(small_llama(2, false), ModelLayout::Hf);
}

TEST_CASE("greedy generation from a Llama checkpoint equals generation from its LlamaForCausalLM export (tied)") {
  check_round_trip(small_llama(4, true), ModelLayout::Hf);
}

int main(int argc, char** argv) {
  if (!std::ifstream(kEncoder) || !std::ifstream(kVocabBpe)) {
    std::printf("test_generate_export: %s or %s missing (scripts/setup.sh fetches them), skipped\n",
                kEncoder.c_str(), kVocabBpe.c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
