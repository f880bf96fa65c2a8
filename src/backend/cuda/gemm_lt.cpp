// Row-major GEMM through cuBLASLt with a fused epilogue: the bias add of the matmul forward
// (CUBLASLT_EPILOGUE_BIAS, with GELU: GELU_AUX_BIAS) or GELU's gradient in its backward (DGELU), so the
// output is not read and written again by a separate pass. Same operand swap as gemm.cpp (a row-major
// (R, K) matrix is a column-major (K, R) one). cuBLASLt docs: cublasLtMatmul, cublasLtEpilogue_t.
// Also gemm_lt_batched (gemm_lt_batched.h): strided-batched, column-major, its output apart from C.
#include <cublasLt.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_lt_batched.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
// RAII owners of the cuBLASLt descriptors (destroy results ignored: destructors never throw).
struct DescDel { void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); } };
struct LayoutDel { void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); } };
struct PrefDel { void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); } };
using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDel>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDel>;
using Pref = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDel>;

// layout: a column-major (rows, cols) matrix with leading dimension ld.
Layout layout(cudaDataType_t type, int rows, int cols, int ld) {
  cublasLtMatrixLayout_t l = nullptr;
  XT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), int64_t(ld)));
  return Layout(l);
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& value) {
  XT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof(value)));
}
// alignment_bytes: the largest power of two (<= 256) dividing the address.
uint32_t alignment_bytes(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// lt_enabled: XTRAIN_CUDA_LT=off turns the fused route off (every caller then takes its unfused one), so
// a benchmark can measure both with the same binary.
bool lt_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("XTRAIN_CUDA_LT");
    return env == nullptr || std::strcmp(env, "off") != 0;
  }();
  return on;
}

// matmul_desc: a cuBLASLt matmul of `compute` math with fp32 scalars (alpha, beta).
Desc matmul_desc(cublasComputeType_t compute) {
  cublasLtMatmulDesc_t raw = nullptr;
  XT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw, compute, CUDA_R_32F));
  return Desc(raw);
}

// pick_algorithm: cuBLASLt's first heuristic choice for desc on the layouts la, lb and lc (C's, also D's)
// within ctx's workspace, given align: the real alignment in bytes of cuBLASLt's A, B, C and D. The heuristic
// assumes 256-byte aligned operands unless told otherwise (cuBLASLt docs, cublasLtMatmulPreferenceAttributes_t),
// so a pointer into a buffer gets a suitable algorithm (or none) instead of a fault. nullopt when cuBLASLt
// offers none or does not support the case (the caller then takes its unfused route); throws Error on any
// other cuBLASLt failure.
std::optional<cublasLtMatmulAlgo_t> pick_algorithm(const OpContext& ctx, cublasLtMatmulDesc_t desc, const Layout& la,
                                                   const Layout& lb, const Layout& lc, const uint32_t (&align)[4]) {
  cublasLtMatmulPreference_t praw = nullptr;
  XT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&praw));
  Pref pref(praw);
  const uint64_t ws = ctx.workspace_bytes;
  XT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                       sizeof(ws)));
  const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    XT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.get(), attrs[i], &align[i], sizeof(align[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.cublaslt, desc, la.get(), lb.get(), lc.get(), lc.get(),
                                                           pref.get(), 1, &result, &found);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return std::nullopt;
  XT_CUBLAS_CHECK(st);
  return result.algo;
}
}  // namespace

double warm_gemm_heuristics(int device) noexcept {
  const auto t0 = std::chrono::steady_clock::now();
  cublasLtHandle_t h = nullptr;
  try {
    XT_CUDA_CHECK(cudaSetDevice(device));
    XT_CUBLAS_CHECK(cublasLtCreate(&h));
    // a bf16 GEMM with fp32 accumulation, as the bf16 forward asks for (any query loads the heuristics)
    const Desc desc = matmul_desc(CUBLAS_COMPUTE_32F);
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    const Layout a = layout(CUDA_R_16BF, 64, 64, 64), b = layout(CUDA_R_16BF, 64, 64, 64), c = layout(CUDA_R_16BF, 64, 64, 64);
    cublasLtMatmulPreference_t praw = nullptr;
    XT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&praw));
    const Pref pref(praw);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    XT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h, desc.get(), a.get(), b.get(), c.get(), c.get(), pref.get(), 1,
                                                   &result, &found));
  } catch (const Error&) {
    if (h) cublasLtDestroy(h);
    return -1.0;
  }
  cublasLtDestroy(h);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool gemm_lt_enabled() { return lt_enabled(); }

