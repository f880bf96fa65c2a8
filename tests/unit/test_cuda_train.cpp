// Whole training on one GPU against the CPU backend (the oracle): 20 optimizer steps of the real training
// step (StepRunner, src/train/step.h: the sampler's batches and dropout keys, LR schedule, clipping, AdamW or Muon)
// on one rank; the per-step loss trajectories must agree. Then --dtype bf16 against fp32 on the GPU, and activation recompute
// (1, 2) against none in bf16, and the bf16 weight mirror against per-call weight copies, bitwise, and the head and
// the loss in chunks of rows (--logits-chunk-rows) against one chunk. Label gpu;
// exits 77 (skipped) when the CUDA runtime sees no device, before doctest runs (gpu_test_main.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include <xtrain/backend/registry.h>
#include "comm/thread_world.h"
#include "fixtures.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include <xtrain/train/batches.h>
#include "train/mfu.h"
#include <xtrain/train/optim.h>
#include "train/step.h"

using namespace xtrain;

namespace {

// fp32 GPU vs CPU, relative per step. Every op agrees with the CPU to ~1e-6 (test_cuda_ops, 1e-5
// bound); over 20 steps these differences pass through AdamW, which normalizes the gradient scale, so
// the parameters drift apart by ~steps * lr * 1e-6 and the losses by ~1e-6 relative. 1e-4 leaves a
// ~100x margin, while a wrong op, a missed dropout mask or a mis-wired gradient moves the loss by
// more than 1e-3 within a few steps.
constexpr double kFp32TrajectoryRel = 1e-4;
// bf16 vs fp32 on the GPU, relative per step. bf16 keeps 8 significant bits: every stored activation,
// activation gradient and GEMM operand is rounded by up to 2^-8 ~ 3.9e-3 relative, so logits and
// gradients carry ~1e-3 relative noise that accumulates over the steps (measured 5.7e-3 over 20 steps); 2e-2 bounds that with margin, while bf16 storage of the master weights
// or of the AdamW state (updates of ~lr * 1e-3 lost to rounding) would stall the loss curve.
constexpr double kBf16TrajectoryRel = 2e-2;
// The loss must fall by at least this fraction of its first value in 20 steps (the corpus is a
// learnable Markov chain), in fp32 and bf16 alike, so the comparison is not between two stalled runs.
constexpr double kMinRelativeFall = 0.2;

constexpr int kSteps = 20, kB = 4, kT = 64;
constexpr uint64_t kSeed = 1234;

// HS = 32 < T: a shape the flash kernels and cuDNN take; bf16 runs go through cuDNN's fused attention
// (--attention auto) unless a test picks the route.
GPTConfig config() { return test::model_config(512, kT, 64, 2, 4, 2, 32, 256); }

// corpus: a Markov chain that cycles through 16 tokens (next = (cur + 1) mod 16) with probability
// 0.9 and jumps to a uniform token of [0, V) otherwise: learnable within 20 steps.
std::vector<int32_t> corpus(size_t n, int V) {
  std::vector<int32_t> t(n);
  t[0] = 0;
  for (size_t i = 1; i < n; ++i) {
    const uint64_t r = uniform_u64(kSeed, i);
    t[i] = (r % 10 == 0) ? int32_t((r >> 8) % uint64_t(V)) : (t[i - 1] + 1) % 16;
  }
  return t;
}

struct Trajectory {
  std::vector<double> loss, grad_norm;
  std::vector<float> params;  // (num_params) after the last step
};

// train: kSteps optimizer steps of the training step (StepRunner) on one rank: the real sampler
// (fill_batch: batch windows and dropout keys per (seed, step, sequence)), dloss = 1/(B*T), global-norm
// clipping through be.sum_squares, AdamW with the warmup + cosine schedule; recompute as --recompute.
// Kernels launched one by one (--cuda-graph off; tests/integration/test_cuda_graph.sh checks the graph's bits). The
// rank's communicator is the in-process one of a world of 1: at world 1 the step runs no gradient
// collective, only the host all-reduce of the loss, so the backend's memory never reaches it.
// opt: --optimizer (muon: Muon at --muon-lr 0.02 on the blocks' matrices, AdamW on the rest).
// logits_chunk_rows: --logits-chunk-rows (0: automatic, one chunk for this model).
// fp8: --fp8; cfg_model: the model (config() unless given).
Trajectory train(Backend& be, const std::vector<int32_t>& tokens, float dropout, int recompute = 0,
                 OptimizerKind opt_kind = OptimizerKind::adamw, int logits_chunk_rows = 0, Fp8Linears fp8 = {},
                 const GPTConfig& model_cfg = config()) {
  GPT model(model_cfg, be, recompute);
  model.set_logits_chunk_rows(logits_chunk_rows);
  model.set_fp8(fp8);
  model.init_params(kSeed);
  const size_t n = model.num_params();
  TrainConfig cfg;
  cfg.model = model_cfg, cfg.batch = kB, cfg.seq = kT, cfg.grad_accum = 1, cfg.seed = kSeed, cfg.steps = kSteps;
  cfg.optim.lr = 5e-3f, cfg.optim.warmup_steps = 3, cfg.optim.grad_clip = 1.0f, cfg.optim.kind = opt_kind;
  cfg.dropout = dropout, cfg.recompute = recompute;
  cfg.cuda_graph = TrainConfig::CudaGraph::off;
  TrainData data;
  data.tokens = tokens;
  data.n_train = tokens.size();  // no validation tail
  ThreadWorld world(1);
  const std::unique_ptr<Communicator> comm =
      make_thread_communicator(world, 0, std::numeric_limits<double>::infinity());
  Optimizer opt(be, *comm, model, cfg.optim);
  StepRunner runner(cfg, data, model, be, *comm, opt, /*tl=*/nullptr);
  Trajectory tr;
  for (int step = 1; step <= kSteps; ++step) {
    const StepResult r = runner.step(step);
    REQUIRE(r.finite);
    tr.loss.push_back(r.loss);
    tr.grad_norm.push_back(r.grad_norm);
  }
  tr.params.resize(n);
  be.copy_to_host(tr.params.data(), model.params(), n * sizeof(float));
  be.synchronize();
  return tr;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& ref) {
  double m = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::fabs(a[i] - ref[i]) / std::fabs(ref[i]));
  return m;
}

