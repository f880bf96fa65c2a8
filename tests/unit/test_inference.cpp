// Inference on the CPU backend (the oracle): the KV-cache attention op against training attention, the
// Decoder's logits against the training forward's, and cached decoding against recomputing the prefix,
// for both model families (gpt2; llama, whose rotary runs at the cache's absolute positions), also from a
// llama checkpoint; the greedy token on the device (Backend::argmax_rows, Decoder::append_greedy) against the
// host sampler.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include "cpu_ops_test_util.h"
#include "inference_test_util.h"
#include <xtrain/model/inference.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/generate.h>
#include <xtrain/checkpoint/checkpoint.h>

using namespace xtrain;
using test::random_params;
using test::random_tokens;
using test::inference_configs;
using test::NamedConfig;
using test::rel_diff;
using test::small_config;

namespace {

// Both sides run the same fp32 ops in the same order (the same BLAS GEMMs of the same shapes, attention
// accumulated in double) except where the number of rows of a GEMM differs (a decode step multiplies one
// row where the prefix forward multiplies T): OpenBLAS may then pick another kernel and summation order,
// ~sqrt(K) * 6e-8 relative per dot product of K <= 128 terms, amplified by at most a few layers: ~1e-6.
// 1e-5 of the largest logit leaves ~10x margin; a wrong position, cache row or head
// gives O(1).
constexpr double kCacheRel = 1e-5;
// Inference forward vs training forward over the same (B,T): the identical op sequence on identical
// shapes (the only difference is attention through the cache, whose CPU reference repeats the training
// attention's double arithmetic), so the logits agree to the last bit. Measured: 0.
constexpr double kSameOpsRel = 0.0;

}  // namespace

TEST_CASE("attention_decode over a cache filled in chunks equals causal attention (GQA)") {
  auto be = make_cpu_backend();
  const int B = 2, T = 11, NH = 6, KVH = 2, HS = 5, maxT = 16, QKV = QkvLayout::row_width(NH, KVH, HS), A = NH * HS;
  std::vector<float> qkv(size_t(B) * T * QKV);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(normal(7, i));
  std::vector<float> ref(size_t(B) * T * A), att(size_t(B) * NH * T * T);
  be->attention_forward(ref.data(), att.data(), qkv.data(), B, T, NH, KVH, HS);

  std::vector<float> kc(size_t(B) * maxT * KVH * HS, NAN), vc(kc.size(), NAN), out(ref.size(), NAN);
  // chunks [0,4), [4,5), ..., [10,11): a prefill then one position at a time
  for (int32_t pos = 0; pos < T;) {
    const int Tn = pos == 0 ? 4 : 1;
    std::vector<float> chunk(size_t(B) * Tn * QKV), o(size_t(B) * Tn * A);
    for (int b = 0; b < B; ++b)
      std::copy_n(qkv.begin() + (size_t(b) * T + pos) * QKV, size_t(Tn) * QKV, chunk.begin() + size_t(b) * Tn * QKV);
    be->attention_decode(o.data(), kc.data(), vc.data(), chunk.data(), B, Tn, &pos, maxT, NH, KVH, HS);
    for (int b = 0; b < B; ++b)
      std::copy_n(o.begin() + size_t(b) * Tn * A, size_t(Tn) * A, out.begin() + (size_t(b) * T + pos) * A);
    pos += Tn;
  }
  CHECK(rel_diff(out.data(), ref.data(), ref.size()) == 0.0);  // same double arithmetic per row
  // the caches hold exactly the k and v heads of every position
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < KVH * HS; ++j) {
        const size_t src = (size_t(b) * T + t) * QKV + size_t(NH) * HS + j, dst = (size_t(b) * maxT + t) * KVH * HS + j;
        REQUIRE(kc[dst] == qkv[src]);
        REQUIRE(vc[dst] == qkv[src + size_t(KVH) * HS]);
      }
  std::vector<float> o(size_t(B) * A);
  const int32_t full = maxT, neg = -1, zero = 0, huge = INT32_MAX;  // huge + 1 would wrap to negative
  CHECK_THROWS_AS(be->attention_decode(o.data(), kc.data(), vc.data(), qkv.data(), B, 1, &full, maxT, NH, KVH, HS),
                  Error);
  CHECK_THROWS_AS(be->attention_decode(o.data(), kc.data(), vc.data(), qkv.data(), B, 1, &huge, maxT, NH, KVH, HS),
                  Error);
  CHECK_THROWS_AS(be->attention_decode(o.data(), kc.data(), vc.data(), qkv.data(), B, 1, &neg, maxT, NH, KVH, HS),
                  Error);
  CHECK_THROWS_AS(be->attention_decode(o.data(), kc.data(), vc.data(), qkv.data(), B, 1, &zero, maxT, NH, 4, HS), Error);
}

