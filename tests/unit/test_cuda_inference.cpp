// Inference on one GPU against the CPU backend (the oracle): the Decoder's logits (fp32 and bf16), greedy
// KV-cache decoding token-identical to the CPU's, cached decoding against recomputing the prefix on the
// GPU, one-token steps recorded as a CUDA graph against launching each kernel, and recorded steps while
// another model's decoder shares the backend, and the greedy token on the GPU (argmax_rows, also inside the
// recorded step) against the host sampler; each for both model families (test::inference_configs:
// gpt2, llama with its own head and tied). And weights uploaded in parts (make_weight_upload: widened and
// transposed on the device) against the host's conversion and the host loader. Label gpu; exits 77
// (skipped) when the CUDA runtime sees no device, before doctest runs (gpu_test_main.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <filesystem>
#include <stdlib.h>

#include "backend/cpu/cpu_backend.h"
#include "core/io.h"
#include <xtrain/backend/weight_upload.h>
#include <xtrain/serve/export.h>
#include "backend/cuda/cuda_backend.h"
#include "cpu_ops_test_util.h"
#include "inference_test_util.h"
#include <xtrain/model/inference.h>
#include <xtrain/serve/generate.h>

using namespace xtrain;
using test::inference_configs;
using test::NamedConfig;
using test::random_params;
using test::random_tokens;
using test::rel_diff;

namespace {

// fp32 GPU vs the CPU oracle: every op agrees to ~1e-6 relative (test_cuda_ops, 1e-5 bound); through two
// layers and the head the logits differ by a few 1e-6 of the largest logit. 1e-4 leaves a wide margin,
// while a wrong cache row, head or position gives O(1).
constexpr double kFp32Rel = 1e-4;
// bf16 activations vs fp32: each stored activation is rounded by up to 2^-8 = 3.9e-3 relative and the
// GEMM operands too; through two layers ~1e-2 of the largest logit. 5e-2 bounds that; a wrong index
// still gives O(1).
constexpr double kBf16Rel = 5e-2;
// Cached decoding vs recomputing the prefix, both on the GPU in fp32: only the GEMM kernels for 1 row
// and for T rows may differ in summation order (~1e-6): 1e-5 leaves a margin.
constexpr double kCacheRel = 1e-5;

// Models: one config's model on the CPU and on the GPU, with the same random parameters.
struct Models {
  std::unique_ptr<Backend> cpu_be = make_cpu_backend();
  std::unique_ptr<Backend> gpu_be;
  std::unique_ptr<GPT> cpu, gpu;
  Models(const GPTConfig& c, const char* dtype, RowKernels rows = RowKernels::fastest)
      : gpu_be(make_cuda_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype), Attention::automatic, rows})) {
    cpu = std::make_unique<GPT>(c, *cpu_be);
    gpu = std::make_unique<GPT>(c, *gpu_be);
    random_params(*cpu, 31, 0.3);
    random_params(*gpu, 31, 0.3);
  }
};

}  // namespace

TEST_CASE("GPU inference logits match the CPU (fp32 and bf16)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    for (const char* dtype : {"fp32", "bf16"}) {
      CAPTURE(dtype);
      Models m(nc.cfg, dtype);
      const GPTConfig& c = nc.cfg;
      const int B = 3, T = 57;
      const std::vector<int32_t> tokens = random_tokens(size_t(B) * T, c.V, 8);
      Decoder dc(*m.cpu, B), dg(*m.gpu, B);
      const std::vector<float> ref = dc.forward(tokens.data(), T);
      const std::vector<float>& got = dg.forward(tokens.data(), T);
      const double err = rel_diff(got.data(), ref.data(), ref.size()), tol = dtype[0] == 'b' ? kBf16Rel : kFp32Rel;
      MESSAGE(nc.name << " " << dtype << " logits: max|gpu - cpu| / max|cpu| = " << err << " (tolerance " << tol << ")");
      CHECK(err <= tol);
    }
  }
}