void print(const char* name, const Trajectory& t) {
  std::printf("%-14s loss:", name);
  for (double l : t.loss) std::printf(" %.5f", l);
  std::printf("\n");
}

std::unique_ptr<Backend> gpu(const char* dtype) { return make_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype)}); }

}  // namespace

TEST_CASE("20 training steps on the GPU (fp32) follow the CPU loss trajectory") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  for (float p : {0.0f, 0.1f}) {
    CAPTURE(p);
    auto cpu = make_cpu_backend();
    auto cuda = gpu("fp32");
    const Trajectory c = train(*cpu, data, p), g = train(*cuda, data, p);
    print(p > 0 ? "cpu (p=0.1)" : "cpu", c);
    print(p > 0 ? "gpu fp32 (p=0.1)" : "gpu fp32", g);
    const double loss_rel = max_rel_diff(g.loss, c.loss), norm_rel = max_rel_diff(g.grad_norm, c.grad_norm);
    std::printf("dropout %.1f: max relative loss difference gpu fp32 vs cpu over %d steps: %.3e (tolerance %.0e); "
                "gradient norms: %.3e\n", p, kSteps, loss_rel, kFp32TrajectoryRel, norm_rel);
    CHECK(loss_rel <= kFp32TrajectoryRel);
    CHECK(c.loss.back() < (1.0 - kMinRelativeFall) * c.loss.front());
  }
}

// Muon: the GPU's Newton-Schulz runs in bf16 (as PyTorch's), the CPU oracle's in fp32; each orthogonalized
// update differs by a few 1e-2 norm-wise (test_cuda_muon), which the losses carry as the bf16 runs do.
TEST_CASE("Muon: 20 steps on the GPU follow the CPU loss trajectory; --recompute keeps its bits") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  auto cpu = make_cpu_backend();
  auto f32 = gpu("fp32");
  const Trajectory c = train(*cpu, data, 0.0f, 0, OptimizerKind::muon), g = train(*f32, data, 0.0f, 0, OptimizerKind::muon);
  print("cpu muon", c);
  print("gpu fp32 muon", g);
  const double rel = max_rel_diff(g.loss, c.loss);
  std::printf("muon: max relative loss difference gpu vs cpu over %d steps: %.3e (tolerance %.0e)\n", kSteps, rel,
              kBf16TrajectoryRel);
  CHECK(rel <= kBf16TrajectoryRel);
  CHECK(c.loss.back() < (1.0 - kMinRelativeFall) * c.loss.front());
  auto b16 = gpu("bf16");
  const Trajectory r0 = train(*b16, data, 0.1f, 0, OptimizerKind::muon), r2 = train(*b16, data, 0.1f, 2, OptimizerKind::muon);
  CHECK(r2.loss == r0.loss);
  CHECK(r2.params == r0.params);
}

