// Fully connected layers through cuBLAS (gemm.cpp) and cuBLASLt (gemm_lt.cpp), and the forward of few rows
// (N <= kGemvMaxRows, decoding) through gemv_forward (gemv.cu), which reads each weight once for all rows.
// --dtype fp32: fp32 activations, plain fp32 GEMMs (the handle keeps CUBLAS_DEFAULT_MATH, so no TF32 or
// BF16x9 emulation, see cuda_backend.cpp); dbias a double column sum.
// --dtype bf16: bf16 activations (inp, out, dout, dinp are bf16 in memory, ops.h). The fp32 master
// weights are read in bf16 from the copy prepare_weights made at the start of the forward (ctx.weights), or
// rounded into a scratch bf16 copy per call where they are not in it (to_bf16; Bf16Copy), every product is bf16 x
// bf16 on tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F); out and dinp are written in bf16,
// dw accumulates in fp32. dinp += accumulates through the GEMM's beta (C read and written in bf16); dw too (beta
// 0 for the first writer of a weight gradient, Grad::assign: the fp32 buffer is then not read, and dbias's column
// sum stores instead of adding).
// With a bias, the forward is one cuBLASLt GEMM with the bias in its epilogue (fp32 bias with fp32, a bf16
// copy with bf16: cuBLASLt takes the bias in the output's type), and dbias is a column sum of dout; where
// cuBLASLt is off or has no algorithm for a case (e.g. rows not a multiple of 8 elements) the forward takes
// the unfused route instead (a bias kernel adding the fp32 bias).
// The MLP's fc layer and GELU (bf16): GELU_AUX_BIAS writes pre and gelu(pre) in the forward GEMM, DGELU
// multiplies the fc-proj dinp GEMM by gelu'(pre) (cuBLASLt's GELU is the tanh approximation, as xtrain's).
// Few rows (N <= kGemvMaxRows, gemv.h, the only switch; fp32 and bf16): out = inp w^T + bias by gemv_forward, w
// the fp32 weights or the same bf16 copy (Bf16Copy), the bias added in fp32; the fc layer's pre and gelu(pre)
// from that kernel's fp32 sum (gelu.cuh). A row's bits do not depend on the other rows there, so
// RowKernels::per_row and a decoding batch agree. The backward always takes the GEMMs.
// --fp8 (bf16 only; the weights in OpContext::fp8, made with the mirror): the forward multiplies inp cast to E4M3
// by the weights' E4M3 copy (fast accumulation, as torchao's forward), dinp the output gradient cast to E5M2 by
// the weights' transposed copy, dw the output gradient's transposed E5M2 cast by the input's transposed E4M3
// cast (fp32 accumulation in both), every cast with one current scale for the tensor (fp8.cu); outputs as in bf16
// (out and dinp bf16, dw fp32 with beta, the bias in the forward's epilogue, dbias dout's bf16 column sum).
// Rows (N) and features (IC, OC) must be multiples of 16 (cuBLASLt's FP8 layouts); a product of other sizes (a
// decoding step's few rows) takes the bf16 route with the mirror's bf16 weights.
#include <optional>
#include <string>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_gemms.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
using bf16 = __nv_bfloat16;

// Bf16Copy: the bf16 operand of a row-major fp32 matrix (rows, cols) (a weight, or a bias as one row), row
// stride ld = bf16_ld(cols). The weight mirror's copy (ctx.weights, prepare_weights) where the matrix lies in
// it with that stride (cols % 8 == 0: unpadded rows) and starts on a 256-byte boundary, as the allocator's
// blocks do: cuBLAS(Lt) then sees the stride and alignment a scratch copy would give it, so it picks the same
// algorithm and the products are the same bits. Otherwise a scratch copy made here (to_bf16).
struct Bf16Copy {
  std::optional<ScratchBuffer<bf16>> buf;
  const bf16* ptr;
  int ld;
  Bf16Copy(const OpContext& ctx, const float* src, int rows, int cols)
      : ptr(ctx.weights.find(src, size_t(rows) * cols)), ld(bf16_ld(cols)) {
    if (ptr && ld == cols && reinterpret_cast<uintptr_t>(ptr) % kBlockAlignment == 0) return;
    buf.emplace(*ctx.alloc, size_t(rows) * ld, "bf16 weight copy per call");
    to_bf16(ctx, buf->get(), src, rows, cols);
    ptr = buf->get();
  }
  const bf16* get() const { return ptr; }
};