TEST_CASE("GPU greedy KV-cache decoding: CPU tokens, and the logits of recomputing the prefix (fp32)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    Models m(nc.cfg, "fp32");
    const GPTConfig& c = nc.cfg;
    const int P = 8, steps = 64;
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(P, c.V, 3), random_tokens(P, c.V, 4)};
    GenerateOptions opts;
    opts.max_new_tokens = steps;
    opts.sampler.temperature = 0.0f;
    Decoder dc(*m.cpu, 2), dg(*m.gpu, 2);
    const auto cpu_tokens = generate(dc, prompts, opts, nullptr);
    const auto gpu_tokens = generate(dg, prompts, opts, nullptr);  // the argmax on the GPU (append_greedy)
    CHECK(gpu_tokens == cpu_tokens);  // token-identical
    opts.device_greedy = false;       // the host sampler on the GPU's logits, on the same (warm) decoder
    CHECK(generate(dg, prompts, opts, nullptr) == gpu_tokens);

    // the GPU's cached logits at every step against its own full-prefix forward
    Decoder cached(*m.gpu, 1), full(*m.gpu, 1);
    std::vector<int32_t> seq = prompts[0];
    const std::vector<float>* logits = &cached.append(seq.data(), P, false);
    double worst = 0.0;
    for (int n = 0; n < steps; ++n) {
      const std::vector<float> lc = *logits;
      const std::vector<float>& lf = full.forward(seq.data(), int(seq.size()));
      worst = std::max(worst, rel_diff(lc.data(), lf.data() + (seq.size() - 1) * c.V, size_t(c.V)));
      const int32_t next = int32_t(std::max_element(lc.begin(), lc.end()) - lc.begin());
      seq.push_back(next);
      if (n + 1 < steps) logits = &cached.append(&next, 1, false);
    }
    MESSAGE(nc.name << ": GPU cached vs full-prefix logits over " << steps << " steps: " << worst << " (tolerance "
                    << kCacheRel << ")");
    CHECK(worst <= kCacheRel);
  }
}

TEST_CASE("GPU one-token steps recorded as a CUDA graph: the logits of launching every kernel, bit for bit") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    for (const char* dtype : {"fp32", "bf16"}) {
      CAPTURE(dtype);
      Models m(nc.cfg, dtype);
      const GPTConfig& c = nc.cfg;
      const int B = 2, P = 5, steps = 40;
      Decoder graphed(*m.gpu, B, true), launched(*m.gpu, B, false);
      for (int round = 0; round < 2; ++round) {  // reset() keeps the graph: the second round launches it as recorded
        CAPTURE(round);
        const std::vector<int32_t> prompt = random_tokens(size_t(B) * P, c.V, 20 + round);
        graphed.reset(), launched.reset();
        std::vector<float> lg = graphed.append(prompt.data(), P, false);
        std::vector<float> ll = launched.append(prompt.data(), P, false);
        CHECK(lg == ll);  // the prefill launches its kernels on both
        // two decoders of one model share the backend's weight copy: neither makes the other prepare
        // its weights again (or record its graph again) at every step
        const uint64_t generation = m.gpu_be->weights_generation();
        int differing = 0;
        for (int n = 0; n < steps; ++n) {
          std::vector<int32_t> next(B);  // greedy from the launched logits, fed to both
          for (int b = 0; b < B; ++b)
            next[b] = int32_t(std::max_element(ll.begin() + size_t(b) * c.V, ll.begin() + size_t(b + 1) * c.V) -
                              (ll.begin() + size_t(b) * c.V));
          lg = graphed.append(next.data(), 1, false);
          ll = launched.append(next.data(), 1, false);
          differing += lg != ll;
        }
        CHECK(graphed.graph_recorded());
        CHECK(graphed.graph_recordings() == 1);  // recorded in round 0 only: nothing changed since
        CHECK_FALSE(launched.graph_recorded());
        CHECK(m.gpu_be->weights_generation() == generation);
        CHECK(differing == 0);
        CHECK(graphed.position() == P + steps);
      }
    }
  }
}

