// Model-level tests on the CPU backend: the wiring of forward/backward (whole-model gradients
// against finite differences, with and without dropout), forward's parts for a recorded step, activation recompute, overfitting one
// batch, the LR schedule, clipping and the parameter layout.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "fixtures.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/train/config.h>
#include <xtrain/model/model.h>
#include <xtrain/train/optim.h>

using namespace xtrain;

namespace {

using test::tiny_gpt2;
using test::tiny_llama;

void random_tokens(std::vector<int32_t>& v, int V, uint64_t key) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(uniform_u64(key, i) % V);
}

}  // namespace

TEST_CASE("family traits: the families' parts, --arch's words and the refusals of fields a family lacks") {
  GPTConfig g = tiny_gpt2(), l = tiny_llama(0);
  CHECK((!g.rmsnorm() && !g.rotary() && !g.swiglu() && g.traits().biases && g.traits().scaled_residual_init &&
         !g.traits().untied_head));
  CHECK((l.rmsnorm() && l.rotary() && l.swiglu() && !l.traits().biases && !l.traits().scaled_residual_init &&
         l.traits().untied_head));
  CHECK(g.fc_width() == g.F);
  CHECK(l.fc_width() == 2 * l.F);  // [gate | up]
  for (const FamilyTraits& f : kFamilyTraits) {
    CHECK(parse_arch(f.name) == f.arch);
    CHECK(std::string(to_string(f.arch)) == f.name);
  }
  CHECK_THROWS_WITH_AS(parse_arch("mistral"), "--arch must be gpt2 or llama, got 'mistral'", UsageError);
  // absent parts: no wpe, biases of zero elements for llama; both present for gpt2
  for (const ParamTensor& t : param_layout(l))
    if (t.spec->in == ParamIn::gpt2) CHECK_MESSAGE(t.count == 0, t.name);
  for (const ParamTensor& t : param_layout(g)) CHECK_MESSAGE((t.count > 0) == (t.spec->in != ParamIn::untied), t.name);
  // a field read only by a part the family lacks is refused, naming the option
  GPTConfig bad = g;
  bad.rope_theta = 500.0f;
  CHECK_THROWS_WITH_AS(bad.validate(), "--rope-theta needs --arch llama (GPT-2 has learned positions)", UsageError);
  bad = g, bad.tie_embeddings = 0;
  CHECK_THROWS_WITH_AS(bad.validate(), "--tie-embeddings false needs --arch llama (GPT-2's head is always wte)",
                       UsageError);
  bad = l, bad.HS = 3, bad.NH = 4, bad.C = 12;
  CHECK_THROWS_WITH_AS(bad.validate(),
                       "--head-dim must be even with --arch llama (rotary embeddings rotate channel pairs), got 3",
                       UsageError);
  bad = g, bad.arch = static_cast<Arch>(7);
  CHECK_THROWS_WITH_AS(bad.validate(), "--arch: unknown model family 7", UsageError);
  CHECK(l.describe().find(" arch=llama norm_eps=1e-05 rope_theta=10000 tied=0") != std::string::npos);
  CHECK(g.describe().find("arch") == std::string::npos);  // the default family's line names no family fields
}

TEST_CASE("parameter layout is contiguous, complete and decays only 2-D weights") {
  GPTConfig c = tiny_gpt2();
  auto layout = param_layout(c);
  size_t off = 0;
  for (const auto& t : layout) {
    CHECK(t.offset == off);
    CHECK(t.decay == (t.shape.size() == 2));
    off += t.count;
  }
  const size_t QKV = c.qkv_width();
  const size_t per_layer = 4 * c.C + QKV * c.C + QKV + c.C * c.NH * c.HS + c.C + 2 * c.F * c.C + c.F + c.C;
  CHECK(c.Vp() == 64);  // V = 32 rounded up to a multiple of 64
  CHECK(off == static_cast<size_t>(c.Vp()) * c.C + c.maxT * c.C + c.L * per_layer + 2 * c.C);
  GPTConfig g2 = c;
  g2.V = 50257;
  CHECK(g2.Vp() == 50304);  // GPT-2's vocabulary padded as in llm.c
}