TEST_CASE("bf16 mixed precision follows the fp32 loss trajectory") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  auto f32 = gpu("fp32");
  auto b16 = gpu("bf16");
  const Trajectory a = train(*f32, data, 0.1f), b = train(*b16, data, 0.1f);
  print("gpu fp32", a);
  print("gpu bf16", b);
  const double rel = max_rel_diff(b.loss, a.loss);
  std::printf("max relative loss difference bf16 vs fp32 over %d steps: %.3e (tolerance %.0e)\n", kSteps, rel,
              kBf16TrajectoryRel);
  CHECK(rel <= kBf16TrajectoryRel);
  CHECK(rel > 0.0);  // bf16 must actually change the arithmetic
  CHECK(a.loss.back() < (1.0 - kMinRelativeFall) * a.loss.front());
  CHECK(b.loss.back() < (1.0 - kMinRelativeFall) * b.loss.front());
}

// --fp8 mlp,head against bf16, in both MLP families (GELU: GPT-2 layout; SwiGLU: the Llama layout with its own
// head). FP8 rounds the operands of the selected products to 4 significant bits (E4M3, forward) and 3 (E5M2,
// gradients), 16 and 32 times bf16's rounding: the losses carry ~10x the bf16-vs-fp32 noise measured above
// (5.7e-3 over 20 steps), so 5e-2 relative bounds them, while a wrong scale or layout in any of the three
// products stalls or diverges the loss (it must still fall by kMinRelativeFall). The bf16 run is bitwise
// deterministic, so any difference at all shows the FP8 products ran.
constexpr double kFp8TrajectoryRel = 5e-2;

TEST_CASE("--fp8 mlp,head follows the bf16 loss trajectory (GELU and SwiGLU MLPs)") {
  auto b16 = gpu("bf16");
  if (const std::string why = b16->fp8_unavailable(); !why.empty()) {  // an older GPU, XTRAIN_CUDA_LT=off
    MESSAGE("skipped: " << why);
    return;
  }
  GPTConfig llama = config();
  llama.arch = Arch::llama, llama.tie_embeddings = 0;
  struct Run { GPTConfig c; Fp8Linears fp8; };
  for (const Run& run : {Run{config(), {true, false}}, Run{config(), {false, true}}, Run{config(), {true, true}},
                         Run{llama, {true, true}}}) {
    const std::string name = run.c.describe() + " --fp8 " + fp8_linears_name(run.fp8);
    CAPTURE(name);
    {  // the memory estimate counts the FP8 copies the backend makes (its block rounds each part to 256 bytes)
      GPT model(run.c, *b16);
      model.set_fp8(run.fp8);
      const double est = estimate_train_memory(run.c, kB, kT, *b16, 0, 0, run.fp8).weights -
                         estimate_train_memory(run.c, kB, kT, *b16).weights;
      const double made = double(b16->fp8_copy_bytes());
      const int matrices = (run.fp8.mlp ? 2 * run.c.L : 0) + (run.fp8.head ? 1 : 0);
      CHECK(est > 0.0);
      CHECK(made >= est);
      CHECK(made <= est + 3.0 * 256 * matrices);
    }
    CHECK(b16->fp8_copy_bytes() == 0);  // the model's parameters freed: the FP8 list with them
    const std::vector<int32_t> data = corpus(20000, run.c.V);
    const Trajectory ref = train(*b16, data, 0.0f, 0, OptimizerKind::adamw, 0, {}, run.c),
                     f8 = train(*b16, data, 0.0f, 0, OptimizerKind::adamw, 0, run.fp8, run.c);
    print("gpu bf16", ref);
    print("gpu fp8", f8);
    const double rel = max_rel_diff(f8.loss, ref.loss);
    std::printf("%s: max relative loss difference vs bf16 over %d steps: %.3e (tolerance %.0e)\n", name.c_str(),
                kSteps, rel, kFp8TrajectoryRel);
    CHECK(rel <= kFp8TrajectoryRel);
    CHECK(rel > 0.0);
    CHECK(f8.loss.back() < (1.0 - kMinRelativeFall) * f8.loss.front());
  }
}