TEST_CASE("GPU recorded steps stay right when another model's weights take the backend's bf16 copy") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    // Decoders of two models on one bf16 backend: the backend keeps one prepared bf16 copy of weights, and
    // the other model's prepare_weights makes it hold that model's weights: rewritten in place (same
    // parameter count) or moved to a larger block (more layers; a recorded graph would still read the old
    // block, and a buffer of its size filled with NaNs then, which the caching allocator may place there,
    // makes that visible). The decoder sees the copy changed (weights_generation) and
    // prepares its own weights again and records again before its next step: its logits stay those of a
    // decoder alone on its own backend, bit for bit.
    for (const int other_layers : {2, 5}) {
      CAPTURE(other_layers);
      Models m(nc.cfg, "bf16"), alone(nc.cfg, "bf16");
      const GPTConfig& c = nc.cfg;
      GPTConfig oc = c;
      oc.L = other_layers;
      GPT other(oc, *m.gpu_be);
      random_params(other, 32, 0.3);
      const int B = 2, P = 5, steps = 12;
      const std::vector<int32_t> prompt = random_tokens(size_t(B) * P, c.V, 9);
      Decoder mine(*m.gpu, B, true), ref(*alone.gpu, B, true);
      std::vector<float> lm = mine.append(prompt.data(), P, false), lr = ref.append(prompt.data(), P, false);
      CHECK(lm == lr);
      int differing = 0;
      for (int n = 0; n < steps; ++n) {
        std::vector<int32_t> next(B);
        for (int b = 0; b < B; ++b)
          next[b] = int32_t(std::max_element(lr.begin() + size_t(b) * c.V, lr.begin() + size_t(b + 1) * c.V) -
                            (lr.begin() + size_t(b) * c.V));
        std::unique_ptr<DeviceBuffer<unsigned char>> junk;  // where the copy was, if it moved
        if (n == 3 || n == 7) {  // the other model decodes in between (its own prepare_weights), twice
          Decoder theirs(other, 1, true);
          theirs.append(next.data(), 1, false);
          theirs.append(next.data(), 1, false);  // a recorded step of its own
          junk = std::make_unique<DeviceBuffer<unsigned char>>(*m.gpu_be, m.gpu->num_params() * 2);
          m.gpu_be->copy_to_device(junk->get(), std::vector<unsigned char>(junk->bytes(), 0xff).data(), junk->bytes());
        }
        lm = mine.append(next.data(), 1, false);
        lr = ref.append(next.data(), 1, false);
        differing += lm != lr;
      }
      CHECK(mine.graph_recorded());
      CHECK(mine.graph_recordings() == 3);  // at the first step, and again after each of the other model's two turns
      CHECK(differing == 0);
    }
  }
}

TEST_CASE("GPU argmax_rows is the host sampler's greedy token (fp32 and bf16: ties, odd V, padding, -inf, NaN)") {
  for (const char* dtype : {"fp32", "bf16"}) {
    CAPTURE(dtype);
    auto be = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype), Attention::automatic, RowKernels::fastest});
    test::check_argmax_rows(*be);
  }
}

