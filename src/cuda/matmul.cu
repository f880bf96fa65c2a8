// Fully connected layers through cuBLAS (gemm.cpp), fp32 storage. --dtype fp32: plain fp32 GEMMs (the
// handle keeps CUBLAS_DEFAULT_MATH, so no TF32 or BF16x9 emulation, see cuda_backend.cpp).
// --dtype bf16: bf16 tensor-core products with fp32 accumulation and fp32 output, by the faster of two
// routes measured on the H200 at GPT-2 124M sizes (docs/benchmarks.md): the forward GEMM passes its
// fp32 operands to cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF (rounded to bf16 inside cuBLAS); the
// backward rounds dout, w and inp into scratch bf16 copies (to_bf16; the fp32 master weights stay
// untouched) and multiplies those, 1.3-1.5x faster than FAST_16BF there (dout's copy serves both
// GEMMs), while in the forward the copies cost more than they save (lm_head: 6.8 vs 4.9 ms).
// With a bias, the forward is one cuBLASLt GEMM with the bias in its epilogue, and the bf16 backward takes
// dbias from the dw GEMM's BGRADB epilogue (gemm_lt.cpp); fp32 keeps the double column sum for dbias.
#include "cuda/common.cuh"
#include "cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// Bf16Copy: a scratch bf16 copy of a row-major fp32 matrix (rows, cols), row stride ld (to_bf16).
struct Bf16Copy {
  ScratchBuffer<__nv_bfloat16> buf;
  int ld;
  Bf16Copy(const OpContext& ctx, const float* src, int rows, int cols)
      : buf(*ctx.alloc, size_t(rows) * bf16_ld(cols)), ld(bf16_ld(cols)) {
    to_bf16(ctx, buf.get(), src, rows, cols);
  }
  const __nv_bfloat16* get() const { return buf.get(); }
};

// out (N,OC) += bias (OC) broadcast over rows
__global__ void add_bias_kernel(float* out, const float* bias, size_t count, int OC) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % OC];
}

// The same with float4 columns (OC4 = OC/4): thread (x) owns 4 columns and keeps their bias in
// registers, blocks in y stride over rows; no per-element 64-bit modulo (the kernel above was
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
}  // namespace

void matmul_forward(const OpContext& ctx, float* out, const float* inp, const float* w, const float* bias, int N,
                    int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;
  if (IC > 0 && bias &&
      gemm_lt(ctx, LtGemm{false, true, N, OC, IC, inp, IC, w, IC, CUDA_R_32F, 0.0f, out, OC, ctx.gemm_compute,
                          CUBLASLT_EPILOGUE_BIAS, const_cast<float*>(bias)})) {
    return;  // out (N,OC) = inp w^T + bias in one cuBLASLt call (bias in the GEMM's epilogue)
  }
  if (IC == 0) {  // empty sum; do not rely on cuBLAS's handling of k == 0
    XT_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(N) * OC * sizeof(float), ctx.stream));
  } else {
    // out (N,OC) = inp (N,IC) w^T; bf16: FAST_16BF through ctx.gemm_compute (see the file comment)
    gemm(ctx, false, true, N, OC, IC, 1.0f, inp, IC, 0, w, IC, 0, 0.0f, out, OC, 0);
  }
  if (bias && OC % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0) {
    const int OC4 = OC / 4;
    const dim3 grid((OC4 + kThreads - 1) / kThreads, N < kBiasRowBlocks ? N : kBiasRowBlocks);
    add_bias4_kernel<<<grid, kThreads, 0, ctx.stream>>>(reinterpret_cast<float4*>(out),
                                                        reinterpret_cast<const float4*>(bias), N, OC4);
    XT_CUDA_LAUNCH_CHECK();
  } else if (bias) {
    const size_t count = size_t(N) * OC;
    add_bias_kernel<<<blocks_for(count, kThreads), kThreads, 0, ctx.stream>>>(out, bias, count, OC);
    XT_CUDA_LAUNCH_CHECK();
  }
}

void matmul_backward(const OpContext& ctx, float* dinp, float* dw, float* dbias, const float* dout,
                     const float* inp, const float* w, int N, int IC, int OC) {
  XT_CHECK(N >= 0 && IC >= 0 && OC >= 0, "bad matmul shape N=" << N << " IC=" << IC << " OC=" << OC);
  if (N == 0 || OC == 0) return;  // every gradient term is an empty sum
  if (IC > 0 && ctx.bf16) {
    Bf16Copy dout16(ctx, dout, N, OC), w16(ctx, w, OC, IC), in16(ctx, inp, N, IC);
    gemm_bf16(ctx, false, false, N, IC, OC, 1.0f, dout16.get(), dout16.ld, w16.get(), w16.ld, 1.0f, dinp, IC);
    // dw (OC,IC) += dout^T inp; with a bias, dbias' sum over dout's rows comes from the same GEMM's
    // epilogue (BGRADB, over the bf16 dout as PyTorch's autocast does) into scratch, then is added.
    ScratchBuffer<float> db(*ctx.alloc, dbias ? size_t(OC) : 0);
    if (dbias && gemm_lt(ctx, LtGemm{true, false, OC, IC, N, dout16.get(), dout16.ld, in16.get(), in16.ld, CUDA_R_16BF,
                                     1.0f, dw, IC, CUBLAS_COMPUTE_32F, CUBLASLT_EPILOGUE_BGRADB, db.get()})) {
      add_inplace(ctx, dbias, db.get(), size_t(OC));
      return;
    }
    gemm_bf16(ctx, true, false, OC, IC, N, 1.0f, dout16.get(), dout16.ld, in16.get(), in16.ld, 1.0f, dw, IC);
  } else if (IC > 0) {
    gemm(ctx, false, false, N, IC, OC, 1.0f, dout, OC, 0, w, IC, 0, 1.0f, dinp, IC, 0);  // dinp (N,IC) += dout w
    gemm(ctx, true, false, OC, IC, N, 1.0f, dout, OC, 0, inp, IC, 0, 1.0f, dw, IC, 0);   // dw (OC,IC) += dout^T inp
  }
  if (dbias) column_sum_accumulate(ctx, dbias, dout, N, OC);  // fp32: double partial sums (kFp32Rel)
}

}  // namespace xtrain::cuda