TEST_CASE("padded vocabulary rows of wte start at zero, get no gradient and do not change the loss") {
  auto be = make_cpu_backend();
  const GPTConfig c = tiny_gpt2();
  GPT model(c, *be);
  model.init_params(7);
  const size_t first = static_cast<size_t>(c.V) * c.C, end = static_cast<size_t>(c.Vp()) * c.C;  // wte offset 0
  for (size_t i = first; i < end; ++i) CHECK(model.params()[i] == 0.0f);
  const int B = 2, T = 8;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  random_tokens(tok, c.V, 3), random_tokens(tgt, c.V, 4);
  model.zero_grads();
  const double loss = model.forward(tok.data(), tgt.data(), B, T, true, 1.0f, nullptr);
  model.backward();
  for (size_t i = first; i < end; ++i) CHECK(model.grads()[i] == 0.0f);
  for (size_t i = first; i < end; ++i) model.params()[i] = 5.0f;  // large logits in the padded columns
  CHECK(model.forward(tok.data(), tgt.data(), B, T, false, 1.0f, nullptr) == loss);
}

// A model made only to decode (xtrain_generate) has no gradient buffer: the same loss from the same
// parameters, no memory for gradients, and the calls that would write gradients refuse: zero_grads, a
// training forward (it runs the head's backward) and backward.
TEST_CASE("a model without gradients computes the same loss and refuses training and zero_grads") {
  auto be = make_cpu_backend();
  const GPTConfig c = tiny_gpt2();
  GPT full(c, *be), decode_only(c, *be, 0, /*with_grads=*/false);
  full.init_params(7), decode_only.init_params(7);
  CHECK(decode_only.grads() == nullptr);
  CHECK(be->allocation_bytes(decode_only.params()) > 0);
  const int B = 2, T = 8;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  random_tokens(tok, c.V, 3), random_tokens(tgt, c.V, 4);
  CHECK(decode_only.forward(tok.data(), tgt.data(), B, T, false, 1.0f, nullptr) ==
        full.forward(tok.data(), tgt.data(), B, T, false, 1.0f, nullptr));
  CHECK_THROWS_WITH_AS(decode_only.zero_grads(), doctest::Contains("without gradients"), Error);
  CHECK_THROWS_WITH_AS(decode_only.forward(tok.data(), tgt.data(), B, T, true, 1.0f, nullptr),
                       doctest::Contains("without gradients"), Error);
  CHECK_THROWS_AS(decode_only.backward(), Error);
}

// Activation buffers sized for a larger batch serve a smaller one; backward() must then differentiate
// the smaller batch of the last forward only (not the stale rows behind it), also with dropout, whose
// per-sequence keys are as many as that batch.
TEST_CASE("backward after a smaller batch than an earlier one differentiates that batch only") {
  auto be = make_cpu_backend();
  const GPTConfig c = tiny_gpt2();
  const int T = 8;
  std::vector<int32_t> tok2(2 * T), tgt2(2 * T), tok1(T), tgt1(T);
  random_tokens(tok2, c.V, 31), random_tokens(tgt2, c.V, 32), random_tokens(tok1, c.V, 33), random_tokens(tgt1, c.V, 34);
  DropoutKeys d1{0.1f, {hash_key(5, 1)}}, d2{0.1f, {hash_key(5, 2), hash_key(5, 3)}};
  GPT fresh(c, *be), reused(c, *be);
  fresh.init_params(9), reused.init_params(9);
  fresh.zero_grads();
  fresh.forward(tok1.data(), tgt1.data(), 1, T, true, 1.0f, &d1);
  fresh.backward();
  reused.forward(tok2.data(), tgt2.data(), 2, T, true, 1.0f, &d2);  // buffers for B = 2
  reused.zero_grads();
  reused.forward(tok1.data(), tgt1.data(), 1, T, true, 1.0f, &d1);
  reused.backward();
  double max_diff = 0.0;
  for (size_t i = 0; i < fresh.num_params(); ++i)
    max_diff = std::max(max_diff, double(std::fabs(fresh.grads()[i] - reused.grads()[i])));
  CHECK(max_diff == 0.0);  // the same float ops in the same order
  reused.forward(tok1.data(), tgt1.data(), 1, T, false, 1.0f, nullptr);
  CHECK_THROWS_AS(reused.backward(), Error);  // an evaluation forward leaves no dlogits
}