// Greedy generation with the argmax inside the recorded graphs (runs of append_greedy_steps, then one-token
// append_greedy steps for the last 7 tokens) against the host sampler on the copied logits of the same decoder,
// in both types, and a second generation on the warm decoder (no new recording, the same tokens; the cold one's
// later recording of the one-token step reported apart: GenerateStats::late_record_s); then recorded
// runs of kGreedySteps steps fed on the device against one-token steps fed by the host: the same ids and logits.
TEST_CASE("GPU greedy generation: the argmax in the recorded graph gives the host sampler's tokens (fp32 and bf16)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    for (const char* dtype : {"fp32", "bf16"}) {
      CAPTURE(dtype);
      Models m(nc.cfg, dtype);
      const std::vector<std::vector<int32_t>> prompts = {random_tokens(6, nc.cfg.V, 13), random_tokens(6, nc.cfg.V, 14),
                                                         random_tokens(6, nc.cfg.V, 15)};
      GenerateOptions opts;
      opts.max_new_tokens = 48;
      opts.sampler.temperature = 0.0f;
      Decoder dec(*m.gpu, 3, true);
      GenerateStats cold, warm;
      const auto device = generate(dec, prompts, opts, nullptr, &cold);
      CHECK(dec.graph_recorded());
      CHECK(generate(dec, prompts, opts, nullptr, &warm) == device);
      // the one-token step is first needed (and recorded) at the 42nd token, after the first call (a run): its
      // recording is counted apart, so that steady decoding leaves it out; the warm generation records nothing
      CHECK(cold.first_call_steps == Decoder::kGreedySteps);
      CHECK(cold.late_record_s > 0.0);
      CHECK(cold.late_record_s < cold.decode_s - cold.first_step_s);
      CHECK(warm.late_record_s == 0.0);
      opts.device_greedy = false;
      CHECK(generate(dec, prompts, opts, nullptr) == device);
      CHECK(dec.graph_recordings() == 2);  // the run of Decoder::kGreedySteps steps and the one-token step
      CHECK(device[0].size() == 48);
      const int B = 3, K = Decoder::kGreedySteps;
      Decoder one(*m.gpu, B, true), run(*m.gpu, B, true);
      std::vector<int32_t> batch;
      for (const auto& p : prompts) batch.insert(batch.end(), p.begin(), p.end());
      std::vector<int32_t> ids = one.append_greedy(batch.data(), 6);
      REQUIRE(run.append_greedy(batch.data(), 6) == ids);
      for (int r = 0; r < 3; ++r) test::check_greedy_run(one, run, ids, K);  // recorded once, launched three times
      CHECK(run.graph_recordings() == 1);  // the run only: the prefill is not recorded
    }
  }
}

// Decoding never calls cuDNN (its attention reads the cache through attention_decode), so the cuDNN handle of
// the bf16 backend of --attention auto, whose training attention is cuDNN's, is never made by it (xtrain_generate's
// cold start): none after a prompt of several tokens with a recorded one-token graph and after the all-positions
// forward of --dump-logits (Backend::setup_ms would name it); the training forward of the same model makes it.
TEST_CASE("GPU decoding makes no cuDNN handle (bf16, --attention auto); the training forward does") {
  auto cudnn_parts = [](const Backend& b) {
    int n = 0;
    for (const auto& [what, ms] : b.setup_ms()) n += what.find("cuDNN handle") != std::string::npos;
    return n;
  };
  const GPTConfig c = inference_configs()[0].cfg;
  Models m(c, "bf16");
  GenerateOptions opts;
  opts.max_new_tokens = 8;
  opts.sampler.temperature = 0.0f;
  Decoder dec(*m.gpu, 2, true);
  CHECK(generate(dec, {random_tokens(6, c.V, 13), random_tokens(6, c.V, 14)}, opts, nullptr)[0].size() == 8);
  CHECK(dec.graph_recorded());
  const std::vector<int32_t> tokens = random_tokens(size_t(2) * 40, c.V, 7), targets = random_tokens(size_t(2) * 40, c.V, 8);
  Decoder(*m.gpu, 1).forward(tokens.data(), 40);
  CHECK(cudnn_parts(*m.gpu_be) == 0);
  m.gpu->forward(tokens.data(), targets.data(), 2, 40, /*train=*/false, 1.0f, nullptr);  // T 40 > HS 8: cuDNN's shape
  CHECK(cudnn_parts(*m.gpu_be) == 1);
}