TEST_CASE("inference logits equal the training forward's logits") {
  auto be = make_cpu_backend();
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    GPT model(nc.cfg, *be);
    random_params(model, 11, 0.3);
    const GPTConfig& c = model.config();
    const int B = 3, T = c.maxT;
    const std::vector<int32_t> tokens = random_tokens(size_t(B) * T, c.V, 5), targets = random_tokens(size_t(B) * T, c.V, 6);
    model.forward(tokens.data(), targets.data(), B, T, /*train=*/false, 1.0f, nullptr);
    std::vector<float> train_logits(size_t(B) * T * c.Vp());
    be->copy_to_host(train_logits.data(), model.logits(), train_logits.size() * sizeof(float));
    std::vector<float> ref(size_t(B) * T * c.V);  // padding columns dropped
    for (size_t r = 0; r < size_t(B) * T; ++r)
      std::copy_n(train_logits.begin() + r * c.Vp(), c.V, ref.begin() + r * c.V);

    Decoder dec(model, B);
    const std::vector<float>& got = dec.forward(tokens.data(), T);
    REQUIRE(got.size() == ref.size());
    const double rel = rel_diff(got.data(), ref.data(), ref.size());
    MESSAGE(nc.name << ": inference vs training logits, max rel diff: " << rel);
    CHECK(rel <= kSameOpsRel);
    CHECK(dec.position() == T);
    const std::vector<float>& again = dec.forward(tokens.data(), T);  // after reset: the same bits
    CHECK(rel_diff(again.data(), ref.data(), ref.size()) == 0.0);
  }
}

// Why the bits agree: the decoder runs the training forward's block (block_forward: the same ops in the
// same order, the residual adds fused with their norms, fc with its GELU or SwiGLU, llama's rotary at
// the same absolute positions), the same encoder, final norm and head; every op but the GEMM and
// attention computes a row from that row alone; attention through the cache repeats the training
// attention's double arithmetic row by row (attention_decode.h); and with RowKernels::per_row every GEMM
// row is one one-row GEMM on both sides. Under RowKernels::fastest only the GEMMs differ (OpenBLAS's
// kernel depends on the row count): kCacheRel there, as below.
TEST_CASE("decoding one token at a time gives the training forward's logits bit for bit (CPU, fp32)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    auto be = make_cpu_backend(RowKernels::per_row);
    GPT model(nc.cfg, *be);
    random_params(model, 13, 0.3);
    const GPTConfig& c = model.config();
    const int B = 2, T = 40;
    const std::vector<int32_t> tokens = random_tokens(size_t(B) * T, c.V, 7), targets = random_tokens(size_t(B) * T, c.V, 8);
    model.forward(tokens.data(), targets.data(), B, T, /*train=*/false, 1.0f, nullptr);
    std::vector<float> train_logits(size_t(B) * T * c.Vp());
    be->copy_to_host(train_logits.data(), model.logits(), train_logits.size() * sizeof(float));

    Decoder dec(model, B);
    size_t equal = 0, rows = 0;
    for (int t = 0; t < T; ++t) {
      const int32_t next[B] = {tokens[t], tokens[size_t(T) + t]};
      const std::vector<float>& got = dec.append(next, 1, false);  // (B,V): position t of each sequence
      for (int b = 0; b < B; ++b, ++rows) {
        const float* want = train_logits.data() + (size_t(b) * T + t) * c.Vp();
        equal += std::equal(want, want + c.V, got.data() + size_t(b) * c.V);  // exact: every bit of every logit
      }
    }
    MESSAGE(nc.name << ": one-token decode vs training forward: " << equal << " of " << rows << " rows bitwise equal");
    CHECK(equal == rows);
    // the test can fail: the same decode on the default BLAS GEMM differs from the training forward in the last
    // bits of some rows (OpenBLAS's kernel for one row is not its kernel for B*T rows), yet within kCacheRel
    auto blas = make_cpu_backend();
    GPT blas_model(nc.cfg, *blas);
    random_params(blas_model, 13, 0.3);
    blas_model.forward(tokens.data(), targets.data(), B, T, false, 1.0f, nullptr);
    std::vector<float> blas_logits(train_logits.size());
    blas->copy_to_host(blas_logits.data(), blas_model.logits(), blas_logits.size() * sizeof(float));
    Decoder blas_dec(blas_model, B);
    double worst = 0.0;
    for (int t = 0; t < T; ++t) {
      const int32_t next[B] = {tokens[t], tokens[size_t(T) + t]};
      const std::vector<float>& got = blas_dec.append(next, 1, false);
      for (int b = 0; b < B; ++b)
        worst = std::max(worst, rel_diff(got.data() + size_t(b) * c.V, blas_logits.data() + (size_t(b) * T + t) * c.Vp(),
                                         size_t(c.V)));
    }
    MESSAGE(nc.name << ": with BLAS GEMMs (row count dependent), max rel diff: " << worst);
    CHECK(worst <= kCacheRel);
  }
}