// out (N,OC) += bias (OC) broadcast over rows; out of activation type T
template <typename T>
__global__ void add_bias_kernel(T* out, const float* bias, size_t count, int OC) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(out[i]) + bias[i % OC]);
}

// The same for fp32 with float4 columns (OC4 = OC/4): thread (x) owns 4 columns and keeps their bias
// in registers, blocks in y stride over rows; no per-element 64-bit modulo (the kernel above was
// issue-bound at ~1/3 of a bf16 qkv forward).
__global__ void add_bias4_kernel(float4* out, const float4* bias, int N, int OC4) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC4) return;
  const float4 b = bias[c];
  for (int r = blockIdx.y; r < N; r += gridDim.y) {
    float4 v = out[size_t(r) * OC4 + c];
    v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
    out[size_t(r) * OC4 + c] = v;
  }
}
constexpr int kBiasRowBlocks = 1024;  // y blocks: enough to fill the GPU with a few rows each

template <typename T>
void add_bias(const OpContext& ctx, T* out, const float* bias, int N, int OC) {
  if constexpr (std::is_same<T, float>::value) {
    if (OC % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0) {
      const int OC4 = OC / 4;
      const dim3 grid((OC4 + kThreads - 1) / kThreads, N < kBiasRowBlocks ? N : kBiasRowBlocks);
      add_bias4_kernel<<<grid, kThreads, 0, ctx.stream>>>(reinterpret_cast<float4*>(out),
                                                          reinterpret_cast<const float4*>(bias), N, OC4);
      XT_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  const size_t count = size_t(N) * OC;
  add_bias_kernel<T><<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(out, bias, count, OC);
  XT_CUDA_LAUNCH_CHECK();
}

// use_gemv: whether a forward of N rows takes gemv_forward (kGemvMaxRows, gemv.h)
bool use_gemv(MatmulRoute route, int N) {
  return route == MatmulRoute::gemv || (route == MatmulRoute::automatic && N <= kGemvMaxRows);
}

// lt_aligned: bf16 activation rows (IC, OC elements) start 16-byte aligned, as cuBLASLt's bf16 tensor-core
// kernels expect; other shapes take the unfused route (cuBLAS GEMM + bias kernel / column sum).
bool lt_aligned(int IC, int OC) { return IC % 8 == 0 && OC % 8 == 0; }

// Fp8Scratch: FP8 operands of one product from the allocator, and their amax and inverse scale (fp8_cast)
struct Fp8Scratch {
  ScratchBuffer<uint8_t> data;
  ScratchBuffer<float> scales;
  Fp8Scratch(const OpContext& ctx, size_t bytes) : data(*ctx.alloc, bytes, "fp8 operand"), scales(*ctx.alloc, 8, "fp8 scale") {}
  uint8_t* at(size_t offset) const { return data.get() + offset; }
  float* amax() const { return scales.get(); }
  float* inv() const { return scales.get() + 4; }  // 16-byte aligned, as cuBLASLt's scale pointers
};

// fp8_weight: the FP8 copy of w (OC, IC) for a product of N rows, or null where that product takes bf16 (IC and OC
// of a listed weight are multiples of 16: Backend::fp8_takes)
const Fp8Weight* fp8_weight(const OpContext& ctx, const float* w, int N, int IC, int OC) {
  if (!ctx.bf16 || ctx.fp8 == nullptr || N % 16 != 0) return nullptr;
  return ctx.fp8->find(w, OC, IC);
}

void fp8_failed(const char* what, int N, int IC, int OC) {
  throw Error(std::string("--fp8: cuBLASLt offers no FP8 algorithm for the ") + what + " of a linear layer with N=" +
              std::to_string(N) + " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) +
              " on this GPU; run without --fp8, or with it naming other layers");
}

// forward_fp8: out (N,OC) = E4M3(inp) E4M3(w)^T (+ bias), bf16 out
void forward_fp8(const OpContext& ctx, bf16* out, const bf16* inp, const Fp8Weight& w8, const float* bias, int N,
                 int IC, int OC) {
  const Fp8Scratch a(ctx, size_t(N) * IC);
  fp8_cast(ctx, inp, N, IC, CUDA_R_8F_E4M3, a.at(0), nullptr, a.amax(), a.inv());
  std::optional<Bf16Copy> b16;  // cuBLASLt's bias of a bf16 D is bf16 (forward_bf16)
  if (bias) b16.emplace(ctx, bias, 1, OC);
  const LinearGemm g = linear_forward(N, IC, OC);
  LtGemm lt{g.ta, g.tb, g.M, g.N, g.K, a.at(0), IC, w8.w8, IC, CUDA_R_8F_E4M3, 0.0f, out, OC, CUBLAS_COMPUTE_32F,
            bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias ? const_cast<bf16*>(b16->get()) : nullptr,
            CUDA_R_16BF};
  lt.a_scale = a.inv(), lt.b_scale = w8.inv, lt.fast_accum = true;
  if (!gemm_lt(ctx, lt)) fp8_failed("forward", N, IC, OC);
}

// backward_fp8: dinp (N,IC) (+)= E5M2(dout) E4M3(w), dw (OC,IC) (+)= E5M2(dout)^T E4M3(inp), dbias as bf16's
void backward_fp8(const OpContext& ctx, bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp,
                  const Fp8Weight& w8, int N, int IC, int OC, float beta, bool accumulate_dw) {
  const size_t dout_bytes = size_t(N) * OC;
  const Fp8Scratch d(ctx, 2 * dout_bytes);  // dout (N,OC), then its transpose (OC,N), one scale
  fp8_cast(ctx, dout, N, OC, CUDA_R_8F_E5M2, d.at(0), d.at(dout_bytes), d.amax(), d.inv());
  const LinearGemm gx = linear_dinp(N, IC, OC);
  // cuBLASLt's FP8 layout: dinp's B is w transposed (IC,OC), stored K-contiguous (w8t), so tb = true
  LtGemm lx{gx.ta, true, gx.M, gx.N, gx.K, d.at(0), OC, w8.w8t, OC, CUDA_R_8F_E4M3, beta, dinp, IC, CUBLAS_COMPUTE_32F,
            CUBLASLT_EPILOGUE_DEFAULT, nullptr, CUDA_R_16BF};
  lx.a_type = CUDA_R_8F_E5M2, lx.a_scale = d.inv(), lx.b_scale = w8.inv;
  if (!gemm_lt(ctx, lx)) fp8_failed("input gradient", N, IC, OC);
  const Fp8Scratch x(ctx, size_t(N) * IC);  // inp transposed (IC,N)
  fp8_cast(ctx, inp, N, IC, CUDA_R_8F_E4M3, nullptr, x.at(0), x.amax(), x.inv());
  const LinearGemm gw = linear_dw(N, IC, OC);
  // dw's A is dout^T (OC,N) stored as such (ta = false), its B inp^T (IC,N) (tb = true): both N-contiguous
  LtGemm lw{false, true, gw.M, gw.N, gw.K, d.at(dout_bytes), N, x.at(0), N, CUDA_R_8F_E4M3,
            accumulate_dw ? 1.0f : 0.0f, dw, IC, CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_DEFAULT, nullptr, CUDA_R_32F};
  lw.a_type = CUDA_R_8F_E5M2, lw.a_scale = d.inv(), lw.b_scale = x.inv();
  if (!gemm_lt(ctx, lw)) fp8_failed("weight gradient", N, IC, OC);
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC, accumulate_dw);
}

void forward_f32(const OpContext& ctx, float* out, const float* inp, const float* w, const float* bias, int N,
                 int IC, int OC, bool gemv) {
  if (IC > 0 && gemv) return gemv_forward(ctx, out, nullptr, inp, w, IC, bias, N, IC, OC);
  const LinearGemm fwd = linear_forward(N, IC, OC);
  if (IC > 0 && bias &&
      gemm_lt(ctx, LtGemm{fwd.ta, fwd.tb, fwd.M, fwd.N, fwd.K, inp, IC, w, IC, CUDA_R_32F, 0.0f, out, OC,
                          ctx.gemm_compute, CUBLASLT_EPILOGUE_BIAS, const_cast<float*>(bias)})) {
    return;  // out (N,OC) = inp w^T + bias in one cuBLASLt call (bias in the GEMM's epilogue)
  }
  if (IC == 0)  // empty sum; do not rely on cuBLAS's handling of k == 0
    XT_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N) * OC * sizeof(float), ctx.stream));
  else
    gemm(ctx, fwd.ta, fwd.tb, fwd.M, fwd.N, fwd.K, 1.0f, inp, IC, 0, w, IC, 0, 0.0f, out, OC, 0);  // out = inp w^T
  if (bias) add_bias(ctx, out, bias, N, OC);
}