// DecodeVsTraining: the training forward's logits (B,T) of random tokens against T one-token decoding steps
// of the same tokens: rows compared, rows equal in every bit, max relative difference of a row.
struct DecodeVsTraining {
  size_t rows = 0, equal = 0;
  double worst = 0.0;
};
DecodeVsTraining decode_vs_training(Models& m, int B = 2) {
  const GPTConfig& c = m.gpu->config();
  const int T = 40;
  const std::vector<int32_t> tokens = random_tokens(size_t(B) * T, c.V, 7), targets = random_tokens(size_t(B) * T, c.V, 8);
  m.gpu->forward(tokens.data(), targets.data(), B, T, /*train=*/false, 1.0f, nullptr);
  const size_t ab = m.gpu_be->activation_bytes();
  std::vector<unsigned char> raw(size_t(B) * T * c.Vp() * ab);
  m.gpu_be->copy_to_host(raw.data(), m.gpu->logits(), raw.size());
  std::vector<float> train(size_t(B) * T * c.Vp());
  for (size_t i = 0; i < train.size(); ++i) {  // fp32 as is; bf16 widened exactly (test::bf16_value)
    if (ab == sizeof(float)) std::memcpy(&train[i], raw.data() + i * 4, 4);
    else train[i] = test::bf16_value(uint16_t(raw[i * 2] | (raw[i * 2 + 1] << 8)));
  }
  Decoder dec(*m.gpu, B, /*cuda_graph=*/false);
  DecodeVsTraining r;
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> next(B);
    for (int b = 0; b < B; ++b) next[b] = tokens[size_t(b) * T + t];
    const std::vector<float>& got = dec.append(next.data(), 1, false);  // (B,V): position t of each sequence
    for (int b = 0; b < B; ++b, ++r.rows) {
      const float* want = train.data() + (size_t(b) * T + t) * c.Vp();
      r.equal += std::equal(want, want + c.V, got.data() + size_t(b) * c.V);  // every bit of every logit
      r.worst = std::max(r.worst, rel_diff(got.data() + size_t(b) * c.V, want, size_t(c.V)));
    }
  }
  return r;
}

// The decoder runs the training forward's block (block_forward: the same ops in the same order, the
// residual adds fused with their LayerNorms, fc with its GELU through cuBLASLt's epilogue in bf16), so
// every op but two computes a row with the training's arithmetic. The two combine rows: the GEMMs
// (cuBLASLt picks an algorithm, hence a summation order, per row count: B rows per step here, B*T in
// training) and attention (the training's flash/cuDNN kernel, the decoder's cache kernel). With
// RowKernels::per_row both compute each row alone, and then every logit must be the training's, bit for bit:
// a decoder that composed the ops differently (another order, a missing fusion, another rounding point)
// fails here. Attention takes each of these 40 positions in one chunk of cache rows (attention_decode.h), in the
// training forward's launch (a 40-row scratch cache) as in the decoder's (the 80-row cache); that the chunks of
// longer contexts depend on the position alone, not on the launch, test_cuda_ops.cpp checks on the op itself
// ("a position has the same bits over whole sequences, ..."). At batch 1 the decoder takes the one-row fused ops
// instead (block_forward_row: norms in the products' prologues, residual adds in the projections' epilogues),
// which must give the same bits too.
TEST_CASE("GPU one-token decoding gives the training forward's logits bit for bit (per-row kernels, fp32 and bf16)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    for (const char* dtype : {"fp32", "bf16"}) {
      CAPTURE(dtype);
      Models m(nc.cfg, dtype, RowKernels::per_row);
      const DecodeVsTraining r = decode_vs_training(m);
      MESSAGE(nc.name << " " << dtype << " per-row kernels, one-token decode vs training forward: " << r.equal << " of " << r.rows
                    << " rows bitwise equal");
      CHECK(r.rows == 80);
      CHECK(r.equal == r.rows);
      const DecodeVsTraining one = decode_vs_training(m, 1);
      MESSAGE(nc.name << " " << dtype << " per-row kernels, batch-1 fused decode vs training forward: " << one.equal
                      << " of " << one.rows << " rows bitwise equal");
      CHECK(one.rows == 40);
      CHECK(one.equal == one.rows);
    }
  }
}

// With the fast kernels the two differ only by the GEMMs' and attention's summation orders: within the
// GPU-vs-CPU bounds (measured on one H200: fp32 max rel 3.6e-7; bf16 8.0e-3, one bf16 rounding step).
TEST_CASE("GPU one-token decoding against the training forward's logits (fast kernels, fp32 and bf16)") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    for (const char* dtype : {"fp32", "bf16"}) {
      CAPTURE(dtype);
      Models m(nc.cfg, dtype);
      const DecodeVsTraining r = decode_vs_training(m);
      MESSAGE(nc.name << " " << dtype << " fast kernels, one-token decode vs training forward: " << r.equal << " of " << r.rows
                    << " rows bitwise equal, max rel diff " << r.worst);
      CHECK(r.worst <= (dtype[0] == 'b' ? kBf16Rel : kFp32Rel));
    }
  }
}