namespace {

// check_cached_greedy: P prompt tokens then `steps` greedy tokens for 2 sequences through one Decoder's
// cache, each step's logits against a fresh forward over the whole prefix (Decoder::forward): the same
// token at every step and logits within `tol` of the largest (0: every bit). generate() with greedy
// sampling must then give the same continuation.
void check_cached_greedy(GPT& model, int P, int steps, double tol) {
  const GPTConfig& c = model.config();
  const int B = 2;
  const std::vector<std::vector<int32_t>> prompts = {random_tokens(P, c.V, 1), random_tokens(P, c.V, 2)};
  std::vector<std::vector<int32_t>> seqs = prompts;

  Decoder cached(model, B), full(model, 1);
  std::vector<int32_t> flat;
  for (const auto& s : seqs) flat.insert(flat.end(), s.begin(), s.end());
  const std::vector<float>* logits = &cached.append(flat.data(), P, false);
  double worst = 0.0;
  std::vector<int32_t> next(B);
  for (int n = 0; n < steps; ++n) {
    for (int b = 0; b < B; ++b) {
      const float* lc = logits->data() + size_t(b) * c.V;
      const std::vector<float>& lf = full.forward(seqs[b].data(), int(seqs[b].size()));
      const float* last = lf.data() + (seqs[b].size() - 1) * c.V;
      worst = std::max(worst, rel_diff(lc, last, size_t(c.V)));
      const int32_t tc = int32_t(std::max_element(lc, lc + c.V) - lc);
      const int32_t tf = int32_t(std::max_element(last, last + c.V) - last);
      REQUIRE(tc == tf);  // token-identical
      next[b] = tc;
      seqs[b].push_back(tc);
    }
    if (n + 1 < steps) logits = &cached.append(next.data(), 1, false);
  }
  MESSAGE("cached vs full-prefix logits over " << steps << " steps, max rel diff: " << worst);
  CHECK(worst <= tol);
  CHECK(cached.position() == P + steps - 1);

  // generate() with greedy sampling reproduces the same continuation
  GenerateOptions opts;
  opts.max_new_tokens = steps;
  opts.sampler.temperature = 0.0f;
  const auto gen = generate(cached, prompts, opts, nullptr);
  for (int b = 0; b < B; ++b) CHECK(gen[b] == std::vector<int32_t>(seqs[b].begin() + P, seqs[b].end()));
}

}  // namespace

TEST_CASE("KV-cache decoding equals recomputing the whole prefix (64 greedy tokens, 2 sequences)") {
  auto be = make_cpu_backend();
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    GPT model(nc.cfg, *be);
    random_params(model, 12, 0.3);
    check_cached_greedy(model, 8, 64, kCacheRel);
  }
}