// The parts of forward that a recorded step calls separately (--cuda-graph): set_batch, forward_pass,
// loss_sum(B, T) give forward's loss bit for bit and the same gradients; loss_sum sums the shape it is
// told, not the last forward's (a launch of a recorded forward runs no host code), within the buffers;
// a new batch, or buffers reallocated for a larger one, refuse backward() until a forward of it; the
// reallocation changes buffers_generation (a recorded graph holds the old addresses), a smaller batch
// in the same buffers does not.
TEST_CASE("set_batch, forward_pass and loss_sum: forward's parts and their contracts") {
  auto be = make_cpu_backend();
  const GPTConfig c = tiny_gpt2();
  const int T = 8;
  std::vector<int32_t> tok2(2 * T), tgt2(2 * T), tok4(4 * T), tgt4(4 * T);
  random_tokens(tok2, c.V, 41), random_tokens(tgt2, c.V, 42), random_tokens(tok4, c.V, 43), random_tokens(tgt4, c.V, 44);
  GPT whole(c, *be), parts(c, *be);
  whole.init_params(13), parts.init_params(13);
  whole.zero_grads(), parts.zero_grads();
  const double loss = whole.forward(tok2.data(), tgt2.data(), 2, T, true, 0.5f, nullptr);
  whole.backward();
  parts.set_batch(tok2.data(), tgt2.data(), 2, T);
  const uint64_t generation = parts.buffers_generation();
  parts.forward_pass(2, T, true, 0.5f, nullptr);
  parts.backward();
  CHECK(parts.loss_sum(2, T) == loss);
  for (size_t i = 0; i < whole.num_params(); ++i) REQUIRE(parts.grads()[i] == whole.grads()[i]);
  // a 1-sequence evaluation forward in the same buffers: loss_sum(1, T) is its loss, and loss_sum(2, T)
  // still covers two sequences' positions (what a launch of the recorded 2-sequence forward would read)
  const double one = parts.forward(tok2.data(), tgt2.data(), 1, T, false, 0.5f, nullptr);
  CHECK(parts.buffers_generation() == generation);
  CHECK(parts.loss_sum(1, T) == one);
  CHECK(parts.loss_sum(2, T) != one);
  CHECK_THROWS_AS(parts.loss_sum(3, T), Error);      // beyond the buffers
  CHECK_THROWS_AS(parts.loss_sum(2, T - 1), Error);  // another sequence length
  CHECK_THROWS_AS(parts.forward_pass(2, T, true, 0.5f, nullptr), Error);  // set_batch (in forward) copied 1
  parts.set_batch(tok2.data(), tgt2.data(), 2, T);
  CHECK_THROWS_AS(parts.backward(), Error);  // no forward of this batch yet
  parts.forward_pass(2, T, true, 0.5f, nullptr);
  parts.set_batch(tok4.data(), tgt4.data(), 4, T);  // reallocates for 4 sequences
  CHECK(parts.buffers_generation() != generation);
  CHECK_THROWS_AS(parts.backward(), Error);
}

// --recompute auto: 1 for the SwiGLU family (its activation is one elementwise pass over the kept gate/up
// product), 0 for GELU (fused into the fc matmul on CUDA); a model built with it shares fch_act.
TEST_CASE("auto_recompute recomputes SwiGLU's output, not GELU's") {
  CHECK(auto_recompute(tiny_gpt2()) == 0);
  CHECK(auto_recompute(tiny_llama(0)) == 1);
  CHECK(auto_recompute(tiny_llama(1)) == 1);
  TrainConfig t;
  CHECK(t.recompute == -1);  // the option's default is auto
}