TEST_CASE("GPU weight upload: parts widened and transposed on the device are the host's conversion, bit for bit") {
  const std::unique_ptr<Backend> gpu = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16});
  const size_t A = 37, B = 91, n = A * B;  // parts of 1000 bytes: 250 F32 or 500 F16/BF16 elements, ending mid-row
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, uint32_t(state >> 33); };
  for (const WireDType wire : {WireDType::f32, WireDType::f16, WireDType::bf16})
    for (const bool transpose : {false, true}) {
      CAPTURE(int(wire));
      CAPTURE(transpose);
      const size_t esize = wire_bytes(wire);
      std::string bytes(n * esize, '\0');
      for (size_t i = 0; i < n; ++i) {  // any bits but an all-ones exponent (NaN payloads may differ): subnormals too
        uint32_t v = next();
        if (wire == WireDType::f32 && ((v >> 23) & 0xff) == 0xff) v ^= 1u << 23;
        if (wire == WireDType::f16 && ((v >> 10) & 0x1f) == 0x1f) v ^= 1u << 10;
        if (wire == WireDType::bf16 && ((v >> 7) & 0xff) == 0xff) v ^= 1u << 7;
        std::memcpy(&bytes[i * esize], &v, esize);
      }
      std::vector<float> want(n), got(n);
      convert_weight_part(bytes.data(), {want.data(), 0, n, A, B, wire, transpose});
      float* dst = static_cast<float*>(gpu->alloc(n * sizeof(float)));
      {
        const std::unique_ptr<WeightUpload> up = make_cuda_weight_upload(*gpu, 1000);
        const size_t part = 1000 / esize;
        for (size_t i0 = 0; i0 < n; i0 += part) {
          const size_t i1 = std::min(n, i0 + part);
          std::memcpy(up->buffer(), bytes.data() + i0 * esize, (i1 - i0) * esize);
          up->write({dst, i0, i1, A, B, wire, transpose});
        }
        up->finish();
      }
      gpu->copy_to_host(got.data(), dst, n * sizeof(float));
      gpu->free(dst);
      CHECK(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
    }
}

TEST_CASE("GPU weight upload: a model directory loaded into the GPU's parameters is the host loader's, bit for bit") {
  for (const NamedConfig& nc : inference_configs()) {
    CAPTURE(nc.name);
    const GPTConfig& c = nc.cfg;
    const ModelLayout layout = hf_unsupported(c).empty() ? ModelLayout::Hf : ModelLayout::Xtrain;  // Hf: transposed tensors
    Models m(c, "bf16");
    std::vector<float> params(m.cpu->num_params());
    std::copy(m.cpu->params(), m.cpu->params() + params.size(), params.begin());
    for (size_t i = size_t(c.V) * c.C; i < size_t(c.Vp()) * c.C; ++i) params[i] = 0;  // wte's padding rows: not in the file
    std::string tmpl = (std::filesystem::temp_directory_path() / "xtrain_upload_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    std::vector<std::vector<float>> storage;
    write_file_atomic(tmpl + "/" + kConfigFile, model_config_json(c, layout));
    write_file_atomic(tmpl + "/" + kModelFile, safetensors_bytes(export_tensors(c, params, layout, storage), {{"format", "pt"}}));
    const ModelDir host = load_model_dir(tmpl);
    const ModelDir dev = load_model_dir(tmpl, [&](const GPTConfig&) { return m.gpu->params(); }, *m.gpu_be);
    CHECK(dev.params.empty());
    std::vector<float> got(params.size());
    m.gpu_be->copy_to_host(got.data(), m.gpu->params(), got.size() * sizeof(float));
    REQUIRE(host.params.size() == got.size());
    CHECK(std::memcmp(got.data(), host.params.data(), got.size() * sizeof(float)) == 0);
    std::filesystem::remove_all(tmpl);
  }
}