// A llama model as xtrain_generate --ckpt loads it: its family, untied head, RMSNorm eps and rotary base
// come from the checkpoint (save_checkpoint, load_checkpoint), and greedy decoding through the cache
// gives, with per-row GEMMs, the logits of recomputing the whole prefix bit for bit: through the decoder
// (Decoder::forward) and through the training forward.
TEST_CASE("llama from a checkpoint: greedy KV-cache decoding equals recomputing the prefix each token") {
  auto be = make_cpu_backend(RowKernels::per_row);
  GPTConfig cfg = small_config(Arch::llama);
  cfg.norm_eps = 1e-6f;
  GPT trained(cfg, *be);
  random_params(trained, 14, 0.3);
  CheckpointState st;
  st.meta.model = cfg;
  st.meta.batch = 1, st.meta.total_steps = 1;  // as a training run writes them (the loader checks their range)
  st.meta.num_params = trained.num_params();
  st.params.resize(trained.num_params());
  be->copy_to_host(st.params.data(), trained.params(), st.params.size() * sizeof(float));
  st.m.assign(st.params.size(), 0.0f), st.v.assign(st.params.size(), 0.0f);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("xtrain_inference_llama_" + std::to_string(getpid()) + ".ckpt")).string();
  save_checkpoint(path, st);
  const CheckpointState loaded = load_checkpoint(path);
  std::filesystem::remove(path);

  const GPTConfig& lc = loaded.meta.model;
  CHECK(lc.describe() == cfg.describe());
  CHECK((lc.llama() && !lc.tied() && lc.norm_eps == cfg.norm_eps && lc.rope_theta == cfg.rope_theta));
  GPT model(lc, *be);
  REQUIRE(loaded.params.size() == model.num_params());
  be->copy_to_device(model.params(), loaded.params.data(), loaded.params.size() * sizeof(float));
  // 12-token prompts, 60 new tokens: the cache holds 71 of the 80 positions at the end
  check_cached_greedy(model, 12, 60, 0.0);

  // and against the training forward (GPT::forward) over the whole sequence at every step
  Decoder dec(model, 1);
  std::vector<int32_t> seq = random_tokens(12, lc.V, 3);
  const std::vector<float>* logits = &dec.append(seq.data(), int(seq.size()), false);
  std::vector<float> train(size_t(lc.maxT) * lc.Vp());
  const int steps = 60;
  int equal = 0;
  for (int n = 0; n < steps; ++n) {
    const int T = int(seq.size());
    const std::vector<int32_t> targets(size_t(T), 0);
    model.forward(seq.data(), targets.data(), 1, T, /*train=*/false, 1.0f, nullptr);
    be->copy_to_host(train.data(), model.logits(), size_t(T) * lc.Vp() * sizeof(float));
    const float* want = train.data() + size_t(T - 1) * lc.Vp();  // the last position's row
    equal += std::equal(want, want + lc.V, logits->begin());     // every bit of every logit
    const int32_t next = int32_t(std::max_element(logits->begin(), logits->end()) - logits->begin());
    seq.push_back(next);
    if (n + 1 < steps) logits = &dec.append(&next, 1, false);
  }
  MESSAGE("llama from a checkpoint: " << equal << " of " << steps << " greedy steps bitwise the training forward's logits");
  CHECK(equal == steps);
}

TEST_CASE("the decoder refuses tokens outside the vocabulary and positions past the context") {
  auto be = make_cpu_backend();
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    GPT model(nc.cfg, *be);
    Decoder dec(model, 1);
    const int32_t bad = model.config().V;
    CHECK_THROWS_AS(dec.append(&bad, 1, false), Error);
    std::vector<int32_t> full(size_t(model.config().maxT), 0);
    dec.append(full.data(), model.config().maxT, false);
    CHECK_THROWS_AS(dec.append(full.data(), 1, false), Error);
    CHECK_THROWS_AS(Decoder(model, 0), Error);
  }
}

TEST_CASE("argmax_rows on the CPU backend is the host sampler's greedy token (ties, odd V, padding, -inf, NaN)") {
  auto be = make_cpu_backend();
  test::check_argmax_rows(*be);
}

