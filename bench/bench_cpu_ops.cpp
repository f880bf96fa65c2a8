// One rank's CPU training step against the GEMMs it contains, timed alone with OpenBLAS (one thread). The model is
// the built-in default (C=128, L=4, NH=4, HS=32, F=512, T=128, GPT-2's vocabulary V=50257 padded to 50304), B
// sequences per step (8: one rank's share of the README's 16 on two ranks). Prints one JSON object per line:
//   {"op": "gemm.<layer>.<fwd|dinp|dw>", "M", "N", "K", "per_step", "ms", "cpu_ms", "gflops"}: each GEMM shape of
//     the step as ops.h calls cblas_sgemm (row-major; forward inp w^T, dinp dout w, dw += dout^T inp), alone;
//   {"op": "<backend op>", "per_step", "ms", "cpu_ms"}: the other ops of the step through the CPU backend;
//   {"op": "step", "ms", "cpu_ms"}: GPT::forward + backward + AdamW::step (zeroed gradients), what one rank of
//     xtrain_mpi computes per step without the all-reduce;
//   {"summary": ..., "gemm_ms", "step_ms", "step_over_gemm", "ops_ms", ...}: the sums per step.
// ms: the median wall time of `reps` runs after one warm-up; cpu_ms: the median CPU time of this thread over
// the same runs (CLOCK_THREAD_CPUTIME_ID), the figure to read on a machine shared with other work.
// Usage: bench_cpu_ops [B=8] [reps=5] [logits_chunk_rows=0]   (command recorded in the output's first line);
// logits_chunk_rows: the step's head and cross-entropy in chunks of this many rows (--logits-chunk-rows; 0: the
// model's automatic choice, one chunk for GPT-2's vocabulary).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "bench_args.h"
#include <xtrain/backend/backend.h>
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>
#include <xtrain/train/optim.h>

