// The head and the cross-entropy in chunks of rows (GPT::set_logits_chunk_rows, src/model/model_acts.h):
// the chunk rule, the losses and gradients against one chunk, and the logits buffer's memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "fixtures.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include "model/model_acts.h"

using namespace xtrain;

namespace {

std::vector<int32_t> tokens_of(size_t n, int V, uint64_t key) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(uniform_u64(key, i) % uint64_t(V));
  return v;
}

// Run: the losses of K micro-steps (train) and of one evaluation forward, the gradients after them, and
// the head's gradient as the last forward left it (before that micro-step's backward).
struct Run {
  std::vector<double> losses;
  double eval_loss = 0;
  std::vector<float> grads, head_after_forward;
};

// K micro-steps of (B,T) with dropout p, gradients accumulated, at `chunk` rows (0 = automatic), then an
// evaluation forward of the first micro-batch. The CPU backend with per-row GEMMs (RowKernels::per_row):
// a forward row's bits do not depend on how many rows the GEMM has, as the chunking must not change them.
Run train(const GPTConfig& c, int chunk, int B, int T, int K, float p, int recompute = 0) {
  auto be = make_cpu_backend(RowKernels::per_row);
  GPT model(c, *be, recompute);
  model.set_logits_chunk_rows(chunk);
  CHECK(model.logits_chunk_rows() == chunk);
  model.init_params(17);
  const ParamTensor& head = model.layout()[c.tied() ? size_t(kWte) : final_param_index(c.L, kLmHead)];
  Run r;
  model.zero_grads();
  for (int k = 0; k < K; ++k) {
    const auto tok = tokens_of(size_t(B) * T, c.V, 100 + k), tgt = tokens_of(size_t(B) * T, c.V, 200 + k);
    DropoutKeys drop{p, {}};
    for (int b = 0; b < B; ++b) drop.seq_keys.push_back(hash_key(300 + k, b));
    r.losses.push_back(model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, &drop));
    r.head_after_forward.assign(model.grads() + head.offset, model.grads() + head.offset + head.count);
    model.backward();
  }
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  const auto tok = tokens_of(size_t(B) * T, c.V, 100), tgt = tokens_of(size_t(B) * T, c.V, 200);
  r.eval_loss = model.forward(tok.data(), tgt.data(), B, T, false, 0.0f, nullptr);
  const int N = B * T;
  if (chunk == 0 || chunk >= N) CHECK(model.logits() != nullptr);  // one chunk: the whole logits
  else CHECK_THROWS_WITH_AS(model.logits(), doctest::Contains("chunks of rows"), Error);
  return r;
}

}  // namespace