// set_row_first: the first element of row `row` (C wide) of parameter tensor `tensor` of `model` set to x.
static void set_row_first(Backend& be, GPT& model, int tensor, int row, float x) {
  std::vector<float> p(model.num_params());
  be.copy_to_host(p.data(), model.params(), p.size() * sizeof(float));
  p[model.layout()[size_t(tensor)].offset + size_t(row) * model.config().C] = x;
  be.copy_to_device(model.params(), p.data(), p.size() * sizeof(float));
}

// Greedy generation with the argmax on the device (append_greedy) against the host sampler on the copied
// logits: the same tokens for B = 3 sequences with an eos that stops some of them early (their rows keep
// running), and for logits with a NaN the same error line from both paths.
TEST_CASE("greedy generation: the device argmax gives the host sampler's tokens and errors") {
  auto be = make_cpu_backend();
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    GPT model(nc.cfg, *be);
    random_params(model, 41, 0.3);
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(4, nc.cfg.V, 1), random_tokens(4, nc.cfg.V, 2),
                                                       random_tokens(4, nc.cfg.V, 3)};
    GenerateOptions opts;
    opts.max_new_tokens = 30;
    opts.sampler.temperature = 0.0f;
    Decoder dec(model, 3);
    const auto free_run = generate(dec, prompts, opts, nullptr);
    opts.eos_id = free_run[1][5];  // sequence 1 stops at its 6th token at the latest
    std::vector<std::vector<int32_t>> via_device, via_host;
    for (const bool device_greedy : {true, false}) {
      opts.device_greedy = device_greedy;
      std::vector<std::vector<int32_t>> streamed(3);
      const auto got = generate(dec, prompts, opts, [&](int b, int32_t id) { streamed[size_t(b)].push_back(id); });
      CHECK(streamed == got);
      (device_greedy ? via_device : via_host) = got;
    }
    CHECK(via_device == via_host);
    CHECK(via_device[1].size() <= 5);

    // append_greedy's ids are the argmax of append's logits, step by step
    Decoder a(model, 3), g(model, 3);
    std::vector<int32_t> batch;
    for (const auto& p : prompts) batch.insert(batch.end(), p.begin(), p.end());
    std::vector<float> logits = a.append(batch.data(), 4, false);
    std::vector<int32_t> ids = g.append_greedy(batch.data(), 4);
    for (int n = 0; n < 10; ++n) {
      for (int b = 0; b < 3; ++b) {
        CHECK(ids[size_t(b)] == greedy_token(logits.data() + size_t(b) * nc.cfg.V, nc.cfg.V));
        CHECK(g.logit(b, ids[size_t(b)]) == logits[size_t(b) * nc.cfg.V + size_t(ids[size_t(b)])]);
      }
      logits = a.append(ids.data(), 1, false);
      ids = std::vector<int32_t>(g.append_greedy(ids.data(), 1));
    }
    CHECK_THROWS_AS(g.logit(3, 0), Error);
    CHECK_THROWS_AS(g.logit(0, nc.cfg.V), Error);
  }

  // a NaN in the head's row of token 5 (GPT-2, tied: wte) makes logit 5 NaN everywhere: both paths fail with
  // the sampler's line, naming token 5
  GPT model(small_config(), *be);
  random_params(model, 42, 0.3);
  set_row_first(*be, model, kWte, 5, std::nanf(""));
  std::vector<int32_t> prompt = random_tokens(4, model.config().V, 1);
  std::replace(prompt.begin(), prompt.end(), 5, 6);  // token 5's embedding is NaN too: not in the prompt
  std::vector<std::string> messages;
  for (const bool device_greedy : {true, false}) {
    GenerateOptions opts;
    opts.sampler.temperature = 0.0f;
    opts.device_greedy = device_greedy;
    Decoder dec(model, 1);
    try {
      generate(dec, {prompt}, opts, nullptr);
    } catch (const Error& e) {
      messages.push_back(e.what());
    }
  }
  REQUIRE(messages.size() == 2);
  CHECK(messages[0] == messages[1]);
  CHECK(messages[0].find("logit of token 5 is") != std::string::npos);
}

