// FP8 GEMM sizing, product by product (training's --fp8 is matmul.cu's FP8 route): for each GEMM of a GPT-2
// training step (qkv, attention projection, fc, fc projection, lm_head; forward, dinp and dw) the bf16 GEMM as the
// training step runs it (matmul.cu's calls of gemm_lt / gemm_bf16, with their epilogues) against the same product
// with E4M3 operands through cuBLASLt (per-tensor scales as A_SCALE_POINTER / B_SCALE_POINTER, fp32 accumulation,
// bf16 output; dw into the fp32 gradient with beta 1 as training needs, bf16 where cuBLASLt refuses that), plus
// what making the FP8 operands costs: per operand an amax reduction and a bf16 -> E4M3 cast, with a transpose
// where the product needs it (fp8_cast, the casts of --fp8; here every operand E4M3, none shared, the weights cast
// per product: --fp8 casts them once per step and its gradients to E5M2). cuBLASLt's FP8 GEMMs take only ta
// false, tb true in the row-major convention of ops.h (cuBLASLt's "TN": both operands K-contiguous): forward as
// stored, dinp with w transposed, dw with dout and inp transposed. Layouts: linear_gemms.h. Not a test.
// One JSON line per (model, gemm, product), then one per model for the whole step (layer GEMMs x L + lm_head).
// Usage: gemm_fp8 [reps=20]. Exit 77 without a GPU; one "skipped" line on a GPU without FP8 (cc < 8.9).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/linear_gemms.h"
#include "backend/cuda/ops.h"
#include "bench_args.h"

using namespace xtrain::cuda;

namespace {
using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

#define CK(x) XT_BENCH_CHECK("gemm_fp8", x)

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

// fill: x (n) = uniform in [-1, 1) from a hash of (seed, i) (zeros would draw less power than training data)
__global__ void fill_kernel(bf16* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull, z ^= z >> 31;
    x[i] = __float2bfloat16(float(z >> 40) / float(1ull << 24) * 2.0f - 1.0f);
  }
}