// The cuDNN route in training: the same bf16 steps as through the flash kernels (GQA, KVH = 2), whose
// difference is the order of fp32 sums and bf16 roundings inside attention, held to the bf16-vs-fp32 bound;
// a second run gives the same losses and parameters bitwise (cuDNN's deterministic backward).
TEST_CASE("cuDNN attention trains like the flash kernels and repeats bitwise (bf16)") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  auto flash = make_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16, Attention::flash});
  auto cd = make_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16, Attention::cudnn});
  const Trajectory f = train(*flash, data, 0.1f), c = train(*cd, data, 0.1f), c2 = train(*cd, data, 0.1f);
  print("gpu flash", f);
  print("gpu cudnn", c);
  const double rel = max_rel_diff(c.loss, f.loss);
  std::printf("max relative loss difference cudnn vs flash attention over %d bf16 steps: %.3e (tolerance %.0e); "
              "rerun bitwise equal: %s\n", kSteps, rel, kBf16TrajectoryRel,
              c2.loss == c.loss && c2.params == c.params ? "yes" : "NO");
  CHECK(rel <= kBf16TrajectoryRel);
  CHECK(rel > 0.0);  // the cuDNN route must actually run (another summation order than the flash kernels)
  CHECK(c2.loss == c.loss);
  CHECK(c2.params == c.params);
  CHECK(c.loss.back() < (1.0 - kMinRelativeFall) * c.loss.front());
}

// The head and the loss in chunks of 100 of the 256 rows (100, 100, 56; the fp32 and bf16 GEMMs of 100 and 56 rows,
// the cross-entropy kernel on row offsets, the head's dW accumulated by three GEMMs): fp32 against the CPU's one
// chunk within the fp32 trajectory bound (chunking changes summation order only); bf16 against bf16 in one chunk
// within the bf16 bound (another GEMM shape may round a bf16 output the other way), and a rerun bitwise (the chunk
// loop is deterministic).
TEST_CASE("the head and loss in chunks of rows train like one chunk (fp32 against the CPU, bf16)") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  constexpr int kChunk = 100;
  auto cpu = make_cpu_backend();
  auto f32 = gpu("fp32");
  const Trajectory c = train(*cpu, data, 0.1f), g = train(*f32, data, 0.1f, 0, OptimizerKind::adamw, kChunk);
  const double rel = max_rel_diff(g.loss, c.loss);
  std::printf("--logits-chunk-rows %d: max relative loss difference gpu fp32 vs cpu (one chunk) over %d steps: %.3e "
              "(tolerance %.0e)\n", kChunk, kSteps, rel, kFp32TrajectoryRel);
  CHECK(rel <= kFp32TrajectoryRel);
  auto b16 = gpu("bf16");
  const Trajectory one = train(*b16, data, 0.1f), parts = train(*b16, data, 0.1f, 0, OptimizerKind::adamw, kChunk),
                   again = train(*b16, data, 0.1f, 0, OptimizerKind::adamw, kChunk);
  const double rel16 = max_rel_diff(parts.loss, one.loss);
  std::printf("--logits-chunk-rows %d: max relative loss difference bf16 vs bf16 in one chunk over %d steps: %.3e "
              "(tolerance %.0e); rerun bitwise equal: %s\n", kChunk, kSteps, rel16, kBf16TrajectoryRel,
              again.loss == parts.loss && again.params == parts.params ? "yes" : "NO");
  CHECK(rel16 <= kBf16TrajectoryRel);
  CHECK(again.loss == parts.loss);
  CHECK(again.params == parts.params);
  CHECK(parts.loss.back() < (1.0 - kMinRelativeFall) * parts.loss.front());
}