void forward_bf16(const OpContext& ctx, bf16* out, const bf16* inp, const float* w, const float* bias, int N, int IC,
                  int OC, bool gemv) {
  if (IC == 0) {
    XT_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N) * OC * sizeof(bf16), ctx.stream));
    if (bias) add_bias(ctx, out, bias, N, OC);
    return;
  }
  if (!gemv)
    if (const Fp8Weight* w8 = fp8_weight(ctx, w, N, IC, OC)) return forward_fp8(ctx, out, inp, *w8, bias, N, IC, OC);
  const Bf16Copy w16(ctx, w, OC, IC);
  if (gemv) return gemv_forward(ctx, out, nullptr, inp, w16.get(), w16.ld, bias, N, IC, OC);
  const LinearGemm fwd = linear_forward(N, IC, OC);
  if (bias && lt_aligned(IC, OC)) {
    // cuBLASLt wants the bias in D's type for a bf16 D (an fp32 bias is refused with INVALID_VALUE on the
    // H200, cuBLAS 13.1): a bf16 copy, as PyTorch's autocast also rounds the bias of a bf16 linear.
    const Bf16Copy b16(ctx, bias, 1, OC);
    if (gemm_lt(ctx, LtGemm{fwd.ta, fwd.tb, fwd.M, fwd.N, fwd.K, inp, IC, w16.get(), w16.ld, CUDA_R_16BF, 0.0f, out,
                            OC, CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_BIAS, const_cast<bf16*>(b16.get()), CUDA_R_16BF}))
      return;
  }
  gemm_bf16(ctx, fwd.ta, fwd.tb, fwd.M, fwd.N, fwd.K, 1.0f, inp, IC, w16.get(), w16.ld, 0.0f, out, CUDA_R_16BF, OC);
  if (bias) add_bias(ctx, out, bias, N, OC);
}

