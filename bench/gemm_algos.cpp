// Times every algorithm cuBLASLt's heuristic offers for each GEMM of a GPT-2 124M training step (bf16
// operands, fp32 accumulation, the epilogues xtrain uses), so the cost of taking the heuristic's first
// answer (what xtrain does) can be read against the fastest algorithm it offered. Not a test.
// One line per (GEMM, algorithm): rank in the heuristic's list, mean ms of `reps` calls after one
// warm-up, TFLOP/s (2*M*N*K), and the algorithm's configuration (tile id, stages, split-K, reduction
// scheme, CTA swizzle, cluster shape; cublasLtMatmulAlgoConfigAttributes_t).
// Usage: gemm_algos [B=16] [reps=20] [max_algos=16]   (T = 1024, C = 768, Vp = 50304)
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_args.h"

namespace {
#define CK(x) XT_BENCH_CHECK("gemm_algos", x)

struct Case {
  std::string name;
  bool ta, tb;
  int M, N, K;  // row-major: C (M, N) = op(A) (M, K) op(B) (K, N), as xtrain's gemm_lt
  cudaDataType_t c_type;
  float beta;
  cublasLtEpilogue_t epi;
};

template <typename V>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const V& v) {
  CK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)));
}
template <typename V>
V algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  V v{};
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof(v), &w);
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kUsage = "usage: gemm_algos [B=16] [reps=20] [max_algos=16]   (B in 1..64, reps 1..1000, max_algos 1..64)";
  const xtrain::bench::BenchArgs args{argc, argv, "gemm_algos", kUsage};
  if (args.help("Times every cuBLASLt algorithm the heuristic offers for each GEMM of a GPT-2 124M step.")) return 0;
  args.check(3);
  auto arg = [&](int i, int def, int lo, int hi) { return args.integer(i, def, lo, hi); };
  const int B = arg(1, 16, 1, 64), reps = arg(2, 20, 1, 1000), max_algos = arg(3, 16, 1, 64);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("# no CUDA device visible\n");
    return 77;
  }
  const int T = 1024, C = 768, Vp = 50304, Nt = B * T;
  std::printf("# gemm_algos %d %d %d (tokens %d)\n", B, reps, max_algos, Nt);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const size_t ws_bytes = 32u << 20;
  void *ws, *A, *Bm, *Cm, *aux, *bias;
  const size_t big = size_t(Nt) * 4 * C > size_t(Vp) * C ? size_t(Nt) * 4 * C : size_t(Vp) * C;
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMalloc(&A, size_t(Nt) * Vp * 2));  // logits-sized
  CK(cudaMalloc(&Bm, big * 2));
  CK(cudaMalloc(&Cm, size_t(Nt) * Vp * 2 > big * 4 ? size_t(Nt) * Vp * 2 : big * 4));
  CK(cudaMalloc(&aux, big * 2));
  CK(cudaMalloc(&bias, 4 * 4 * C * 4));
  {  // random operands (zeros would draw less power and clock higher than training data)
    std::vector<__nv_bfloat16> h(size_t(1) << 24);
    uint64_t x = 88172645463325252ull;
    for (auto& v : h) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v = __float2bfloat16(float(int(x % 2001) - 1000) * 1e-3f);
    }
    auto fill = [&](void* p, size_t n) {
      for (size_t o = 0; o < n; o += h.size())
        CK(cudaMemcpy(static_cast<__nv_bfloat16*>(p) + o, h.data(), std::min(h.size(), n - o) * 2, cudaMemcpyHostToDevice));
    };
    fill(A, size_t(Nt) * Vp);
    fill(Bm, big);
    fill(aux, big);
  }
  CK(cudaMemset(bias, 0, 4 * 4 * C * 4));
  const auto bf = CUDA_R_16BF, f32 = CUDA_R_32F;
  const auto fwd = [&](const char* n, int IC, int OC, cublasLtEpilogue_t e) {
    return Case{std::string("fwd.") + n, false, true, Nt, OC, IC, bf, 0.f, e};
  };
  const auto dx = [&](const char* n, int IC, int OC, cublasLtEpilogue_t e) {
    return Case{std::string("dinp.") + n, false, false, Nt, IC, OC, bf, 0.f, e};
  };
  const auto dw = [&](const char* n, int IC, int OC, cublasLtEpilogue_t e) {
    return Case{std::string("dw.") + n, true, false, OC, IC, Nt, f32, 1.f, e};
  };
  const cublasLtEpilogue_t D = CUBLASLT_EPILOGUE_DEFAULT;
  std::vector<Case> cases = {
      fwd("qkv", C, 3 * C, CUBLASLT_EPILOGUE_BIAS), fwd("attproj", C, C, CUBLASLT_EPILOGUE_BIAS),
      fwd("fc_gelu", C, 4 * C, CUBLASLT_EPILOGUE_GELU_AUX_BIAS), fwd("fcproj", 4 * C, C, CUBLASLT_EPILOGUE_BIAS),
      fwd("lm_head", C, Vp, D),
      dx("qkv", C, 3 * C, D), dx("attproj", C, C, D), dx("fc", C, 4 * C, D),
      dx("fcproj_dgelu", 4 * C, C, CUBLASLT_EPILOGUE_DGELU), dx("fcproj_dgelu_bgrad", 4 * C, C, CUBLASLT_EPILOGUE_DGELU_BGRAD),
      dx("lm_head", C, Vp, D),
      dw("qkv_bgradb", C, 3 * C, CUBLASLT_EPILOGUE_BGRADB), dw("qkv", C, 3 * C, D),
      dw("attproj_bgradb", C, C, CUBLASLT_EPILOGUE_BGRADB), dw("attproj", C, C, D),
      dw("fc_bgradb", C, 4 * C, CUBLASLT_EPILOGUE_BGRADB), dw("fc", C, 4 * C, D),
      dw("fcproj_bgradb", 4 * C, C, CUBLASLT_EPILOGUE_BGRADB), dw("fcproj", 4 * C, C, D),
      dw("lm_head", C, Vp, D)};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (const Case& g : cases) {
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(desc, CUBLASLT_MATMUL_DESC_TRANSA, opa);
    set(desc, CUBLASLT_MATMUL_DESC_TRANSB, opb);
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epi);
    if (g.epi != D) set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    if (g.epi == CUBLASLT_EPILOGUE_BIAS || g.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
      set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(bf));
    if (g.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || g.epi == CUBLASLT_EPILOGUE_DGELU ||
        g.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.N));
    }
    // column-major view as gemm_lt.cpp: cuBLASLt's A is our B, D is (N, M)
    const int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
    cublasLtMatrixLayout_t la, lb, lc;
    if (g.tb) CK(cublasLtMatrixLayoutCreate(&la, bf, g.K, g.N, ldb)); else CK(cublasLtMatrixLayoutCreate(&la, bf, g.N, g.K, ldb));
    if (g.ta) CK(cublasLtMatrixLayoutCreate(&lb, bf, g.M, g.K, lda)); else CK(cublasLtMatrixLayoutCreate(&lb, bf, g.K, g.M, lda));
    CK(cublasLtMatrixLayoutCreate(&lc, g.c_type, g.N, g.M, g.N));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = ws_bytes;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
    std::vector<cublasLtMatmulHeuristicResult_t> res(max_algos);
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, max_algos, res.data(), &found);
    const double flops = 2.0 * g.M * double(g.N) * g.K;
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      std::printf("%-22s no algorithm (status %d)\n", g.name.c_str(), int(st));
      continue;
    }
    double first = 0, best = 1e30;
    int best_i = -1;
    for (int i = 0; i < found; ++i) {
      const float alpha = 1.f;
      auto run = [&] {
        return cublasLtMatmul(lt, desc, &alpha, Bm, la, A, lb, &g.beta, Cm, lc, Cm, lc, &res[i].algo, ws, ws_bytes, stream);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) {
        std::printf("%-22s #%2d failed\n", g.name.c_str(), i);
        continue;
      }
      CK(cudaEventRecord(e0, stream));
      for (int r = 0; r < reps; ++r) CK(run());
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      const double t = ms / reps;
      if (i == 0) first = t;
      if (t < best) best = t, best_i = i;
      const auto& a = res[i].algo;
      std::printf("%-22s #%2d %8.4f ms %6.1f TFLOP/s  id %d tile %d stages %d splitk %d red %d swizzle %d cluster %d ws %zu\n",
                  g.name.c_str(), i, t, flops / (t * 1e-3) / 1e12, algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_ID),
                  algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_TILE_ID), algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                  algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                  algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), algo_attr<int>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
                  res[i].workspaceSize);
    }
    std::printf("SUMMARY %-22s first %.4f ms best %.4f ms (#%d) saves %.4f ms per call\n", g.name.c_str(), first, best,
                best_i, first - best);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
  return 0;
}