// Dev: a cudaMalloc'd buffer freed at scope end
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { CK(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

// Timer: mean ms of reps calls of f on the stream after one warm-up call
struct Timer {
  cudaStream_t stream;
  int reps;
  cudaEvent_t e0, e1;
  double ms(const std::function<void()>& f) const {
    f();
    CK(cudaEventRecord(e0, stream));
    for (int r = 0; r < reps; ++r) f();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    return double(t) / reps;
  }
};

// Fp8Operand: an E4M3 copy of a bf16 matrix (rows, cols), transposed or not, with its dequantizing scale
struct Fp8Operand {
  Dev data, amax, inv;
  const bf16* src;
  int rows, cols;
  bool transposed;
  Fp8Operand(const bf16* s, int r, int c, bool t)
      : data(size_t(r) * c), amax(sizeof(float)), inv(sizeof(float)), src(s), rows(r), cols(c), transposed(t) {}
  // make: amax, then the cast (with the transpose), fp8_cast of the training's --fp8 (src/backend/cuda/fp8.cu):
  // what a training step runs per operand
  void make(const OpContext& ctx) const {
    fp8_cast(ctx, src, rows, cols, CUDA_R_8F_E4M3, transposed ? nullptr : data.p, transposed ? data.p : nullptr,
             amax.as<float>(), inv.as<float>());
  }
};

struct Layer {
  const char* name;
  int IC, OC;
  bool bias;  // gpt2's layers have one (the lm_head has none)
  cublasLtEpilogue_t fwd_epi, dinp_epi;  // matmul.cu's: BIAS / GELU_AUX_BIAS forward, DGELU for fc proj's dinp
};

struct Model {
  const char* name;
  int C, F, L, N, Vp;  // N = B*T rows of one micro-step
};

struct Totals {
  double bf16 = 0, fp8 = 0, cast = 0;
};
}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: gemm_fp8 [reps=20]   (reps 1..1000)";
  const xtrain::bench::BenchArgs args{argc, argv, "gemm_fp8", kUsage};
  if (args.help("Times the GEMMs of a GPT-2 124M and 1.5B training step in bf16 and in FP8 (E4M3) with the casts."))
    return 0;
  args.check(1);
  const int reps = args.integer(1, 20, 1, 1000);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("# no CUDA device visible\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# gemm_fp8 %d on %s (cc %d.%d), cuBLASLt %zu\n", reps, prop.name, prop.major, prop.minor,
              cublasLtGetVersion());
  if (prop.major * 10 + prop.minor < 89) {  // FP8 tensor cores: Ada (8.9) and Hopper (9.0) on
    std::printf("{\"bench\":\"gemm_fp8\",\"skipped\":\"%s has compute capability %d.%d; FP8 GEMMs need 8.9 or later\"}\n",
                prop.name, prop.major, prop.minor);
    return 0;
  }
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cublasHandle_t cublas;
  cublasLtHandle_t lt;
  CK(cublasCreate(&cublas));
  CK(cublasSetStream(cublas, stream));
  constexpr size_t kWorkspaceBytes = 32u << 20;  // the backend's (cuda_backend.cpp)
  Dev workspace(kWorkspaceBytes);
  CK(cublasSetWorkspace(cublas, workspace.p, kWorkspaceBytes));
  CK(cublasLtCreate(&lt));
  CachingAllocator alloc;
  OpContext ctx;
  ctx.stream = stream, ctx.cublas = cublas, ctx.alloc = &alloc, ctx.cublaslt = lt;
  ctx.workspace = workspace.p, ctx.workspace_bytes = kWorkspaceBytes;
  ctx.bf16 = true, ctx.gemm_compute = CUBLAS_COMPUTE_32F_FAST_16BF;
  Timer timer{stream, reps, nullptr, nullptr};
  CK(cudaEventCreate(&timer.e0));
  CK(cudaEventCreate(&timer.e1));

  // GPT-2 124M as bench/common.sh's gpt2_124m (B=16, T=1024); GPT-2 1.5B at B=8, T=1024
  const Model models[] = {{"gpt2_124m", 768, 3072, 12, 16384, 50304}, {"gpt2_1.5b", 1600, 6400, 48, 8192, 50304}};
  for (const Model& m : models) {
    const Layer layers[] = {
        {"qkv", m.C, 3 * m.C, true, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DEFAULT},
        {"attproj", m.C, m.C, true, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DEFAULT},
        {"fc", m.C, m.F, true, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DEFAULT},
        {"fcproj", m.F, m.C, true, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DGELU},
        {"lm_head", m.C, m.Vp, false, CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DEFAULT}};
    Totals step;
    for (const Layer& y : layers) {
      const int N = m.N, IC = y.IC, OC = y.OC;
      Dev inp(size_t(N) * IC * 2), w(size_t(OC) * IC * 2), out(size_t(N) * OC * 2), dout(size_t(N) * OC * 2),
          dinp(size_t(N) * IC * 2), dw(size_t(OC) * IC * 4), bias(size_t(OC) * 2),
          aux(size_t(N) * std::max(IC, OC) * 2);
      fill_kernel<<<grid_for(size_t(N) * IC), kThreads, 0, stream>>>(inp.as<bf16>(), size_t(N) * IC, 1);
      fill_kernel<<<grid_for(size_t(OC) * IC), kThreads, 0, stream>>>(w.as<bf16>(), size_t(OC) * IC, 2);
      fill_kernel<<<grid_for(size_t(N) * OC), kThreads, 0, stream>>>(dout.as<bf16>(), size_t(N) * OC, 3);
      fill_kernel<<<grid_for(size_t(N) * std::max(IC, OC)), kThreads, 0, stream>>>(aux.as<bf16>(), size_t(N) * std::max(IC, OC), 4);
      fill_kernel<<<grid_for(OC), kThreads, 0, stream>>>(bias.as<bf16>(), OC, 5);
      CK(cudaGetLastError());
      CK(cudaMemsetAsync(dw.p, 0, size_t(OC) * IC * 4, stream));

      struct Product {
        const char* name;
        LinearGemm g;
        const bf16 *a, *b;  // bf16 operands as stored (A row stride lda, B ldb)
        int lda, ldb;
        cublasLtEpilogue_t epi;
      };
      const Product products[] = {
          {"fwd", linear_forward(N, IC, OC), inp.as<bf16>(), w.as<bf16>(), IC, IC, y.fwd_epi},
          {"dinp", linear_dinp(N, IC, OC), dout.as<bf16>(), w.as<bf16>(), OC, IC, y.dinp_epi},
          {"dw", linear_dw(N, IC, OC), dout.as<bf16>(), inp.as<bf16>(), OC, IC, CUBLASLT_EPILOGUE_DEFAULT}};
      for (const Product& p : products) {
        const LinearGemm& g = p.g;
        const bool is_dw = std::string(p.name) == "dw";
        void* c = is_dw ? dw.p : p.name[0] == 'f' ? out.p : dinp.p;
        const int ldc = g.N;
        // bf16 as matmul.cu runs it: cuBLASLt with the layer's epilogue where it has one, else cuBLAS
        const char* bf16_route = "cublas";
        auto bf16_call = [&] {
          if (p.epi != CUBLASLT_EPILOGUE_DEFAULT) {
            const bool gelu_aux = p.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || p.epi == CUBLASLT_EPILOGUE_DGELU;
            if (gemm_lt(ctx, LtGemm{g.ta, g.tb, g.M, g.N, g.K, p.a, p.lda, p.b, p.ldb, CUDA_R_16BF, 0.0f, c, ldc,
                                    CUBLAS_COMPUTE_32F, p.epi, p.epi == CUBLASLT_EPILOGUE_DGELU ? nullptr : bias.p,
                                    CUDA_R_16BF, gelu_aux ? aux.p : nullptr})) {
              bf16_route = "cublaslt_epilogue";
              return;
            }
          }
          gemm_bf16(ctx, g.ta, g.tb, g.M, g.N, g.K, 1.0f, p.a, p.lda, p.b, p.ldb, is_dw ? 1.0f : 0.0f, c,
                    is_dw ? CUDA_R_32F : CUDA_R_16BF, ldc);
        };
        const double bf16_ms = timer.ms(bf16_call);

        // FP8: both operands K-contiguous (ta false, tb true), each cast (and transposed) from its bf16 source
        const Fp8Operand a8(p.a, g.ta ? g.K : g.M, g.ta ? g.M : g.K, g.ta);  // stored (M,K) after the cast
        const Fp8Operand b8(p.b, g.tb ? g.N : g.K, g.tb ? g.K : g.N, !g.tb);  // stored (N,K) after the cast
        const double cast_a = timer.ms([&] { a8.make(ctx); });
        const double cast_b = timer.ms([&] { b8.make(ctx); });
        const char* fp8_out = is_dw ? "fp32" : "bf16";
        const char* fp8_epi = p.epi == CUBLASLT_EPILOGUE_DEFAULT ? "none" : "same";
        auto fp8_gemm = [&](cublasLtEpilogue_t epi, bool fp32_out) {
          const bool gelu_aux = epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || epi == CUBLASLT_EPILOGUE_DGELU;
          LtGemm f{false, true, g.M, g.N, g.K, a8.data.p, g.K, b8.data.p, g.K, CUDA_R_8F_E4M3, fp32_out ? 1.0f : 0.0f,
                   c, ldc, CUBLAS_COMPUTE_32F, epi,
                   epi == CUBLASLT_EPILOGUE_DEFAULT || epi == CUBLASLT_EPILOGUE_DGELU ? nullptr : bias.p,
                   fp32_out ? CUDA_R_32F : CUDA_R_16BF, gelu_aux ? aux.p : nullptr};
          f.a_scale = a8.inv.as<float>(), f.b_scale = b8.inv.as<float>();
          return gemm_lt(ctx, f);
        };
        a8.make(ctx), b8.make(ctx);
        cublasLtEpilogue_t epi = p.epi;
        bool fp32_out = is_dw, ok = fp8_gemm(epi, fp32_out);
        if (!ok && epi != CUBLASLT_EPILOGUE_DEFAULT) epi = CUBLASLT_EPILOGUE_DEFAULT, fp8_epi = "none (refused)", ok = fp8_gemm(epi, fp32_out);
        if (!ok && fp32_out) fp32_out = false, fp8_out = "bf16 (fp32 refused)", ok = fp8_gemm(epi, fp32_out);
        const double flops = 2.0 * g.M * double(g.N) * g.K;
        std::printf("{\"bench\":\"gemm_fp8\",\"model\":\"%s\",\"gemm\":\"%s\",\"product\":\"%s\",\"M\":%d,\"N\":%d,"
                    "\"K\":%d,\"bf16_ms\":%.4f,\"bf16_route\":\"%s\",\"bf16_tflops\":%.1f",
                    m.name, y.name, p.name, g.M, g.N, g.K, bf16_ms, bf16_route, flops / (bf16_ms * 1e9));
        if (!ok) {
          std::printf(",\"fp8_ms\":null,\"fp8\":\"cuBLASLt offers no algorithm\"}\n");
          continue;
        }
        const double fp8_ms = timer.ms([&] { fp8_gemm(epi, fp32_out); });
        const double cast_ms = cast_a + cast_b;
        std::printf(",\"fp8_ms\":%.4f,\"fp8_tflops\":%.1f,\"fp8_epilogue\":\"%s\",\"fp8_out\":\"%s\",\"cast_ms\":%.4f,"
                    "\"cast_a_ms\":%.4f,\"cast_b_ms\":%.4f,\"a_transposed\":%s,\"b_transposed\":%s,"
                    "\"ratio\":%.3f,\"ratio_gemm_only\":%.3f}\n",
                    fp8_ms, flops / (fp8_ms * 1e9), fp8_epi, fp8_out, cast_ms, cast_a, cast_b,
                    a8.transposed ? "true" : "false", b8.transposed ? "true" : "false", bf16_ms / (fp8_ms + cast_ms),
                    bf16_ms / fp8_ms);
        const int times = std::string(y.name) == "lm_head" ? 1 : m.L;
        step.bf16 += times * bf16_ms, step.fp8 += times * fp8_ms, step.cast += times * cast_ms;
      }
    }
    std::printf("{\"bench\":\"gemm_fp8\",\"model\":\"%s\",\"gemm\":\"step\",\"product\":\"all\",\"layers\":%d,"
                "\"bf16_ms\":%.3f,\"fp8_ms\":%.3f,\"cast_ms\":%.3f,\"ratio\":%.3f,\"ratio_gemm_only\":%.3f}\n",
                m.name, m.L, step.bf16, step.fp8, step.cast, step.bf16 / (step.fp8 + step.cast), step.bf16 / step.fp8);
    std::fflush(stdout);
  }
  cublasLtDestroy(lt);
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  return 0;
}