void backward_f32(const OpContext& ctx, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                  const float* w, int N, int IC, int OC, float beta, bool accumulate_dw) {
  if (IC > 0) {
    const LinearGemm dx = linear_dinp(N, IC, OC), dwg = linear_dw(N, IC, OC);
    gemm(ctx, dx.ta, dx.tb, dx.M, dx.N, dx.K, 1.0f, dout, OC, 0, w, IC, 0, beta, dinp, IC, 0);  // dinp (+)= dout w
    gemm(ctx, dwg.ta, dwg.tb, dwg.M, dwg.N, dwg.K, 1.0f, dout, OC, 0, inp, IC, 0, accumulate_dw ? 1.0f : 0.0f, dw,
         IC, 0);  // dw (+)= dout^T inp
  }
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC, accumulate_dw);  // double partial sums (kFp32Rel)
}

// weight_grads_bf16: dw (OC,IC) += dout^T inp in fp32 (IC > 0), then dbias += dout's column sums (the fixed-order
// column reduction of column_reduce.cuh); both = when accumulate_dw is false (beta 0). Not cuBLASLt's BGRADB
// epilogue: with it the heuristic picks split-K algorithms with a reduce kernel plus a separate bias-gradient kernel
// per call, and the plain GEMM plus one column sum measured faster (seed config +1.4% tok/s, GPT-2 124M within noise;
// one H200, bench/results/training_h200_2026-12.md "Small kernels").
void weight_grads_bf16(const OpContext& ctx, float* dw, float* dbias, const bf16* dout, const bf16* inp, int N, int IC,
                       int OC, bool accumulate_dw) {
  const LinearGemm g = linear_dw(N, IC, OC);
  gemm_bf16(ctx, g.ta, g.tb, g.M, g.N, g.K, 1.0f, dout, OC, inp, IC, accumulate_dw ? 1.0f : 0.0f, dw, CUDA_R_32F, IC);
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC, accumulate_dw);
}

