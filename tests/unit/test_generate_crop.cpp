// Generation past the model's context (CPU backend, the oracle): every token after the cache is full is
// the one a full forward over the cropped window (the last maxT tokens, nanoGPT's crop) gives, with the
// same sampling stream, for greedy and sampled decoding, in both model families (llama's rotary then runs
// at the positions of the cropped window, from 0 again).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cpu_ops_test_util.h"
#include "inference_test_util.h"
#include <xtrain/model/inference.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/generate.h>
#include <xtrain/serve/sampler.h>

using namespace xtrain;

namespace {

// reference: the continuation of `prompts` sampled from Decoder::forward over the last maxT tokens of
// each sequence (all of them while they fit), one fresh forward per token, with generate()'s streams.
std::vector<std::vector<int32_t>> reference(GPT& model, const std::vector<std::vector<int32_t>>& prompts,
                                            const GenerateOptions& opts) {
  const GPTConfig& c = model.config();
  Decoder full(model, 1);
  std::vector<std::vector<int32_t>> seqs = prompts, out(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    const uint64_t key = sampling_key(opts.seed, b);
    for (int n = 0; n < opts.max_new_tokens; ++n) {
      const int len = std::min<int>(int(seqs[b].size()), c.maxT);
      const std::vector<float>& logits = full.forward(seqs[b].data() + seqs[b].size() - len, len);
      const int32_t t = sample_token(logits.data() + size_t(len - 1) * c.V, c.V, opts.sampler, key, uint64_t(n));
      seqs[b].push_back(t), out[b].push_back(t);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("generation past the context equals a forward over the cropped window, token for token") {
  // per-row GEMMs: a row's bits do not depend on the rows around it, so the re-filled cache gives the
  // forward's logits bit for bit and even sampled tokens must agree
  auto be = make_cpu_backend(RowKernels::per_row);
  for (const test::NamedConfig& nc : test::inference_configs()) {
    CAPTURE(nc.name);
    GPTConfig cfg = nc.cfg;
    cfg.maxT = 12;
    GPT model(cfg, *be);
    test::random_params(model, 21, 0.3);
    const int P = 5, steps = 40;  // 40 new tokens: 32 of them past the context of 12
    const std::vector<std::vector<int32_t>> prompts = {test::random_tokens(P, cfg.V, 3), test::random_tokens(P, cfg.V, 4)};
    // greedy with the argmax on the device (append_greedy: its re-filled windows too) and on the host, and sampled
    for (const std::pair<float, bool>& mode : {std::pair{0.0f, true}, std::pair{0.0f, false}, std::pair{1.0f, true}}) {
      const float temperature = mode.first;  // no structured binding: CAPTURE's lambda cannot take one (clang 14)
      const bool device_greedy = mode.second;
      CAPTURE(temperature);
      CAPTURE(device_greedy);
      GenerateOptions opts;
      opts.max_new_tokens = steps;
      opts.sampler.temperature = temperature;
      opts.device_greedy = device_greedy;
      opts.seed = 5;
      Decoder dec(model, int(prompts.size()));
      GenerateStats st;
      const auto got = generate(dec, prompts, opts, nullptr, &st);
      CHECK(generate(dec, prompts, opts, nullptr) == got);  // a second generation on the same (warm) decoder
      const auto want = reference(model, prompts, opts);
      for (size_t b = 0; b < prompts.size(); ++b) {
        REQUIRE(got[b].size() == size_t(steps));
        for (int n = 0; n < steps; ++n) {
          CAPTURE(b);
          CAPTURE(n);
          CHECK(got[b][n] == want[b][n]);
        }
      }
      // the prompt and 7 tokens fill the 12 positions; each of the remaining 32 appends re-fills the cache
      CHECK(st.context_crops == P + steps - 1 - cfg.maxT);
      CHECK(st.new_tokens == 2 * steps);
      CHECK(dec.position() == cfg.maxT);
    }
  }
}

TEST_CASE("a context of one token: each step is a forward over the last token alone") {
  auto be = make_cpu_backend(RowKernels::per_row);
  for (const test::NamedConfig& nc : test::inference_configs()) {
    CAPTURE(nc.name);
    GPTConfig cfg = nc.cfg;
    cfg.maxT = 1;
    GPT model(cfg, *be);
    test::random_params(model, 22, 0.3);
    GenerateOptions opts;
    opts.max_new_tokens = 6;
    opts.sampler.temperature = 0.0f;
    const std::vector<std::vector<int32_t>> prompts = {test::random_tokens(1, cfg.V, 9)};
    Decoder dec(model, 1);
    CHECK(generate(dec, prompts, opts, nullptr) == reference(model, prompts, opts));
  }
}