TEST_CASE("activation recompute 1 and 2 give the bf16 losses and parameters of 0 bitwise") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  auto b16 = gpu("bf16");
  const Trajectory r0 = train(*b16, data, 0.1f, 0);
  for (int recompute : {1, 2}) {
    CAPTURE(recompute);
    const Trajectory r = train(*b16, data, 0.1f, recompute);
    CHECK(r.loss == r0.loss);  // the same ops on the same inputs: the same bits
    CHECK(r.grad_norm == r0.grad_norm);
    CHECK(r.params == r0.params);
    std::printf("bf16 --recompute %d: %d losses and the final parameters bitwise equal to --recompute 0: %s\n",
                recompute, kSteps, r.loss == r0.loss && r.params == r0.params ? "yes" : "NO");
  }
}

// The bf16 weight mirror (Backend::prepare_weights, once per forward) against per-call weight copies
// (--weight-copy per-use): the same rounding, and cuBLAS(Lt) given the same strides and alignment,
// so the same bits, with dropout and --recompute 1, 2 (whose backward repeats the fc GEMM and the
// layernorms). The test model's layout puts some weights on 256-byte boundaries of the mirror (read from
// it) and some off (copied per call).
TEST_CASE("bf16 training through the weight mirror gives the bits of per-call weight copies") {
  const std::vector<int32_t> data = corpus(20000, config().V);
  BackendOptions opts{Device::cuda, 0, 1, DType::bf16};
  opts.weight_copy = WeightCopy::per_use;
  auto per_call = make_backend(opts);
  opts.weight_copy = WeightCopy::persistent;
  auto mirrored = make_backend(opts);
  REQUIRE(per_call->weight_copy_bytes() == 0);  // the switch took
  REQUIRE(mirrored->weight_copy_bytes() == 2);
  for (int recompute : {0, 1, 2}) {
    CAPTURE(recompute);
    const Trajectory a = train(*per_call, data, 0.1f, recompute), b = train(*mirrored, data, 0.1f, recompute);
    CHECK(b.loss == a.loss);
    CHECK(b.grad_norm == a.grad_norm);
    CHECK(b.params == a.params);
    std::printf("bf16 --recompute %d: %d steps through the weight mirror bitwise equal to per-call copies: %s\n",
                recompute, kSteps, b.loss == a.loss && b.params == a.params ? "yes" : "NO");
  }
}

// The first micro-step's backward writes the weight gradients on the GPU (GPT::backward(Grad::assign): the GEMMs'
// beta 0, the column sums stored, wte's and wpe's gradients zeroed before the embeddings' scatter-add) instead of
// adding them to a zeroed buffer. Over a buffer of NaNs it must give the bits it gives over zeros (nothing reads
// the old values, every element is written; the backward is deterministic), for one and two micro-steps, fp32 and
// bf16, gpt2 and llama (own head and tied), with dropout. Against zero_grads() + accumulating backwards the
// difference is at most cuBLAS picking another kernel for beta 0 than for beta 1: another fp32 summation order
// inside one dW GEMM (a weight gradient feeds nothing else in the backward), ~1e-6 of the buffer's largest
// element; 1e-5 of it bounds that, while a NaN, a stale value or a lost term moves it by far more.
constexpr double kAssignVsZeroedRel = 1e-5;
TEST_CASE("backward(Grad::assign) over NaNs: the bits of assigning over zeros, close to zero_grads() + accumulate") {
  const int B = 2;
  std::vector<int32_t> tok(B * kT), tgt(B * kT);
  GPTConfig gpt2 = config(), llama = config(), tied = config();
  llama.arch = tied.arch = Arch::llama;
  llama.tie_embeddings = 0, tied.tie_embeddings = 1;
  for (const char* dtype : {"fp32", "bf16"}) {
    auto be = gpu(dtype);
    for (const GPTConfig& c : {gpt2, llama, tied})
      for (int K : {1, 2}) {
        CAPTURE(dtype);
        CAPTURE(c.describe());
        CAPTURE(K);
        const DropoutKeys drop{0.1f, {hash_key(9, 1), hash_key(9, 2)}};
        // run: K micro-steps, the first backward with mode `first`: assigned over a buffer filled with `fill`, or
        // accumulated into the buffer zero_grads() clears
        auto run = [&](float fill, Grad first) {
          GPT model(c, *be);
          model.init_params(kSeed);
          if (first == Grad::accumulate) {
            model.zero_grads();
          } else {
            const std::vector<float> filled(model.num_params(), fill);
            be->copy_to_device(model.grads(), filled.data(), filled.size() * sizeof(float));
          }
          for (int k = 0; k < K; ++k) {
            for (size_t i = 0; i < tok.size(); ++i) {
              tok[i] = int32_t(uniform_u64(80 + k, i) % uint64_t(c.V));
              tgt[i] = int32_t(uniform_u64(90 + k, i) % uint64_t(c.V));
            }
            const Grad mode = k == 0 ? first : Grad::accumulate;  // the forward writes the head's gradient
            model.forward(tok.data(), tgt.data(), B, kT, true, 1.0f / (B * kT), &drop, mode);
            model.backward(mode);
          }
          std::vector<float> g(model.num_params());
          be->copy_to_host(g.data(), model.grads(), g.size() * sizeof(float));
          return g;
        };
        const std::vector<float> over_nan = run(std::nanf(""), Grad::assign), over_zero = run(0.0f, Grad::assign),
                                 zeroed = run(0.0f, Grad::accumulate);
        size_t nans = 0, differ = 0;
        double max_abs = 0.0, max_diff = 0.0;
        for (size_t i = 0; i < zeroed.size(); ++i) {
          nans += std::isnan(over_nan[i]);
          differ += std::memcmp(&over_nan[i], &over_zero[i], sizeof(float)) != 0;
          max_abs = std::max(max_abs, std::fabs(double(zeroed[i])));
          max_diff = std::max(max_diff, std::fabs(double(over_nan[i]) - zeroed[i]));
        }
        std::printf("%s %s K=%d: assigned over NaN: %zu NaN, %zu elements unlike assigned over zeros; vs zero_grads() "
                    "+ accumulate: max difference %.3e of max |g| %.3e (tolerance %.0e relative)\n",
                    dtype, c.arch == Arch::llama ? (c.tied() ? "llama tied" : "llama") : "gpt2", K, nans, differ,
                    max_diff, max_abs, kAssignVsZeroedRel);
        CHECK(nans == 0);
        CHECK(differ == 0);
        CHECK(max_abs > 0.0);
        CHECK(max_diff <= kAssignVsZeroedRel * max_abs);
      }
  }
}