bool gemm_lt(const OpContext& ctx, const LtGemm& g) {
  XT_CHECK(g.M > 0 && g.N > 0 && g.K > 0, "bad gemm_lt shape M=" << g.M << " N=" << g.N << " K=" << g.K);
  XT_CHECK(ctx.cublaslt != nullptr, "gemm_lt: no cuBLASLt handle");
  if (!lt_enabled()) return false;
  // Column-major view: D (N, M) = op(B)^T-stored (N, K) x op(A)^T-stored (K, M): cuBLASLt's A is our B.
  const Desc desc = matmul_desc(g.compute);
  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, opa);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, opb);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  // the bias (BIAS) is of D's type: fp32, or bf16 for a bf16 D
  if (g.epilogue == CUBLASLT_EPILOGUE_BIAS || g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(g.c_type));
  if (g.aux != nullptr) {  // GELU's input: D's type and D's leading dimension (a multiple of 8, cuBLASLt docs)
    if (g.ldc % 8 != 0 || alignment_bytes(g.aux) < 16) return false;
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(g.ldc));
  }
  if (g.a_scale != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale);  // our A: its B
  if (g.b_scale != nullptr) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale);
  if (g.fast_accum) set_desc(desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(1));
  const cudaDataType_t a_type = g.a_type.value_or(g.ab_type);  // our A: cuBLASLt's B
  const Layout la = g.tb ? layout(g.ab_type, g.K, g.N, g.ldb) : layout(g.ab_type, g.N, g.K, g.ldb);
  const Layout lb = g.ta ? layout(a_type, g.M, g.K, g.lda) : layout(a_type, g.K, g.M, g.lda);
  const Layout lc = layout(g.c_type, g.N, g.M, g.ldc);
  if (g.bias != nullptr && alignment_bytes(g.bias) < 16) return false;  // epilogue vectors: keep them 16-byte aligned
  // each pointer's real alignment: cuBLASLt's A is our B (column-major view), D is C
  const uint32_t align[4] = {alignment_bytes(g.B), alignment_bytes(g.A), alignment_bytes(g.C), alignment_bytes(g.C)};
  const std::optional<cublasLtMatmulAlgo_t> algo = pick_algorithm(ctx, desc.get(), la, lb, lc, align);
  if (!algo) return false;
  const float alpha = 1.0f;
  XT_CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt, desc.get(), &alpha, g.B, la.get(), g.A, lb.get(), &g.beta, g.C, lc.get(),
                                 g.C, lc.get(), &*algo, ctx.workspace, ctx.workspace_bytes, ctx.stream));
  return true;
}

bool gemm_lt_batched(const OpContext& ctx, const LtBatchedGemm& g) {
  XT_CHECK(g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0,
           "bad gemm_lt_batched shape m=" << g.m << " n=" << g.n << " k=" << g.k << " batch=" << g.batch);
  XT_CHECK(ctx.cublaslt != nullptr, "gemm_lt_batched: no cuBLASLt handle");
  if (!lt_enabled()) return false;
  const Desc desc = matmul_desc(g.compute);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, g.ta);
  set_desc(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, g.tb);
  // each layout as stored (column-major), with the batch's count and stride (cublasLtMatrixLayoutAttribute_t)
  auto batched = [&](int rows, int cols, int ld, long long stride) {
    Layout l = layout(g.type, rows, cols, ld);
    const int32_t count = g.batch;
    const int64_t offset = stride;
    XT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    XT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                     sizeof(offset)));
    return l;
  };
  const bool na = g.ta == CUBLAS_OP_N, nb = g.tb == CUBLAS_OP_N;
  const Layout la = na ? batched(g.m, g.k, g.lda, g.stride_a) : batched(g.k, g.m, g.lda, g.stride_a);
  const Layout lb = nb ? batched(g.k, g.n, g.ldb, g.stride_b) : batched(g.n, g.k, g.ldb, g.stride_b);
  const Layout lc = batched(g.m, g.n, g.ldc, g.stride_c);
  // the real alignment of every matrix of the batch, as gemm_lt states it for its pointers: that of the
  // first one and of the stride between them (in bytes)
  XT_CHECK(g.type == CUDA_R_16BF || g.type == CUDA_R_32F, "gemm_lt_batched: bf16 or fp32 matrices only");
  const size_t elem_bytes = g.type == CUDA_R_16BF ? 2 : 4;
  auto batch_alignment = [&](const void* p, long long stride) {
    const uint32_t first = alignment_bytes(p);
    if (g.batch == 1) return first;
    const uint32_t step = alignment_bytes(reinterpret_cast<const void*>(uintptr_t(stride) * elem_bytes));
    return first < step ? first : step;
  };
  const uint32_t align[4] = {batch_alignment(g.A, g.stride_a), batch_alignment(g.B, g.stride_b),
                             batch_alignment(g.C, g.stride_c), batch_alignment(g.D, g.stride_c)};
  const std::optional<cublasLtMatmulAlgo_t> algo = pick_algorithm(ctx, desc.get(), la, lb, lc, align);
  if (!algo) return false;
  XT_CUBLAS_CHECK(cublasLtMatmul(ctx.cublaslt, desc.get(), &g.alpha, g.A, la.get(), g.B, lb.get(), &g.beta, g.C,
                                 lc.get(), g.D, lc.get(), &*algo, ctx.workspace, ctx.workspace_bytes, ctx.stream));
  return true;
}

}  // namespace xtrain::cuda