void backward_bf16(const OpContext& ctx, bf16* dinp, float* dw, float* dbias, const bf16* dout, const bf16* inp,
                   const float* w, int N, int IC, int OC, float beta, bool accumulate_dw) {
  if (IC == 0) {
    if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC, accumulate_dw);
    return;
  }
  if (const Fp8Weight* w8 = fp8_weight(ctx, w, N, IC, OC))
    return backward_fp8(ctx, dinp, dw, dbias, dout, inp, *w8, N, IC, OC, beta, accumulate_dw);
  const Bf16Copy w16(ctx, w, OC, IC);
  // dinp (N,IC) (+)= dout w, read (beta 1) and written in bf16
  const LinearGemm g = linear_dinp(N, IC, OC);
  gemm_bf16(ctx, g.ta, g.tb, g.M, g.N, g.K, 1.0f, dout, OC, w16.get(), w16.ld, beta, dinp, CUDA_R_16BF, IC);
  weight_grads_bf16(ctx, dw, dbias, dout, inp, N, IC, OC, accumulate_dw);
}
}  // namespace

void matmul_forward(const OpContext& ctx, void* out, const void* inp, const float* w, const float* bias, int N,
                    int IC, int OC, MatmulRoute route) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;
  const bool gemv = use_gemv(route, N);
  if (ctx.bf16)
    forward_bf16(ctx, static_cast<bf16*>(out), static_cast<const bf16*>(inp), w, bias, N, IC, OC, gemv);
  else
    forward_f32(ctx, static_cast<float*>(out), static_cast<const float*>(inp), w, bias, N, IC, OC, gemv);
}

bool fused_row_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const float* w, const float* bias,
                       int IC, int OC, const GemvFusion& f) {
  // the bits of the unfused ops hold only where they take the GEMV route too (one row: kGemvMaxRows >= 1)
  if (IC <= 0 || OC <= 0 || !use_gemv(MatmulRoute::automatic, 1)) return false;
  GemvFusion g = f;
  g.prefetch_weights = true;  // the fp32 parameters, or their mirror copy: no kernel of the step writes them
  if (!ctx.bf16) return gemv_fused_forward(ctx, out, pre, inp, w, IC, bias, IC, OC, g);
  const Bf16Copy w16(ctx, w, OC, IC);
  g.prefetch_weights = !w16.buf;  // a scratch copy is written by the conversion kernel just before
  return gemv_fused_forward(ctx, out, pre, inp, w16.get(), w16.ld, bias, IC, OC, g);
}