TEST_CASE("logits chunk rows: all rows where they fit, else the fewest equal chunks under the bound") {
  GPTConfig llama1b = test::model_config(128256, 2048, 2048, 16, 32, 8, 64, 8192);
  llama1b.arch = Arch::llama;
  // Llama-3.2-1B, bf16, B 4 x T 2048: 8 chunks of 1024 rows, a buffer of 250.5 MiB instead of 2.0 GiB (the
  // figures model_acts.h and docs/usage.md give)
  CHECK(logits_chunk_rows(llama1b, 8192, 2, 0) == 1024);
  CHECK(logits_buffer_rows(llama1b, 8192, 2, 0) == 1024);  // the chunk used, not the 1046 rows the bound allows
  CHECK(double(logits_buffer_rows(llama1b, 8192, 2, 0)) * llama1b.Vp() * 2 / (1 << 20) == 250.5);
  CHECK(std::round(8192.0 * llama1b.Vp() * 2 / (1 << 30) * 10) / 10 == 2.0);
  // cl100k's vocabulary in fp32, 1024 rows: two chunks of 512, and a buffer of 512 rows, not of the 669 that fit
  GPTConfig cl100k = test::model_config(100277, 1024, 64, 2, 4, 4, 16, 256);
  CHECK(logits_chunk_rows(cl100k, 1024, 4, 0) == 512);
  CHECK(logits_buffer_rows(cl100k, 1024, 4, 0) == 512);
  CHECK(logits_chunk_most(cl100k, 4, 0) > 600);
  CHECK(logits_chunk_rows(llama1b, 1000, 2, 0) == 1000);  // fits: one chunk
  CHECK(logits_chunk_rows(llama1b, 8192, 2, 3) == 3);     // asked for
  CHECK(logits_chunk_rows(llama1b, 2, 2, 3) == 2);        // capped at the rows
  CHECK(logits_buffer_rows(llama1b, 8192, 2, 3) == 3);
  const GPTConfig tiny = test::tiny_gpt2();
  CHECK(logits_chunk_rows(tiny, 16, 4, 0) == 16);  // a small model keeps one chunk
  // a vocabulary of at most kLogitsChunkVocab keeps one chunk whatever the logits' size: GPT-2 124M, B 16 x T
  // 1024 (1.5 GiB of bf16 logits); one more token than the bound and it chunks
  const GPTConfig gpt2_124m = test::gpt2_124m();
  CHECK(logits_chunk_rows(gpt2_124m, 16384, 2, 0) == 16384);
  CHECK(logits_buffer_rows(gpt2_124m, 16384, 2, 0) == 16384);
  CHECK(logits_chunk_rows(gpt2_124m, 16384, 2, 4096) == 4096);  // asked for
  GPTConfig over = gpt2_124m;
  over.V = kLogitsChunkVocab + 1;
  CHECK(logits_chunk_rows(over, 16384, 2, 0) < 16384);
  // the buffer for N rows is the chunk N rows use; every chunk is at most its rows and under the bound
  for (int req : {0, 5})
    for (int N = 1; N <= 20000; N += 7) {
      REQUIRE(logits_buffer_rows(llama1b, N, 2, req) == logits_chunk_rows(llama1b, N, 2, req));
      const int R = logits_chunk_rows(llama1b, N, 2, req);
      REQUIRE(R >= 1);
      REQUIRE(R <= N);
      if (req == 0) REQUIRE(size_t(R) * 128256 * 2 <= kLogitsChunkBytes);
    }
  auto be = make_cpu_backend();
  GPT model(tiny, *be);
  CHECK_THROWS_AS(model.set_logits_chunk_rows(-1), Error);
}

// Chunks of 3, 5 and 13 rows of N = 14 (none a divisor: a short last chunk) against one chunk, over K = 2
// micro-steps with and without dropout, for gpt2 (tied), llama with its own head and tied. The losses are
// the same bits: a row's head GEMM (per-row kernels) and its cross-entropy do not see the other rows. The
// gradients differ only by fp32 summation order: the head's dW sums its N rows chunk by chunk, and the BLAS
// kernel of the head's dinp GEMM (over Vp) depends on its row count, so its sums round differently; every
// later gradient inherits that. Measured (OpenBLAS, x86-64): at most 4.6e-7 of a tensor's largest gradient
// (~8 ulp of it); bound kChunkRel = 2e-6 (~34 ulp: room for another BLAS kernel's blocking). A wrong
// chunking (a row left out or counted twice, a chunk's dW assigned, not added) moves a gradient by about a
// row's share of it, 1/N = 7%.
TEST_CASE("the head and loss in chunks of rows give the losses and gradients of one chunk") {
  constexpr double kChunkRel = 2e-6;
  const int B = 2, T = 7, K = 2;  // N = 14 rows a micro-step
  for (const GPTConfig& c : {test::tiny_gpt2(), test::tiny_llama(0), test::tiny_llama(1)}) {
    CAPTURE(c.describe());
    for (float p : {0.0f, 0.1f}) {
      CAPTURE(p);
      const Run whole = train(c, 0, B, T, K, p);
      CHECK(std::any_of(whole.grads.begin(), whole.grads.end(), [](float g) { return g != 0.0f; }));
      for (int chunk : {3, 5, 13}) {
        CAPTURE(chunk);
        const Run parts = train(c, chunk, B, T, K, p);
        CHECK(parts.losses == whole.losses);
        CHECK(parts.eval_loss == whole.eval_loss);
        double worst_rel = 0;
        for (const ParamTensor& t : param_layout(c)) {
          double worst = 0, scale = 0;
          for (size_t i = t.offset; i < t.offset + t.count; ++i) {
            worst = std::max(worst, double(std::fabs(parts.grads[i] - whole.grads[i])));
            scale = std::max(scale, double(std::fabs(whole.grads[i])));
          }
          CAPTURE(t.name);
          CHECK(worst <= kChunkRel * scale);
          if (scale > 0) worst_rel = std::max(worst_rel, worst / scale);
        }
        MESSAGE(c.describe() << " p " << p << ", chunks of " << chunk << " rows: gradients within " << worst_rel
                             << " of each tensor's largest (bound " << kChunkRel << ")");
        // the untied head's gradient is final when the forward returns (backward() does not write it: the
        // bucketed all-reduce may send it from the final norm's hook on)
        if (!c.tied()) {
          const ParamTensor head = param_layout(c)[final_param_index(c.L, kLmHead)];  // a copy: the layout is a temporary
          CHECK(std::equal(parts.head_after_forward.begin(), parts.head_after_forward.end(),
                           parts.grads.begin() + long(head.offset)));
        }
        // --recompute 2 with the same chunks: bitwise the same (the recompute does not touch the head)
        const Run recomputed = train(c, chunk, B, T, K, p, 2);
        CHECK(recomputed.losses == parts.losses);
        CHECK(recomputed.grads == parts.grads);
      }
    }
  }
}