namespace {

constexpr const char* kUsage = "usage: bench_cpu_ops [B=8] [reps=5] [logits_chunk_rows=0]";

struct Timing {
  double ms = 0, cpu_ms = 0;  // medians
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// time: `f` once to warm up, then `reps` times; the medians of wall and thread CPU time.
Timing time(int reps, const std::function<void()>& f) {
  f();
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const double c0 = thread_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(1e3 * (thread_cpu_s() - c0));
  }
  return {median(wall), median(cpu)};
}

std::vector<float> random_floats(size_t n, uint64_t key, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(2.0 * xtrain::uniform01(key, i) - 1.0);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const xtrain::bench::BenchArgs args{argc, argv, "bench_cpu_ops", kUsage};
  if (args.help("Times one rank's CPU training step of the default model and each of its GEMMs alone.")) return 0;
  args.check(3);
  const int B = args.integer(1, 8, 1, 256), reps = args.integer(2, 5, 1, 1000),
            chunk_rows = args.integer(3, 0, 0, 1 << 20);
  std::printf("# bench_cpu_ops B=%d reps=%d logits_chunk_rows=%d (command: %s %d %d %d)\n", B, reps, chunk_rows,
              argv[0], B, reps, chunk_rows);

  xtrain::GPTConfig cfg;  // the built-in default model
  const int T = cfg.maxT, C = cfg.C, L = cfg.L, F = cfg.F, V = cfg.V, Vp = cfg.Vp(), N = B * T;
  const int QKV = cfg.qkv_width(), A = cfg.NH * cfg.HS;
  auto be = xtrain::make_cpu_backend();

  // ---- the GEMMs alone ----
  struct Linear {
    const char* name;
    int IC, OC, per_step;
  };
  const std::vector<Linear> linears = {
      {"qkv", C, QKV, L}, {"attn_proj", A, C, L}, {"fc", C, F, L}, {"fc_proj", F, C, L}, {"head", C, Vp, 1}};
  double gemm_ms = 0, gemm_cpu_ms = 0, flops = 0;
  for (const Linear& l : linears) {
    const std::vector<float> inp = random_floats(size_t(N) * l.IC, 1, 1.0f),
                             w = random_floats(size_t(l.OC) * l.IC, 2, 0.02f),
                             dout = random_floats(size_t(N) * l.OC, 3, 1e-3f);
    std::vector<float> out(size_t(N) * l.OC), dinp(size_t(N) * l.IC), dw(size_t(l.OC) * l.IC);
    struct Gemm {
      const char* kind;
      int M, Nn, K;
      std::function<void()> run;
    };
    const std::vector<Gemm> gemms = {
        {"fwd", N, l.OC, l.IC,
         [&] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, l.OC, l.IC, 1.0f, inp.data(), l.IC, w.data(), l.IC,
                       0.0f, out.data(), l.OC);
         }},
        {"dinp", N, l.IC, l.OC,
         [&] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, l.IC, l.OC, 1.0f, dout.data(), l.OC, w.data(),
                       l.IC, 0.0f, dinp.data(), l.IC);
         }},
        {"dw", l.OC, l.IC, N,
         [&] {
           cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l.OC, l.IC, N, 1.0f, dout.data(), l.OC, inp.data(),
                       l.IC, 1.0f, dw.data(), l.IC);
         }},
    };
    for (const Gemm& g : gemms) {
      const Timing t = time(reps, g.run);
      const double f = 2.0 * g.M * g.Nn * g.K;
      gemm_ms += t.ms * l.per_step, gemm_cpu_ms += t.cpu_ms * l.per_step, flops += f * l.per_step;
      std::printf(
          "{\"op\": \"gemm.%s.%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"per_step\": %d, \"ms\": %.3f, \"cpu_ms\": %.3f, "
          "\"gflops\": %.1f}\n",
          l.name, g.kind, g.M, g.Nn, g.K, l.per_step, t.ms, t.cpu_ms, f / t.ms * 1e-6);
    }
  }

  // ---- the other ops of the step, each at its shape, through the backend ----
  xtrain::Backend& b = *be;
  const size_t NC = size_t(N) * C;
  auto buf = [&](size_t n, uint64_t key, float scale) {
    auto d = std::make_unique<xtrain::DeviceBuffer<float>>(b, n);
    const std::vector<float> h = random_floats(n, key, scale);
    b.copy_to_device(d->get(), h.data(), d->bytes());
    return d;
  };
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) {
    tokens[i] = int32_t(xtrain::uniform01(7, uint64_t(i)) * V);
    targets[i] = int32_t(xtrain::uniform01(8, uint64_t(i)) * V);
  }
  xtrain::DeviceBuffer<int32_t> tgt(b, N);
  b.copy_to_device(tgt.get(), targets.data(), tgt.bytes());
  auto logits = buf(size_t(N) * Vp, 9, 3.0f), losses = buf(N, 10, 0.0f);
  auto x = buf(NC, 11, 1.0f), y = buf(NC, 12, 1.0f), w = buf(C, 13, 1.0f), bias = buf(C, 14, 0.1f),
       dw = buf(C, 15, 0.0f), db = buf(C, 16, 0.0f), mean = buf(N, 17, 0.0f), rstd = buf(N, 18, 1.0f);
  auto qkv = buf(size_t(N) * QKV, 19, 1.0f), dqkv = buf(size_t(N) * QKV, 20, 0.0f), atty = buf(size_t(N) * A, 21, 1.0f),
       datty = buf(size_t(N) * A, 22, 1.0f),
       att = buf(b.attention_scratch_count(B, T, cfg.NH, cfg.KVH, cfg.HS), 23, 0.0f);
  auto fch = buf(size_t(N) * F, 24, 1.0f), fchg = buf(size_t(N) * F, 25, 0.0f), dfch = buf(size_t(N) * F, 26, 1.0f);
  xtrain::GPT model(cfg, b);
  model.init_params(1);
  model.set_logits_chunk_rows(chunk_rows);
  const size_t P = model.num_params();
  auto m = buf(P, 27, 0.0f), v = buf(P, 28, 0.0f), g = buf(P, 29, 1e-3f);
  std::vector<xtrain::ParamSpan> spans = {{0, P, true}};
  const float dloss = 1.0f / float(N);
  struct Op {
    const char* name;
    int per_step;
    std::function<void()> run;
  };
  const std::vector<Op> ops = {
      {"cross_entropy_forward_backward", 1,
       [&] {
         b.cross_entropy_forward_backward(losses->get(), logits->get(), logits->get(), tgt.get(), dloss, N, V, Vp);
       }},
      {"attention_forward", L,
       [&] { b.attention_forward(atty->get(), att->get(), qkv->get(), B, T, cfg.NH, cfg.KVH, cfg.HS); }},
      {"attention_backward", L,
       [&] {
         b.attention_backward(dqkv->get(), datty->get(), qkv->get(), atty->get(), att->get(), B, T, cfg.NH, cfg.KVH,
                              cfg.HS, xtrain::Grad::assign);
       }},
      {"gelu_forward", L, [&] { b.gelu_forward(fchg->get(), fch->get(), size_t(N) * F); }},
      {"gelu_backward", L,
       [&] { b.gelu_backward(dfch->get(), fch->get(), fchg->get(), size_t(N) * F, xtrain::Grad::assign); }},
      {"residual_layernorm_forward", 2 * L,
       [&] {
         b.residual_layernorm_forward(y->get(), x->get(), mean->get(), rstd->get(), x->get(), y->get(), w->get(),
                                      bias->get(), N, C);
       }},
      {"layernorm_backward", 2 * L + 1,
       [&] {
         b.layernorm_backward(y->get(), dw->get(), db->get(), x->get(), x->get(), w->get(), mean->get(), rstd->get(), N,
                              C);
       }},
      {"encoder_forward", 1, [&] { b.encoder_forward(x->get(), tgt.get(), model.params(), model.params(), B, T, C); }},
      {"encoder_backward", 1, [&] { b.encoder_backward(g->get(), g->get(), x->get(), tgt.get(), B, T, C); }},
      {"zero_grads", 1, [&] { b.zero(g->get(), P * sizeof(float)); }},
      {"sum_squares (grad norm)", 1, [&] { (void)b.sum_squares(g->get(), P); }},
      {"adamw_update", 1,
       [&] {
         b.adamw_update(model.params(), g->get(), m->get(), v->get(), spans, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
       }},
  };
  double ops_ms = 0, ops_cpu_ms = 0;
  for (const Op& o : ops) {
    const Timing t = time(reps, o.run);
    ops_ms += t.ms * o.per_step, ops_cpu_ms += t.cpu_ms * o.per_step;
    std::printf("{\"op\": \"%s\", \"per_step\": %d, \"ms\": %.3f, \"cpu_ms\": %.3f}\n", o.name, o.per_step, t.ms,
                t.cpu_ms);
  }

  // ---- the step itself ----
  xtrain::AdamW opt(b, P);
  xtrain::OptimConfig oc;
  int t_step = 0;
  const Timing step = time(reps, [&] {
    model.zero_grads();
    model.forward(tokens.data(), targets.data(), B, T, true, dloss, nullptr);
    model.backward();
    opt.step(model, ++t_step, 1e-4f, 1.0f, oc);
  });
  std::printf("{\"op\": \"step\", \"ms\": %.3f, \"cpu_ms\": %.3f}\n", step.ms, step.cpu_ms);
  std::printf(
      "{\"summary\": \"B=%d T=%d: one rank's step against its GEMMs alone\", \"gemm_ms\": %.2f, \"gemm_cpu_ms\": %.2f, "
      "\"gemm_gflops\": %.1f, \"ops_ms\": %.2f, \"ops_cpu_ms\": %.2f, \"step_ms\": %.2f, \"step_cpu_ms\": %.2f, "
      "\"step_over_gemm\": %.3f, \"step_over_gemm_cpu\": %.3f}\n",
      B, T, gemm_ms, gemm_cpu_ms, flops / gemm_ms * 1e-6, ops_ms, ops_cpu_ms, step.ms, step.cpu_ms, step.ms / gemm_ms,
      step.cpu_ms / gemm_cpu_ms);
  return 0;
}
