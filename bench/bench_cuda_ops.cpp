// Times each CUDA op once per shape at GPT-2 124M sizes (C=768, NH=12, HS=64, V=50257, T=1024), so the
// slow ops can be found before a whole training step is timed. Prints one JSON object per op:
// {"op", "ms", "tflops" (matmuls: 2*N*IC*OC per GEMM), "gbs" (elementwise/row ops: bytes read+written)}.
// Wall time of `reps` calls between two synchronize() calls, after one warm-up call. Attention is timed on
// each route of the dtype (".flash", ".cudnn" with bf16; ".gemm", ".flash" with fp32). With bf16 the matmuls
// read their weight from the bf16 mirror (Backend::prepare_weights) as in training; prepare_weights, once per
// forward, is timed on its own over 124M parameters.
// Decoding rows ("decode.<product>", N = 1, 4, 16 rows: the batch of one decoding step): each product of a GPT-2
// 124M layer and the tied head through both routes of cuda::matmul_forward / matmul_gelu_forward (MatmulRoute
// gemm: cuBLAS(Lt); gemv: gemv.cu), as {"op", "N", "route", "us", "gbs" (weights, activations and bias read or
// written)}, and "decode.layer" (the four products) per N and route: the figures kGemvMaxRows (gemv.h) is chosen
// from. Each is timed as the decoder runs it, inside a CUDA graph (Backend::capture_graph) of many calls, the
// calls' weights rotating over the 154 MB w buffer (77 MB in bf16), more than the GPU's L2 cache (50 MB on an
// H200), so that each reads its weights from memory as a decoding step over 12 layers does.
// Rotary embeddings ("rotary_forward.llama32_1b.<route>", "rotary_backward..."; B is fixed at 4) are timed at
// Llama 3.2 1B's attention layout instead (NH=32, KVH=8, HS=64, T=2048), on each route of cuda::RotaryRoute (the
// pair kernel on a buffer one element off 16-byte alignment, as the dispatch would take it), with "gbs" the q
// and k heads read and written.
// RMSNorm ("rmsnorm_forward.llama32_1b", "residual_rmsnorm_forward...", "rmsnorm_backward...") is timed at Llama
// 3.2 1B's training shape instead (B=4, T=2048: N=8192 rows of C=2048, whatever B), with "gbs" the rows read and
// written (the backward: dout, inp and dinp read, dinp written).
// Usage: bench_cuda_ops [B=8] [reps=5] [dtype=fp32|bf16]   (command recorded in the output's first line)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/ops.h"
#include "bench_args.h"
#include <xtrain/core/rng.h>
#include <xtrain/model/model.h>

using namespace xtrain;