// The logits buffer holds one chunk: the estimate and the memory report count R x Vp, and the report's row
// says how many of the rows that is.
TEST_CASE("the logits buffer holds one chunk of rows, in the estimate and the memory report") {
  const GPTConfig c = test::tiny_llama(0);
  const int B = 2, T = 7, N = B * T;
  auto be = make_cpu_backend();
  const double whole = estimate_train_memory(c, B, T, *be, 0, 0).activations;
  const double three = estimate_train_memory(c, B, T, *be, 0, 3).activations;
  CHECK(whole - three == double(N - 3) * c.Vp() * sizeof(float));
  CHECK(estimate_train_memory(c, B, T, *be, 0, 100).activations == whole);  // capped at the N rows
  for (int chunk : {0, 3}) {
    GPT model(c, *be);
    model.set_logits_chunk_rows(chunk);
    model.init_params(5);
    const auto tok = tokens_of(size_t(N), c.V, 1), tgt = tokens_of(size_t(N), c.V, 2);
    model.zero_grads();
    model.forward(tok.data(), tgt.data(), B, T, true, 1.0f, nullptr);
    const std::vector<MemoryEntry> entries = model.memory_entries();
    const auto logits =
        std::find_if(entries.begin(), entries.end(), [](const MemoryEntry& e) { return e.name == "logits"; });
    REQUIRE(logits != entries.end());
    CHECK(logits->bytes == size_t(chunk ? chunk : N) * c.Vp() * sizeof(float));
    CHECK(logits->why.find(chunk ? "3 of the 14 rows (B 2 x T 7), a chunk at a time (--logits-chunk-rows 3)"
                                 : "all 14 rows (B 2 x T 7), one chunk (--logits-chunk-rows 0: automatic)") != std::string::npos);
    // an evaluation of another length after it: the buffers are the evaluation's, and the row says so
    const auto eval_tok = tokens_of(size_t(B) * 5, c.V, 3), eval_tgt = tokens_of(size_t(B) * 5, c.V, 4);
    model.forward(eval_tok.data(), eval_tgt.data(), B, 5, false, 0.0f, nullptr);
    const std::vector<MemoryEntry> after = model.memory_entries();
    const auto eval_logits =
        std::find_if(after.begin(), after.end(), [](const MemoryEntry& e) { return e.name == "logits"; });
    REQUIRE(eval_logits != after.end());
    CHECK(eval_logits->bytes == size_t(chunk ? chunk : B * 5) * c.Vp() * sizeof(float));
    CHECK(eval_logits->why.find(chunk ? "3 of the 10 rows (B 2 x T 5)" : "all 10 rows (B 2 x T 5)") != std::string::npos);
  }
}