bool matmul_gelu_forward(const OpContext& ctx, void* pre, void* out, const void* inp, const float* w,
                         const float* bias, int N, int IC, int OC, MatmulRoute route) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || IC == 0 || OC == 0) return false;
  if (use_gemv(route, N)) {  // pre = inp w^T + bias, out = gelu of that fp32 value, in one kernel
    if (!ctx.bf16) {
      gemv_forward(ctx, out, pre, inp, w, IC, bias, N, IC, OC);
      return true;
    }
    const Bf16Copy w16(ctx, w, OC, IC);
    gemv_forward(ctx, out, pre, inp, w16.get(), w16.ld, bias, N, IC, OC);
    return true;
  }
  // FP8 weights: the unfused route (matmul_forward's FP8 product, then gelu_forward)
  if (!ctx.bf16 || !lt_aligned(IC, OC) || fp8_weight(ctx, w, N, IC, OC)) return false;
  const Bf16Copy w16(ctx, w, OC, IC);
  std::optional<Bf16Copy> b16;  // a bf16 bias, as in forward_bf16
  if (bias) b16.emplace(ctx, bias, 1, OC);
  // pre (N,OC) = inp w^T + bias (the aux output), out = gelu(pre) from the fp32 sum, in one cuBLASLt call
  const LinearGemm g = linear_forward(N, IC, OC);
  return gemm_lt(ctx, LtGemm{g.ta, g.tb, g.M, g.N, g.K, inp, IC, w16.get(), w16.ld, CUDA_R_16BF, 0.0f, out, OC,
                             CUBLAS_COMPUTE_32F, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                             bias ? const_cast<bf16*>(b16->get()) : nullptr, CUDA_R_16BF, pre});
}

bool gelu_matmul_backward(const OpContext& ctx, void* dpre, float* dw, float* dbias, const void* dout,
                          const void* inp, const void* pre, const float* w, int N, int IC, int OC,
                          bool accumulate_dw) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (!ctx.bf16 || N == 0 || IC == 0 || OC == 0 || !lt_aligned(IC, OC) || fp8_weight(ctx, w, N, IC, OC)) return false;
  const Bf16Copy w16(ctx, w, OC, IC);
  // dpre (N,IC) = gelu'(pre) * (dout w): the dinp GEMM with GELU's gradient in its epilogue (pre as aux)
  const LinearGemm g = linear_dinp(N, IC, OC);
  if (!gemm_lt(ctx, LtGemm{g.ta, g.tb, g.M, g.N, g.K, dout, OC, w16.get(), w16.ld, CUDA_R_16BF, 0.0f, dpre, IC,
                           CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_DGELU, nullptr, CUDA_R_16BF, const_cast<void*>(pre)}))
    return false;
  weight_grads_bf16(ctx, dw, dbias, static_cast<const bf16*>(dout), static_cast<const bf16*>(inp), N, IC, OC,
                    accumulate_dw);
  return true;
}

void matmul_backward(const OpContext& ctx, void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                     const float* w, int N, int IC, int OC, bool accumulate, bool accumulate_dw) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N > 0 && IC > 0 && (OC == 0 && !accumulate))  // an empty sum assigned: dinp = 0
    XT_CUDA_CHECK(cudaMemsetAsync(dinp, 0, size_t(N) * IC * (ctx.bf16 ? 2 : 4), ctx.stream));
  if (N == 0 && OC > 0 && !accumulate_dw) {  // empty sums assigned: dw = 0, dbias = 0
    if (IC > 0) XT_CUDA_CHECK(cudaMemsetAsync(dw, 0, size_t(OC) * IC * sizeof(float), ctx.stream));
    if (dbias) XT_CUDA_CHECK(cudaMemsetAsync(dbias, 0, size_t(OC) * sizeof(float), ctx.stream));
  }
  if (N == 0 || OC == 0) return;  // every gradient term is an empty sum
  const float beta = accumulate ? 1.0f : 0.0f;  // GEMM beta on dinp: += or =
  if (ctx.bf16)
    backward_bf16(ctx, static_cast<bf16*>(dinp), dw, dbias, static_cast<const bf16*>(dout),
                  static_cast<const bf16*>(inp), w, N, IC, OC, beta, accumulate_dw);
  else
    backward_f32(ctx, static_cast<float*>(dinp), dw, dbias, static_cast<const float*>(dout),
                 static_cast<const float*>(inp), w, N, IC, OC, beta, accumulate_dw);
}

}  // namespace xtrain::cuda