namespace {
double time_ms(Backend& be, int reps, const std::function<void()>& op) {
  op();
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) op();
  be.synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void report(const char* op, double ms, double flops, double bytes) {
  std::printf("{\"op\": \"%s\", \"ms\": %.4f", op, ms);
  if (flops > 0) std::printf(", \"tflops\": %.2f", flops / (ms * 1e-3) / 1e12);
  if (bytes > 0) std::printf(", \"gbs\": %.1f", bytes / (ms * 1e-3) / 1e9);
  std::printf("}\n");
}
}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: bench_cuda_ops [B=8] [reps=5] [dtype=fp32|bf16]   (B in 1..64, reps 1..1000)";
  const xtrain::bench::BenchArgs args{argc, argv, "bench_cuda_ops", kUsage};
  if (args.help("Times each CUDA op once per shape at GPT-2 124M sizes (RMSNorm and rotary at Llama 3.2 1B's), one JSON line per op.")) return 0;
  args.check(3);
  auto arg = [&](int i, int def, int lo, int hi) { return args.integer(i, def, lo, hi); };
  const int B = arg(1, 8, 1, 64), reps = arg(2, 5, 1, 1000);
  const std::string dtype = argc > 3 ? argv[3] : "fp32";
  if (dtype != "fp32" && dtype != "bf16") args.fail("dtype must be fp32 or bf16, got '" + dtype + "'");
  const int T = 1024, C = 768, NH = 12, HS = 64, V = 50257, Vp = 50304, N = B * T;  // Vp: GPTConfig::Vp()
  std::printf("# bench_cuda_ops %d %d %s (B=%d T=%d C=%d NH=%d V=%d)\n", B, reps, dtype.c_str(), B, T, C, NH, V);
  if (!cuda_device_available()) {
    std::printf("# no CUDA device visible\n");
    return 77;
  }
  auto be = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype)});
  std::printf("# device: %s\n", be->device_name().c_str());
  auto buf = [&](size_t n) {
    DeviceBuffer<float> d(*be, n);
    be->zero(d.get(), d.bytes());
    return d;
  };
  DeviceBuffer<float> x = buf(size_t(N) * C), dx = buf(size_t(N) * C), qkv = buf(size_t(N) * 3 * C),
                      dqkv = buf(size_t(N) * 3 * C), h = buf(size_t(N) * 4 * C), dh = buf(size_t(N) * 4 * C),
                      att = buf(size_t(B) * NH * T * T), w = buf(size_t(Vp) * C), dw = buf(size_t(Vp) * C),
                      bias = buf(size_t(4) * C), logits = buf(size_t(N) * Vp), losses = buf(N), mean = buf(N),
                      rstd = buf(N);
  DeviceBuffer<int32_t> tok(*be, N);
  be->zero(tok.get(), tok.bytes());
  const double f = double(be->activation_bytes());  // bytes per activation element (4 fp32, 2 bf16)
  // bf16: the matmuls read w as a training step does, from the mirror of one prepare_weights per forward
  be->prepare_weights(w.get(), w.count());
  struct Mm { const char* name; int IC, OC; };
  for (Mm m : {Mm{"qkv", C, 3 * C}, Mm{"attproj", C, C}, Mm{"fc", C, 4 * C}, Mm{"fcproj", 4 * C, C},
               Mm{"lm_head", C, Vp}, Mm{"lm_head_unpadded", C, V}}) {
    float* in = m.IC == C ? x.get() : h.get();
    float* out = m.OC >= V ? logits.get() : (m.OC == C ? dx.get() : (m.OC == 3 * C ? qkv.get() : h.get()));
    const double flops = 2.0 * N * double(m.IC) * m.OC;
    report((std::string("matmul_forward.") + m.name).c_str(),
           time_ms(*be, reps, [&] { be->matmul_forward(out, in, w.get(), m.OC >= V ? nullptr : bias.get(), N, m.IC, m.OC); }),
           flops, 0);
    float* din = m.IC == C ? x.get() : dh.get();
    report((std::string("matmul_backward.") + m.name).c_str(),
           time_ms(*be, reps, [&] { be->matmul_backward(din, dw.get(), m.OC >= V ? nullptr : bias.get(), out, in, w.get(), N, m.IC, m.OC); }),
           2 * flops, 0);
  }
  {  // decoding: few rows, both matmul routes (see the header)
    const cuda::OpContext& ctx = cuda_op_context(*be);
    struct Product { const char* name; int IC, OC; bool bias, gelu; float* in; float* out; };
    const Product products[] = {{"qkv", C, 3 * C, true, false, x.get(), qkv.get()},
                                {"attproj", C, C, true, false, x.get(), dx.get()},
                                {"fc", C, 4 * C, true, true, x.get(), dh.get()},
                                {"fcproj", 4 * C, C, true, false, h.get(), dx.get()},
                                {"lm_head", C, Vp, false, false, x.get(), logits.get()}};
    constexpr int kMinCalls = 32;  // calls per recorded graph: launch overhead spread thin
    // the bias from inside w, so that bf16 takes its copy from the mirror as the model's biases do (a bias
    // outside it would add a per-call bf16 copy to the cuBLASLt route)
    const float* mirrored_bias = w.get() + w.count() - 4 * C;
    for (const int rows : {1, 4, 16}) {
      for (const cuda::MatmulRoute route : {cuda::MatmulRoute::gemm, cuda::MatmulRoute::gemv}) {
        const char* route_name = route == cuda::MatmulRoute::gemm ? "gemm" : "gemv";
        double layer_us = 0.0, layer_bytes = 0.0;
        for (const Product& m : products) {
          const size_t wcount = size_t(m.OC) * m.IC, copies = w.count() / wcount;  // weights rotate over w
          const int calls = int(std::max<size_t>(copies, kMinCalls));
          const float* b = m.bias ? mirrored_bias : nullptr;
          auto graph = be->capture_graph([&] {
            for (int i = 0; i < calls; ++i) {
              const float* wi = w.get() + (size_t(i) % copies) * wcount;
              if (!m.gelu) {
                cuda::matmul_forward(ctx, m.out, m.in, wi, b, rows, m.IC, m.OC, route);
              } else if (!cuda::matmul_gelu_forward(ctx, h.get(), m.out, m.in, wi, b, rows, m.IC, m.OC, route)) {
                cuda::matmul_forward(ctx, h.get(), m.in, wi, b, rows, m.IC, m.OC, route);  // Backend's default route
                cuda::gelu_forward(ctx, m.out, h.get(), size_t(rows) * m.OC);
              }
            }
          });
          const double us = 1e3 * time_ms(*be, reps, [&] { graph->launch(); }) / calls;
          const double bytes = double(wcount) * (be->weight_copy_bytes() > 0 ? be->weight_copy_bytes() : 4.0) +
                               f * rows * (m.IC + (m.gelu ? 2.0 : 1.0) * m.OC) + (m.bias ? 4.0 * m.OC : 0.0);
          std::printf("{\"op\": \"decode.%s\", \"N\": %d, \"route\": \"%s\", \"us\": %.2f, \"gbs\": %.1f}\n", m.name,
                      rows, route_name, us, bytes / (us * 1e-6) / 1e9);
          if (m.OC != Vp) layer_us += us, layer_bytes += bytes;
        }
        std::printf("{\"op\": \"decode.layer\", \"N\": %d, \"route\": \"%s\", \"us\": %.2f, \"gbs\": %.1f}\n", rows,
                    route_name, layer_us, layer_bytes / (layer_us * 1e-6) / 1e9);
      }
    }
  }
  {  // the MLP's fc + GELU as one op (Backend::matmul_gelu_forward / gelu_matmul_backward): compare with
     // matmul_forward.fc + gelu_forward and matmul_backward.fcproj + gelu_backward
    DeviceBuffer<float> h2 = buf(size_t(N) * 4 * C), h3 = buf(size_t(N) * 4 * C);
    const double flops = 2.0 * N * double(C) * 4 * C;
    report("matmul_gelu_forward.fc",
           time_ms(*be, reps, [&] { be->matmul_gelu_forward(h.get(), h2.get(), x.get(), w.get(), bias.get(), N, C, 4 * C); }),
           flops, 0);
    report("gelu_matmul_backward.fcproj",
           time_ms(*be, reps, [&] { be->gelu_matmul_backward(dh.get(), dw.get(), bias.get(), dx.get(), h2.get(), h.get(), w.get(), h3.get(), N, 4 * C, C); }),
           2 * flops, 0);
  }
  // attention on each route of this dtype (--attention; a backend per route on the same device and buffers):
  // flash and cudnn with bf16, gemm and flash with fp32. ".<route>" names the row.
  const double att_flops = 2.0 * 2.0 * B * NH * double(T) * T * HS / 2;  // causal half of Q K^T and P V
  for (Attention route : dtype == "bf16" ? std::vector<Attention>{Attention::flash, Attention::cudnn}
                                         : std::vector<Attention>{Attention::gemm, Attention::flash}) {
    auto ab = make_cuda_backend(BackendOptions{Device::cuda, 0, 1, parse_dtype(dtype), route});
    const std::string suffix = std::string(".") + to_string(route);
    report(("attention_forward" + suffix).c_str(),
           time_ms(*ab, reps, [&] { ab->attention_forward(x.get(), att.get(), qkv.get(), B, T, NH, NH, HS); }), att_flops, 0);
    report(("attention_backward" + suffix).c_str(),
           time_ms(*ab, reps, [&] { ab->attention_backward(dqkv.get(), dx.get(), qkv.get(), x.get(), att.get(), B, T, NH, NH, HS); }),
           2.0 * att_flops, 0);
  }
  report("layernorm_forward", time_ms(*be, reps, [&] { be->layernorm_forward(dx.get(), mean.get(), rstd.get(), x.get(), w.get(), bias.get(), N, C); }),
         0, 2.0 * N * C * f);
  report("layernorm_backward", time_ms(*be, reps, [&] { be->layernorm_backward(x.get(), dw.get(), bias.get(), dx.get(), x.get(), w.get(), mean.get(), rstd.get(), N, C); }),
         0, 4.0 * N * C * f);
  {  // RMSNorm at Llama 3.2 1B's training shape (see the header)
    constexpr int kN = 4 * 2048, kC = 2048;
    const double n = double(kN) * kC;
    DeviceBuffer<float> a = buf(size_t(n)), b = buf(size_t(n)), res = buf(size_t(n)), out = buf(size_t(n)),
                        nw = buf(kC), ndw = buf(kC), nrstd = buf(kN);
    report("rmsnorm_forward.llama32_1b",
           time_ms(*be, reps, [&] { be->rmsnorm_forward(out.get(), nrstd.get(), a.get(), nw.get(), kN, kC, 1e-5f); }),
           0, 2.0 * n * f);
    report("residual_rmsnorm_forward.llama32_1b",
           time_ms(*be, reps, [&] { be->residual_rmsnorm_forward(res.get(), out.get(), nrstd.get(), a.get(), b.get(), nw.get(), kN, kC, 1e-5f); }),
           0, 4.0 * n * f);
    report("rmsnorm_backward.llama32_1b",
           time_ms(*be, reps, [&] { be->rmsnorm_backward(res.get(), ndw.get(), out.get(), a.get(), nw.get(), nrstd.get(), kN, kC); }),
           0, 4.0 * n * f);
  }
  report("gelu_forward", time_ms(*be, reps, [&] { be->gelu_forward(dh.get(), h.get(), size_t(N) * 4 * C); }), 0, 2.0 * N * 4 * C * f);
  report("gelu_backward", time_ms(*be, reps, [&] { be->gelu_backward(dh.get(), h.get(), dh.get(), size_t(N) * 4 * C); }), 0, 3.0 * N * 4 * C * f);
  {  // rotary embeddings at Llama 3.2 1B's attention layout (see the header), both routes
    const int RB = 4, RT = 2048, RNH = 32, RKVH = 8, RHS = 64;
    const float theta = 500000.0f;
    DeviceBuffer<float> rq = buf(size_t(RB) * RT * (RNH + 2 * RKVH) * RHS + 4);  // floats: room for either dtype
    const double bytes = 2.0 * RB * RT * (RNH + RKVH) * RHS * f;
    const cuda::OpContext& ctx = cuda_op_context(*be);
    for (void* q : {static_cast<void*>(rq.get()), static_cast<void*>(reinterpret_cast<char*>(rq.get()) + size_t(f))}) {
      const std::string route = cuda::rotary_route(ctx, q, RHS) == cuda::RotaryRoute::rows ? ".rows" : ".pairs";
      report(("rotary_forward.llama32_1b" + route).c_str(),
             time_ms(*be, reps, [&] { be->rotary_forward(q, nullptr, RB, RT, RNH, RKVH, RHS, theta); }), 0, bytes);
      report(("rotary_backward.llama32_1b" + route).c_str(),
             time_ms(*be, reps, [&] { be->rotary_backward(q, RB, RT, RNH, RKVH, RHS, theta); }), 0, bytes);
    }
  }
  report("residual_forward", time_ms(*be, reps, [&] { be->residual_forward(dx.get(), x.get(), dx.get(), size_t(N) * C); }), 0, 3.0 * N * C * f);
  report("encoder_backward", time_ms(*be, reps, [&] { be->encoder_backward(dw.get(), h.get(), x.get(), tok.get(), B, T, C); }), 0, 3.0 * N * C * f);
  {  // the same with Zipf-distributed tokens (P(rank k) ~ 1/(k+1) over V, top token ~9%, like English BPE text)
    std::vector<double> cdf(V);
    double acc = 0.0;
    for (int k = 0; k < V; ++k) cdf[k] = (acc += 1.0 / (k + 1));
    std::vector<int32_t> zipf(N);
    for (int i = 0; i < N; ++i)
      zipf[i] = int32_t(std::lower_bound(cdf.begin(), cdf.end(), uniform01(hash_key(42, 7), uint64_t(i)) * acc) - cdf.begin());
    DeviceBuffer<int32_t> ztok(*be, N);
    be->copy_to_device(ztok.get(), zipf.data(), ztok.bytes());
    report("encoder_backward.zipf", time_ms(*be, reps, [&] { be->encoder_backward(dw.get(), h.get(), x.get(), ztok.get(), B, T, C); }), 0, 3.0 * N * C * f);
  }
  report("cross_entropy_fwd_bwd", time_ms(*be, reps, [&] { be->cross_entropy_forward_backward(losses.get(), logits.get(), logits.get(), tok.get(), 1.0f / N, N, V, Vp); }),
         0, 2.0 * N * double(V) * f);
  // AdamW over GPT-2 124M's tensors (tied embeddings, wte padded to Vp rows): one launch for all 148
  GPTConfig gpt2;
  gpt2.V = V, gpt2.maxT = T, gpt2.C = C, gpt2.L = 12, gpt2.NH = NH, gpt2.KVH = NH, gpt2.HS = HS, gpt2.F = 4 * C;
  std::vector<ParamSpan> spans;
  for (const ParamTensor& t : param_layout(gpt2)) spans.push_back({t.offset, t.count, t.decay});
  const size_t P = spans.back().offset + spans.back().count;  // 124475904
  DeviceBuffer<float> p = buf(P), g = buf(P), m1 = buf(P), m2 = buf(P);
  report("adamw_update", time_ms(*be, reps, [&] { be->adamw_update(p.get(), g.get(), m1.get(), m2.get(), spans, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1); }),
         0, 7.0 * P * 4);  // fp32 state whatever the activation type
  report("prepare_weights", time_ms(*be, reps, [&] { be->prepare_weights(p.get(), P); }), 0,
         be->weight_copy_bytes() > 0 ? double(P) * (4 + be->weight_copy_bytes()) : 0.0);  // a no-op with fp32
  report("sum_squares", time_ms(*be, reps, [&] { be->sum_squares(g.get(), P); }), 0, double(P) * 4);
  return 0;
}
