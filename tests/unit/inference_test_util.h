// Helpers shared by the inference tests (CPU and CUDA): small GQA configs with a padded vocabulary in
// both model families, random parameters that make every tensor matter, the norm-wise logits
// difference, and the check of Backend::argmax_rows against the host sampler.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include "backend/greedy.h"
#include "fixtures.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/inference.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/sampler.h>

namespace xtrain::test {

// small_config: V 90 (Vp 128: the head's padding columns are exercised), GQA 4 query / 2 kv heads; gpt2
// by default. llama: its own head (lm_head) unless tied, and a rotary base other than the default, so
// a decoder that read the default would differ.
inline GPTConfig small_config(Arch arch = Arch::gpt2, bool tied = false) {
  GPTConfig c = model_config(90, 80, 32, 2, 4, 2, 8, 48);
  if (arch == Arch::llama) c.arch = arch, c.tie_embeddings = tied ? 1 : 0, c.rope_theta = 500.0f;
  return c;
}

// The configs every inference test runs on: each family (docs/design.md, "Model"), llama with its own
// head and tied.
struct NamedConfig {
  std::string name;
  GPTConfig cfg;
};
inline std::vector<NamedConfig> inference_configs() {
  return {{"gpt2", small_config()},
          {"llama", small_config(Arch::llama)},
          {"llama tied", small_config(Arch::llama, /*tied=*/true)}};
}

// random_params: every parameter N(0, sd) (biases and norm gains included; the padding rows [V, Vp) of
// wte and lm_head kept zero), so attention is far from uniform and every tensor matters.
inline void random_params(GPT& m, uint64_t seed, double sd) {
  std::vector<float> p(m.num_params());
  const GPTConfig& c = m.config();
  for (size_t i = 0; i < p.size(); ++i) p[i] = float(sd * normal(seed, i));
  for (size_t head : {size_t(kWte), final_param_index(c.L, kLmHead)}) {
    const ParamTensor& t = m.layout()[head];  // (Vp,C), or no elements (lm_head when tied)
    for (size_t i = t.offset + size_t(c.V) * c.C; i < t.offset + t.count; ++i) p[i] = 0.0f;
  }
  m.backend().copy_to_device(m.params(), p.data(), p.size() * sizeof(float));
}

// rel_diff: max |a - b| / max |b| over n values.
inline double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - b[i])), m = std::max(m, std::fabs(double(b[i])));
  return d / m;
}

// check_greedy_run: from the same state of `one` and `run` (decoders of one model and batch), `steps` greedy steps
// as one run.append_greedy_steps against one.append_greedy per step with each step's ids fed back by the host: the
// same (steps, B) ids, the same position afterwards and the same logits of the last step's ids. ids: the first
// step's tokens (B) in, the last step's ids out.
inline void check_greedy_run(Decoder& one, Decoder& run, std::vector<int32_t>& ids, int steps) {
  const std::vector<int32_t> first = ids;
  std::vector<int32_t> want;
  for (int k = 0; k < steps; ++k) {
    ids = std::vector<int32_t>(one.append_greedy(ids.data(), 1));
    want.insert(want.end(), ids.begin(), ids.end());
  }
  CHECK(run.append_greedy_steps(first.data(), steps) == want);
  CHECK(run.position() == one.position());
  for (size_t b = 0; b < ids.size(); ++b) CHECK(run.logit(int(b), ids[b]) == one.logit(int(b), ids[b]));
}