// The first micro-step's backward WRITES the weight gradients (Grad::assign: each one's first writer overwrites
// it, the embeddings' partial scatter-add after a zeroing of just wte's and wpe's) instead of adding them to a
// buffer zero_grads() cleared: bit for bit the same gradients, for one and two micro-steps (the second adds), with
// and without dropout and --recompute, for each family (gpt2; llama with its own head, tied, and its bias tensors
// of zero elements: null gradients), whatever the buffer held before: NaN here, so a writer that read the old
// values or an element no writer covers would show. An accumulating backward over the same NaNs keeps them all,
// so the NaNs do reach every element unless something writes it.
TEST_CASE("backward(Grad::assign) over a buffer of NaNs gives bitwise zero_grads() + accumulating backward") {
  auto be = make_cpu_backend();
  const int B = 2, T = 8;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  for (GPTConfig c : {tiny_gpt2(), tiny_llama(0), tiny_llama(1)})
    for (int recompute : {0, 2})
      for (float p : {0.0f, 0.1f})
        for (int K : {1, 2}) {
          CAPTURE(c.describe());
          CAPTURE(recompute);
          CAPTURE(p);
          CAPTURE(K);
          const DropoutKeys drop{p, {hash_key(8, 1), hash_key(8, 2)}};
          // run: K micro-steps; the first backward's mode `first` over a buffer zeroed (zero_grads) or of NaNs
          auto run = [&](Grad first, bool nan_filled) {
            GPT model(c, *be, recompute);
            model.init_params(21);
            if (nan_filled) {
              const std::vector<float> nans(model.num_params(), std::nanf(""));
              be->copy_to_device(model.grads(), nans.data(), nans.size() * sizeof(float));
            } else {
              model.zero_grads();
            }
            for (int k = 0; k < K; ++k) {
              random_tokens(tok, c.V, 60 + k), random_tokens(tgt, c.V, 70 + k);
              const Grad mode = k == 0 ? first : Grad::accumulate;  // the forward writes the head's gradient
              model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, &drop, mode);
              model.backward(mode);
            }
            std::vector<float> g(model.num_params());
            be->copy_to_host(g.data(), model.grads(), g.size() * sizeof(float));
            return g;
          };
          const std::vector<float> zeroed = run(Grad::accumulate, false), assigned = run(Grad::assign, true);
          REQUIRE(assigned.size() == zeroed.size());
          size_t differ = 0, nans = 0;
          for (size_t i = 0; i < zeroed.size(); ++i) {
            differ += std::memcmp(&zeroed[i], &assigned[i], sizeof(float)) != 0;
            nans += std::isnan(assigned[i]);
          }
          CHECK(nans == 0);
          CHECK(differ == 0);
          if (recompute == 0 && p == 0.0f && K == 1) {  // the NaNs are there to be found
            const std::vector<float> stale = run(Grad::accumulate, true);
            CHECK(std::all_of(stale.begin(), stale.end(), [](float x) { return std::isnan(x); }));
          }
        }
}

// Activation recompute runs the forward's ops on the forward's inputs again in the backward, so the
// gradients are the same bits, also with dropout, over two micro-steps (gradients accumulate) and
// with buffers shared by the layers; only the activation memory changes, by the shared buffers. For
// each family: gpt2, llama with its own head and tied.
TEST_CASE("recompute 1 and 2 give bitwise the loss and gradients of 0 and share buffers across layers") {
  auto be = make_cpu_backend();
  for (GPTConfig c : {tiny_gpt2(), tiny_llama(0), tiny_llama(1)}) {
    c.L = 3;  // more than two layers share a buffer
    CAPTURE(c.describe());
    const int B = 2, T = 8;
    std::vector<int32_t> tok(B * T), tgt(B * T);
    DropoutKeys drop{0.1f, {hash_key(6, 1), hash_key(6, 2)}};
    auto run = [&](int recompute, std::vector<double>* losses) {
      GPT model(c, *be, recompute);
      CHECK(model.recompute() == recompute);
      model.init_params(11);
      model.zero_grads();
      for (uint64_t micro = 0; micro < 2; ++micro) {
        random_tokens(tok, c.V, 40 + micro), random_tokens(tgt, c.V, 50 + micro);
        losses->push_back(model.forward(tok.data(), tgt.data(), B, T, true, 0.5f, &drop));
        model.backward();
      }
      return std::vector<float>(model.grads(), model.grads() + model.num_params());
    };
    std::vector<double> loss0, loss1, loss2;
    const std::vector<float> g0 = run(0, &loss0), g1 = run(1, &loss1), g2 = run(2, &loss2);
    CHECK(loss1 == loss0);
    CHECK(loss2 == loss0);
    CHECK(g1 == g0);  // element-wise ==: the same floats
    CHECK(g2 == g0);
    CHECK(std::any_of(g0.begin(), g0.end(), [](float g) { return g != 0.0f; }));
    // memory: recompute 1 keeps 1 of L GELU (llama: SwiGLU) outputs (B,T,F), 2 also 1 of L ln1 and ln2
    // (B,T,C); fp32
    const double N = B * T, f32 = sizeof(float);
    const double a0 = estimate_train_memory(c, B, T, *be, 0).activations;
    const double a1 = estimate_train_memory(c, B, T, *be, 1).activations;
    const double a2 = estimate_train_memory(c, B, T, *be, 2).activations;
    CHECK(a0 - a1 == (c.L - 1) * N * c.F * f32);
    CHECK(a1 - a2 == 2 * (c.L - 1) * N * c.C * f32);
    CHECK_THROWS_AS(GPT(c, *be, 3), Error);
    CHECK_THROWS_AS(GPT(c, *be, -1), Error);
  }
}

