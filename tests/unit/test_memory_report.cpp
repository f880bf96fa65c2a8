// The memory report (train/memory_report.h) on the CPU backend: every byte the backend holds is in the
// table, the activation rows are the activation table's bytes, the weights those of the estimate, and a
// buffer nobody names shows up as "unnamed".
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "fixtures.h"
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include "train/memory_report.h"
#include <xtrain/train/optim.h>

using namespace xtrain;

namespace {
GPTConfig report_config(Arch arch, int tie) {
  GPTConfig c = test::tiny_gpt2(/*L=*/3);
  c.V = 37;  // Vp pads it
  c.arch = arch, c.tie_embeddings = tie;
  return c;
}

// one training step of (B, T) on `model` with AdamW
void train_step(GPT& model, AdamW& opt, int B, int T) {
  std::vector<int32_t> tok(size_t(B) * T), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i)
    tok[i] = int32_t(uniform_u64(1, i) % 37), tgt[i] = int32_t(uniform_u64(2, i) % 37);
  model.zero_grads();
  model.forward(tok.data(), tgt.data(), B, T, true, 1.0f / float(B * T), nullptr);
  model.backward();
  opt.step(model, 1, 1e-3f, 1.0f, OptimConfig{});
}
}  // namespace

TEST_CASE("memory report: the categories sum to what the backend holds; activations are the table's") {
  const int B = 2, T = 7;  // B*T odd: buffers that are not multiples of the CPU's 64-byte blocks
  for (const auto& family : {std::pair{Arch::gpt2, 1}, std::pair{Arch::llama, 0}})
    for (int recompute : {0, 1, 2}) {
      const Arch arch = family.first;  // no structured binding: CAPTURE's lambda may not capture one (clang 14)
      const int tie = family.second;
      CAPTURE(int(arch));
      CAPTURE(recompute);
      auto be = make_cpu_backend();
      const GPTConfig c = report_config(arch, tie);
      GPT model(c, *be, recompute);
      model.init_params(3);
      AdamW opt(*be, model.num_params());
      train_step(model, opt, B, T);
      const MemoryReport r = memory_report(model, opt, *be);
      CHECK(r.unnamed_bytes == 0);
      CHECK(r.total() == be->memory_accounting().held_bytes);  // every byte held is in one row
      size_t by_category = 0;
      for (int k = 0; k < int(MemoryCategory::count); ++k) by_category += r.category_bytes(MemoryCategory(k));
      CHECK(by_category == r.total());
      CHECK(r.rounding_bytes > 0);  // odd sizes were rounded up to 64-byte blocks, and counted apart
      const TrainMemory est = estimate_train_memory(c, B, T, *be, recompute);
      CHECK(double(r.category_bytes(MemoryCategory::activations)) == est.activations);
      const double p = double(model.num_params()) * sizeof(float);
      CHECK(double(r.category_bytes(MemoryCategory::parameters)) == p);  // the CPU keeps no weight copy
      CHECK(double(r.category_bytes(MemoryCategory::gradients)) == p);
      CHECK(double(r.category_bytes(MemoryCategory::optimizer)) == 2 * p);
      CHECK(double(r.category_bytes(MemoryCategory::parameters) + r.category_bytes(MemoryCategory::gradients) +
                   r.category_bytes(MemoryCategory::optimizer)) == est.weights);
      CHECK(r.peak_bytes >= r.held_bytes);
    }
}

TEST_CASE("memory report: a buffer no table names is reported, not lost") {
  auto be = make_cpu_backend();
  const GPTConfig c = report_config(Arch::gpt2, 1);
  GPT model(c, *be, 0);
  model.init_params(3);
  AdamW opt(*be, model.num_params());
  train_step(model, opt, 2, 8);
  DeviceBuffer<float> stray(*be, 1000);  // 4000 bytes: a 4032-byte block
  const MemoryReport r = memory_report(model, opt, *be);
  CHECK(r.unnamed_bytes == be->allocation_bytes(stray.get()));
  CHECK(r.unnamed_bytes == 4032);
  CHECK(r.total() == be->memory_accounting().held_bytes);
  const std::string text = format_memory_report(r);
  CHECK(text.find("unnamed") != std::string::npos);
  CHECK(text.find("h*.attn.qkv.w") != std::string::npos);
  CHECK(text.find("= activations") != std::string::npos);
}