// Decoder::append_greedy_steps: a run of one-token greedy steps whose tokens the decoder feeds itself gives, step
// by step, what append_greedy gives when the host feeds each step's ids back (a run of kGreedySteps and a run of
// another length), leaves the decoder at the same position with the last step's logits, and refuses what
// append_greedy refuses. In generate, a NaN that first appears in the middle of a run (GPT-2's position embedding
// of one position made NaN) fails with the host sampler's line, as without runs; without it, the stats count the
// first run's 8 tokens with the first decoding call and no later recording (GenerateStats::late_record_s).
TEST_CASE("greedy runs fed on the device: append_greedy's tokens, logits and errors") {
  auto be = make_cpu_backend();
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    GPT model(nc.cfg, *be);
    random_params(model, 43, 0.3);
    const int B = 3, V = nc.cfg.V;
    std::vector<int32_t> batch;
    for (int b = 0; b < B; ++b) {
      const std::vector<int32_t> p = random_tokens(4, V, uint64_t(b + 7));
      batch.insert(batch.end(), p.begin(), p.end());
    }
    for (const int steps : {Decoder::kGreedySteps, 3}) {
      CAPTURE(steps);
      Decoder one(model, B), run(model, B);
      std::vector<int32_t> ids = one.append_greedy(batch.data(), 4);
      CHECK(run.append_greedy(batch.data(), 4) == ids);
      test::check_greedy_run(one, run, ids, steps);
    }
    Decoder d(model, B);
    d.append_greedy(batch.data(), 4);
    const std::vector<int32_t> bad = {0, V, 1};
    CHECK_THROWS_AS(d.append_greedy_steps(bad.data(), 2), Error);  // a token outside the vocabulary
    CHECK_THROWS_AS(d.append_greedy_steps(batch.data(), 0), Error);
    CHECK_THROWS_AS(d.append_greedy_steps(batch.data(), nc.cfg.maxT - d.position() + 1), Error);  // past the context
    CHECK(d.position() == 4);
    CHECK_THROWS_AS(d.rewind(5), Error);
    d.rewind(2);
    CHECK(d.position() == 2);
  }

  // position 7's embedding NaN: the prompt (positions 0..3) and the first run's steps at positions 4..6 are
  // finite, the step at position 7 (the run's fourth) is not
  GPT model(small_config(), *be);
  random_params(model, 44, 0.3);
  set_row_first(*be, model, kWpe, 7, std::nanf(""));
  const std::vector<int32_t> prompt = random_tokens(4, model.config().V, 1);
  std::vector<std::string> messages;
  std::vector<std::vector<int32_t>> streamed(2);
  for (const bool device_greedy : {true, false}) {
    GenerateOptions opts;
    opts.sampler.temperature = 0.0f;
    opts.max_new_tokens = 20;
    opts.device_greedy = device_greedy;
    Decoder dec(model, 1);
    try {
      generate(dec, {prompt}, opts, [&](int, int32_t id) { streamed[device_greedy ? 0 : 1].push_back(id); });
    } catch (const Error& e) {
      messages.push_back(e.what());
    }
  }
  REQUIRE(messages.size() == 2);
  CHECK(messages[0] == messages[1]);
  CHECK(messages[0].find("logit of token") != std::string::npos);
  CHECK(streamed[0] == streamed[1]);
  CHECK(streamed[0].size() == 4);  // the prompt's token and the steps at positions 4..6
  // without the NaN: the first decoding call is a run, its 8 tokens counted with it; 20 new tokens end with 3
  // one-token steps after two runs, whose graph (none on the CPU) would be recorded after the first call
  {
    set_row_first(*be, model, kWpe, 7, 0.0f);
    GenerateOptions opts;
    opts.sampler.temperature = 0.0f;
    opts.max_new_tokens = 20;
    Decoder dec(model, 1);
    GenerateStats st;
    CHECK(generate(dec, {prompt}, opts, nullptr, &st)[0].size() == 20);
    CHECK(st.first_call_steps == Decoder::kGreedySteps);
    CHECK(st.first_step_tokens == Decoder::kGreedySteps);
    CHECK(st.late_record_s == 0.0);  // the CPU records no graph
  }
}