namespace {

// Whole-model gradient check in float: central differences with a step large enough for float
// rounding. Ops are checked in double elsewhere (test_cpu_ops); this catches WIRING mistakes
// (residual routing, dropout masks in backward, tied head), which give O(1) relative errors.
// kRelTol 2e-2 at h = 5e-3: truncation error O(h^2) was measured to dominate at h = 1e-2 and 2e-2
// (failures grow with h), while float rounding (~1e-7 * sum of losses / h) stays below it at 2.5e-3.
// `samples` entries of every tensor present in c's family (absent rows have no elements), dropout p.
// qk_scale multiplies the q and k rows of every qkv weight after init: at init (std 0.02) attention is
// near uniform and the q, k gradients fall under kAbsFloor, where a wrong one (rotary's backward left
// out, say) would pass; scaled by 25 the attention logits are O(1) and those gradients are checked.
// h: the step (kH above).
void check_whole_model_gradients(const GPTConfig& c, float p, int samples = 3, float qk_scale = 1.0f,
                                 double h = 5e-3) {
  constexpr double kRelTol = 2e-2, kAbsFloor = 2e-3;
  const double kH = h;
  CAPTURE(p);
  CAPTURE(qk_scale);
  auto be = make_cpu_backend();
  GPT model(c, *be);
  model.init_params(7);
  for (int l = 0; l < c.L; ++l) {
    // (QKV,C): q rows, then k rows, then v rows (model_params.h)
    float* qkv = model.params() + model.layout()[layer_param_index(l, kQkvW)].offset;
    for (size_t i = 0; i < size_t(c.NH + c.KVH) * c.HS * c.C; ++i) qkv[i] *= qk_scale;
  }
  const int B = 2, T = 8;
  std::vector<int32_t> tok(B * T), tgt(B * T);
  random_tokens(tok, c.V, 1), random_tokens(tgt, c.V, 2);
  DropoutKeys drop;
  drop.p = p;
  drop.seq_keys = {11, 12};
  model.zero_grads();
  model.forward(tok.data(), tgt.data(), B, T, true, 1.0f, &drop);
  model.backward();
  std::vector<float> g(model.grads(), model.grads() + model.num_params());
  int checked = 0, present = 0;
  for (const auto& t : model.layout()) {
    if (t.count == 0) continue;  // a row absent from this family
    ++present;
    for (int k = 0; k < samples; ++k) {
      const size_t i = t.offset + uniform_u64(99, checked) % t.count;
      float* w = model.params() + i;
      const float w0 = *w;
      *w = w0 + static_cast<float>(kH);
      // train=true so dropout applies with the same masks as in the analytic pass (dloss 0:
      // the fused kernel's gradient output is not used here)
      const double lp = model.forward(tok.data(), tgt.data(), B, T, true, 0.0f, &drop);
      *w = w0 - static_cast<float>(kH);
      const double lm = model.forward(tok.data(), tgt.data(), B, T, true, 0.0f, &drop);
      *w = w0;
      const double fd = (lp - lm) / (2 * kH);
      CAPTURE(t.name);
      CAPTURE(i);
      CHECK(std::fabs(fd - g[i]) <= kRelTol * std::max(std::fabs(fd), kAbsFloor / kRelTol));
      ++checked;
    }
  }
  CHECK(checked == samples * present);
}

}  // namespace