// Buffers for a larger batch serve a smaller one, whose automatic chunk may be larger (all its rows fit under
// the bound, the larger batch's are split in equal chunks): the logits buffer alone grows to that chunk, so
// the smaller batch chunks as in buffers of its own, and the memory report says so. A vocabulary of 671,088
// (fp32: at most 99 rows under 256 MiB): 200 rows are 3 chunks of 67, 90 rows one chunk.
TEST_CASE("a smaller batch with a larger chunk grows the logits buffer alone") {
  const GPTConfig c = test::model_config(671088, 10, 8, 1, 2, 2, 4, 16);
  auto be = make_cpu_backend();
  REQUIRE(logits_chunk_most(c, 4, 0) == 99);
  GPT model(c, *be, 0, /*with_grads=*/false);
  model.init_params(3);
  auto logits_entry = [&] {
    const std::vector<MemoryEntry> entries = model.memory_entries();
    const auto e = std::find_if(entries.begin(), entries.end(), [](const MemoryEntry& m) { return m.name == "logits"; });
    REQUIRE(e != entries.end());
    return *e;
  };
  const auto tok = tokens_of(200, c.V, 7), tgt = tokens_of(200, c.V, 8);
  model.set_batch(tok.data(), tgt.data(), 20, 10);
  CHECK(logits_entry().bytes == size_t(67) * c.Vp() * sizeof(float));
  CHECK(logits_entry().why.find("67 of the 200 rows (B 20 x T 10), a chunk at a time") != std::string::npos);
  const uint64_t generation = model.buffers_generation();
  const double loss = model.forward(tok.data(), tgt.data(), 9, 10, false, 0.0f, nullptr);  // 90 rows, one chunk
  CHECK(model.buffers_generation() != generation);  // a recorded graph records again
  CHECK(logits_entry().bytes == size_t(90) * c.Vp() * sizeof(float));
  CHECK(logits_entry().why.find("90 of the 200 rows (B 20 x T 10), grown to a smaller batch's larger chunk") !=
        std::string::npos);
  CHECK(model.logits() != nullptr);  // one chunk: the whole logits, as in buffers of its own
  GPT own(c, *be, 0, false);
  own.init_params(3);
  CHECK(own.forward(tok.data(), tgt.data(), 9, 10, false, 0.0f, nullptr) == loss);
}

// The first micro-step writes the gradients (Grad::assign, no memset): with the head in chunks, the forward's
// first chunk writes the head's gradient and the later chunks add, so over a buffer of NaNs the gradients
// are bitwise those of zero_grads() + accumulating, chunked the same way (tied wte: the head part written
// whole, the embedding's rows added last). A backward in another mode than its forward is refused.
TEST_CASE("chunks of rows: the first micro-step assigns the head's gradient over NaNs, bitwise") {
  const int B = 2, T = 7, K = 2, chunk = 3;
  for (const GPTConfig& c : {test::tiny_gpt2(), test::tiny_llama(0), test::tiny_llama(1)}) {
    CAPTURE(c.describe());
    auto run = [&](Grad first) {
      auto be = make_cpu_backend();
      GPT model(c, *be);
      model.set_logits_chunk_rows(chunk);
      model.init_params(23);
      if (first == Grad::assign) std::fill(model.grads(), model.grads() + model.num_params(), std::nanf(""));
      else model.zero_grads();
      for (int k = 0; k < K; ++k) {
        const auto tok = tokens_of(size_t(B) * T, c.V, 400 + k), tgt = tokens_of(size_t(B) * T, c.V, 500 + k);
        const DropoutKeys drop{0.1f, {hash_key(600 + k, 0), hash_key(600 + k, 1)}};
        const Grad mode = k == 0 ? first : Grad::accumulate;
        model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, &drop, mode);
        model.backward(mode);
      }
      return std::vector<float>(model.grads(), model.grads() + model.num_params());
    };
    const std::vector<float> zeroed = run(Grad::accumulate), assigned = run(Grad::assign);
    size_t differ = 0;
    for (size_t i = 0; i < zeroed.size(); ++i) differ += std::memcmp(&zeroed[i], &assigned[i], sizeof(float)) != 0;
    CHECK(differ == 0);
  }
  auto be = make_cpu_backend();
  const GPTConfig c = test::tiny_llama(1);
  GPT model(c, *be);
  model.set_logits_chunk_rows(chunk);
  model.init_params(3);
  const auto tok = tokens_of(size_t(B) * T, c.V, 1), tgt = tokens_of(size_t(B) * T, c.V, 2);
  model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, nullptr, Grad::accumulate);
  CHECK_THROWS_WITH_AS(model.backward(Grad::assign), doctest::Contains("both take one mode"), Error);
  model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, nullptr, Grad::assign);
  CHECK_THROWS_AS(model.backward(Grad::accumulate), Error);
  model.backward(Grad::assign);
}