// check_argmax_rows: Backend::argmax_rows of `be` (all rows in one call, then each alone, also recorded) on 6 rows
// of an odd vocabulary (V 5001: a row alone is several blocks' slices on CUDA) with a padded row stride (5008; the
// padding holds NaN and a huge value, which must not be read) against sample_token with temperature 0 on the same
// values: the same id where the host sampler gives one, and where it throws, the code -1 - v of the lowest non-finite
// id whose fail_non_finite_logit message is the sampler's. The values are multiples of 1/8 in [-16, 16], exact in bf16
// (a bf16 backend stores them as they are), so random rows tie often. Rows: 0 random, its maximum placed at two ids far
// apart (the lower wins); 1 all zeros, -0 and +0 mixed (id 0); 2 the maximum at the last id V - 1 (past every whole
// 16-byte pack); 3 -inf at id 7 (non-finite: an error, as on the host); 4 NaN at 4500 and +inf at 600 (the error names
// 600); 5 random.
inline void check_argmax_rows(Backend& be) {
  const int rows = 6, V = 5001, ld = 5008;
  std::vector<float> l(size_t(rows) * ld);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::round(float(normal(77, i)) * 40.0f) / 8.0f;
  for (float& x : l) x = std::max(-16.0f, std::min(16.0f, x));
  for (int r = 0; r < rows; ++r)
    for (int v = V; v < ld; ++v) l[size_t(r) * ld + v] = v % 2 ? std::numeric_limits<float>::quiet_NaN() : 1e30f;
  float* r0 = l.data();
  for (int v = 0; v < V; ++v) r0[v] = std::min(r0[v], 15.0f);
  r0[123] = r0[4567] = 16.0f;
  for (int v = 0; v < V; ++v) l[size_t(ld) + v] = v % 3 ? 0.0f : -0.0f;
  float* r2 = l.data() + 2 * size_t(ld);
  for (int v = 0; v < V; ++v) r2[v] = std::min(r2[v], 15.0f);
  r2[V - 1] = 15.5f;
  l[3 * size_t(ld) + 7] = -std::numeric_limits<float>::infinity();
  l[4 * size_t(ld) + 4500] = std::numeric_limits<float>::quiet_NaN();
  l[4 * size_t(ld) + 600] = std::numeric_limits<float>::infinity();

  // to the backend in its activation type: fp32 as is, bf16 as the upper half of each float (exact here)
  const size_t ab = be.activation_bytes();
  std::vector<unsigned char> raw(l.size() * ab);
  for (size_t i = 0; i < l.size(); ++i) std::memcpy(raw.data() + i * ab, reinterpret_cast<const char*>(&l[i]) + 4 - ab, ab);
  DeviceBuffer<unsigned char> dev(be, raw.size());
  DeviceBuffer<int32_t> out(be, rows);
  be.copy_to_device(dev.get(), raw.data(), raw.size());
  be.argmax_rows(out.get(), dev.get(), rows, V, ld);
  std::vector<int32_t> got(rows);
  be.copy_to_host(got.data(), out.get(), sizeof(int32_t) * rows);

  CHECK(got[0] == 123);
  CHECK(got[1] == 0);
  CHECK(got[2] == V - 1);
  CHECK(got[3] == -1 - 7);
  CHECK(got[4] == -1 - 600);
  SamplerOptions greedy;
  greedy.temperature = 0.0f, greedy.top_k = 5, greedy.top_p = 0.5f;  // top-k/top-p do not matter at temperature 0
  for (int r = 0; r < rows; ++r) {
    CAPTURE(r);
    const float* row = l.data() + size_t(r) * ld;
    std::string host_error, device_error;
    int want = -1;
    try {
      want = sample_token(row, V, greedy, 0, 0);
    } catch (const Error& e) {
      host_error = e.what();
    }
    if (host_error.empty()) {
      CHECK(got[r] == want);
      continue;
    }
    REQUIRE(got[r] < 0);
    try {
      fail_non_finite_logit(-1 - got[r], row[-1 - got[r]]);
    } catch (const Error& e) {
      device_error = e.what();
    }
    CHECK(device_error == host_error);
  }
  // each row alone (a decoding step's launch: a CUDA backend spreads the row over several blocks), with its id
  // for the next step, launched back to back with no wait between: with the padded stride (16-byte packs), then
  // with stride V (not a whole number of packs: single columns); then those launches recorded (where the
  // backend records) and the recording launched twice in a row over junk. The same codes each time: a slice
  // counter left unreset, or a launch combining another launch's candidates, gives another code or none.
  const int alone = 2 * rows;
  DeviceBuffer<int32_t> codes(be, alone), ids(be, alone);
  auto launch_alone = [&] {
    for (int k = 0; k < alone; ++k)
      be.argmax_rows(codes.get() + k, dev.get() + size_t(k % rows) * ld * ab, 1, V, k < rows ? ld : V, ids.get() + k);
  };
  auto check_alone = [&] {
    std::vector<int32_t> code(alone), id(alone);
    be.copy_to_host(code.data(), codes.get(), sizeof(int32_t) * alone);
    be.copy_to_host(id.data(), ids.get(), sizeof(int32_t) * alone);
    for (int k = 0; k < alone; ++k) {
      CAPTURE(k);
      CHECK(code[k] == got[k % rows]);
      CHECK(id[k] == argmax_code_id(got[k % rows]));
    }
  };
  launch_alone();
  check_alone();
  if (const std::unique_ptr<StepGraph> graph = be.capture_graph(launch_alone)) {
    const std::vector<int32_t> junk(alone, V + 7);
    be.copy_to_device(codes.get(), junk.data(), sizeof(int32_t) * alone);
    be.copy_to_device(ids.get(), junk.data(), sizeof(int32_t) * alone);
    graph->launch();
    graph->launch();
    check_alone();
  }
  CHECK_NOTHROW(be.argmax_rows(out.get(), dev.get(), 0, V, ld));  // no rows: nothing to do
  CHECK_THROWS_AS(be.argmax_rows(out.get(), dev.get(), rows, V, V - 1), Error);  // row stride < V
  CHECK_THROWS_AS(be.argmax_rows(out.get(), dev.get(), rows, 0, ld), Error);
}

}  // namespace xtrain::test