// The gradient checks, one row per family. present: the tensors with elements (the others are rows
// absent from the family). gpt2: every row but the untied head (its head is wte). llama: wte, 6 per block
// (ln1.w, qkv.w, attn.proj.w, ln2.w, fc.w, mlp.proj.w), lnf.w, and lm_head when untied; 8 samples per
// tensor, q and k scaled by 25 (rotary's gradient checked, not under the floor), and h = 2e-3: llama's wte
// feeds an RMSNorm directly (no wpe added; rstd ~ 1/0.02), so the loss curves ~(1/0.02)^2 more in wte
// than in gpt2's; wte's errors at h = 1e-2 and 5e-3 were measured to grow as h^2 (truncation), none at
// 2e-3, where float rounding stays below the tolerance.
struct GradCase {
  const char* name;
  GPTConfig cfg;
  int present, samples;
  float qk_scale;
  double h;
};

TEST_CASE("whole-model gradients match finite differences (gpt2; llama with GQA, its own head and tied)") {
  const int L = tiny_gpt2().L;
  const GradCase cases[] = {
      {"gpt2", tiny_gpt2(), int(num_param_tensors(L)) - 1, 3, 1.0f, 5e-3},
      {"llama", tiny_llama(0), 1 + 6 * L + 1 + 1, 8, 25.0f, 2e-3},
      {"llama tied", tiny_llama(1), 1 + 6 * L + 1, 8, 25.0f, 2e-3},
  };
  for (const GradCase& gc : cases) {
    CAPTURE(gc.name);
    const auto layout = param_layout(gc.cfg);
    CHECK(std::count_if(layout.begin(), layout.end(), [](const ParamTensor& t) { return t.count > 0; }) == gc.present);
    for (float p : {0.0f, 0.2f}) check_whole_model_gradients(gc.cfg, p, gc.samples, gc.qk_scale, gc.h);
  }
}

TEST_CASE("a small model overfits one fixed batch (gpt2; llama with its own head and tied)") {
  for (const GPTConfig& c : {tiny_gpt2(), tiny_llama(0), tiny_llama(1)}) {
    CAPTURE(c.describe());
    auto be = make_cpu_backend();
    GPT model(c, *be);
    model.init_params(3);
    AdamW opt(*be, model.num_params());
    OptimConfig oc;
    oc.lr = 1e-2f, oc.warmup_steps = 0, oc.total_steps = 300, oc.min_lr_frac = 1.0f, oc.weight_decay = 0.0f;
    const int B = 4, T = 8;
    std::vector<int32_t> tok(B * T), tgt(B * T);
    random_tokens(tok, 32, 5), random_tokens(tgt, 32, 6);
    double first = 0, last = 0;
    for (int step = 1; step <= 300; ++step) {
      model.zero_grads();
      const double loss = model.forward(tok.data(), tgt.data(), B, T, true, 1.0f / (B * T), nullptr) / (B * T);
      model.backward();
      if (step == 1) first = loss;
      last = loss;
      opt.step(model, step, lr_at(oc, step), 1.0f, oc);
    }
    MESSAGE("overfit: loss " << first << " -> " << last);
    CHECK(first == doctest::Approx(std::log(32.0)).epsilon(0.1));  // near-uniform predictions at init
    CHECK(last < 0.05);  // random targets can only be fit by memorizing: the whole step works
  }
}

TEST_CASE("learning-rate schedule: linear warmup then cosine to lr * min_lr_frac") {
  OptimConfig c;
  c.lr = 1.0f, c.warmup_steps = 10, c.total_steps = 110, c.min_lr_frac = 0.1f;
  CHECK(lr_at(c, 1) == doctest::Approx(0.1));
  CHECK(lr_at(c, 5) == doctest::Approx(0.5));
  CHECK(lr_at(c, 10) == doctest::Approx(1.0));
  CHECK(lr_at(c, 60) == doctest::Approx(0.1 + 0.5 * 0.9 * (1 + std::cos(M_PI * 0.5))));  // 0.55
  CHECK(lr_at(c, 35) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 0.25))));
  CHECK(lr_at(c, 110) == doctest::Approx(0.1));
  CHECK(lr_at(c, 200) == doctest::Approx(0.1));
  c.warmup_steps = 0;
  CHECK(lr_at(c, 1) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 1 / 110.0))));
}