TEST_CASE("dtype is validated: bf16 is refused on the CPU backend, unknown dtypes everywhere") {
  CHECK_THROWS_AS(make_backend(BackendOptions{Device::cpu, 0, 1, DType::bf16}), UsageError);
  CHECK_THROWS_AS(parse_dtype("fp8"), UsageError);
}

TEST_CASE("--weight-copy per-use needs bf16 on cuda: fp32 matmuls keep no copy, so it is refused there") {
  BackendOptions opts{Device::cuda, 0, 1, DType::fp32};
  opts.weight_copy = WeightCopy::per_use;
  CHECK_THROWS_AS(make_backend(opts), UsageError);
  opts.weight_copy = WeightCopy::persistent;  // the default: fp32 keeps no copy all the same
  CHECK(make_backend(opts)->weight_copy_bytes() == 0);
  opts.dtype = DType::automatic, opts.weight_copy = WeightCopy::per_use;  // automatic is bf16 on cuda
  CHECK(make_backend(opts)->weight_copy_bytes() == 0);
}

TEST_CASE("gpu_id: the device as cudaDeviceProp gives it; the CPU has none; known parts have a peak") {
  CHECK_FALSE(make_backend(BackendOptions{Device::cpu, 0, 1, DType::fp32})->gpu_id());
  const std::unique_ptr<Backend> be = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, DType::bf16});
  const std::optional<GpuId> id = be->gpu_id();
  REQUIRE(id);
  CHECK(be->device_name().rfind(id->name + " (", 0) == 0);  // device_name() = "<name> (<PCI bus id>)"
  CHECK(id->cc_major >= 7);
  CHECK(id->sm_count > 0);
  const std::optional<GpuPeak> peak = find_gpu_peak(*id);
  std::printf("gpu_id: %s, compute capability %d.%d, %d SMs: %s\n", id->name.c_str(), id->cc_major, id->cc_minor,
              id->sm_count, peak ? "in the MFU peak table" : "not in the MFU peak table (no MFU printed)");
  // The parts xtrain is benchmarked on must be found (a renamed part or another SM count would not be).
  if (id->name == "NVIDIA H200" || id->name == "NVIDIA H100 80GB HBM3") CHECK(peak);
}