TEST_CASE("gradient clipping factor") {
  OptimConfig c;
  c.grad_clip = 1.0f;
  CHECK(clip_scale(c, 0.5) == 1.0f);
  CHECK(clip_scale(c, 4.0) == doctest::Approx(0.25));
  c.grad_clip = 0.0f;
  CHECK(clip_scale(c, 4.0) == 1.0f);
}

TEST_CASE("clipping inside AdamW: a clipped step equals a step on the scaled gradient") {
  auto be = make_cpu_backend();
  GPT a(tiny_gpt2(), *be), b(tiny_gpt2(), *be);
  a.init_params(1), b.init_params(1);
  AdamW oa(*be, a.num_params()), ob(*be, b.num_params());
  OptimConfig oc;
  for (size_t i = 0; i < a.num_params(); ++i) {
    a.grads()[i] = static_cast<float>(normal(4, i));
    b.grads()[i] = 0.25f * a.grads()[i];
  }
  oa.step(a, 1, 1e-3f, 0.25f, oc);
  ob.step(b, 1, 1e-3f, 1.0f, oc);
  for (size_t i = 0; i < a.num_params(); ++i) REQUIRE(a.params()[i] == b.params()[i]);
}

// AdamW::step updates every tensor with one backend call (Backend::adamw_update over the layout's spans);
// the path it replaced called cpu::adamw_update once per tensor with that tensor's weight decay. Three steps
// of each on the same parameters and gradients must give the same bits, elementwise.
TEST_CASE("AdamW::step in one call equals one update per tensor, bitwise") {
  auto be = make_cpu_backend();
  GPT model(tiny_gpt2(), *be);
  model.init_params(5);
  const size_t n = model.num_params();
  AdamW opt(*be, n);
  OptimConfig oc;
  oc.weight_decay = 0.5f;  // large, so a tensor given the wrong decay differs by far more than an ulp
  const std::vector<float> param0(model.params(), model.params() + n);
  std::vector<float> param = param0, m(n, 0.0f), v(n, 0.0f);
  for (int t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < n; ++i) model.grads()[i] = static_cast<float>(normal(10 + t, i));
    const float lr = 1e-2f * t, scale = 0.5f;
    opt.step(model, t, lr, scale, oc);
    for (const ParamTensor& p : model.layout())
      cpu::adamw_update(param.data() + p.offset, model.grads() + p.offset, m.data() + p.offset, v.data() + p.offset,
                        p.count, lr, oc.beta1, oc.beta2, oc.eps, p.decay ? oc.weight_decay : 0.0f, scale, t);
  }
  size_t differ = 0, moved = 0;
  for (size_t i = 0; i < n; ++i) {
    differ += model.params()[i] != param[i] || opt.m()[i] != m[i] || opt.v()[i] != v[i];
    moved += model.params()[i] != param0[i];
  }
  CHECK(differ == 0);
  CHECK(moved == n);  // every gradient is nonzero: every element was updated
  AdamW wrong_size(*be, n - 1);  // state of another model: refused before any update
  CHECK_THROWS_WITH_AS(wrong_size.step(model, 1, 1e-3f, 1.0f, oc), doctest::Contains("AdamW state for"), Error);
}

TEST_CASE("initialization is deterministic in the seed") {
  auto be = make_cpu_backend();
  GPT a(tiny_gpt2(), *be), b(tiny_gpt2(), *be), c(tiny_gpt2(), *be);
  a.init_params(42), b.init_params(42), c.init_params(43);
  int same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a.num_params(); ++i) same_ab += a.params()[i] == b.params()[i], same_ac += a.params()[i] == c.params()[i];
  CHECK(same_ab == static_cast<int>(a.num_params()));
  CHECK(same_ac < static_cast<int>(a.num_params()) / 4);  // only ones/zeros (LayerNorm, biases) agree
}
