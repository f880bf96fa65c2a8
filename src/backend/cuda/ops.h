// Host launchers of the CUDA ops, one .cu file each. Contracts (shapes, formulas, += for backward)
// are those of src/backend/backend.h; every launcher enqueues work on ctx.stream and checks the
// launch. Scratch memory comes from ctx.alloc (stream-ordered reuse, see allocator.h).
// Activation arguments (`void*`) point to float with --dtype fp32 and to __nv_bfloat16 with bf16
// (OpContext::bf16); kernels are templates on that type, instantiated through with_act.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <xtrain/backend/backend.h>
#include "backend/cuda/allocator.h"
#include "backend/cuda/chunk_table.h"
#include "backend/cuda/gemv.h"

namespace xtrain::cuda {

class CudnnAttention;

// WeightMirror: the bf16 copy `bf16` of the fp32 buffer [src, src + count) that CudaBackend::prepare_weights
// made (element i of the copy is to_bf16's rounding of src[i]); count 0 when no copy is valid. Invariant:
// the backend drops it (count 0) before anything it runs writes into the range or frees the buffer, so a
// copy in OpContext::weights always holds the current weights (backend.h, prepare_weights).
struct WeightMirror {
  const float* src = nullptr;
  const __nv_bfloat16* bf16 = nullptr;
  size_t count = 0;
  // find: the copy of [p, p + n), or null unless that range lies inside the mirrored one.
  const __nv_bfloat16* find(const float* p, size_t n) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), s = reinterpret_cast<uintptr_t>(src);
    if (count == 0 || a < s || (a - s) % sizeof(float) != 0) return nullptr;
    const size_t off = (a - s) / sizeof(float);
    return off < count && n <= count - off ? bf16 + off : nullptr;
  }
  // overlaps: whether the bytes [p, p + bytes) touch the mirrored range.
  bool overlaps(const void* p, size_t bytes) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), s = reinterpret_cast<uintptr_t>(src);
    return count > 0 && bytes > 0 && a < s + count * sizeof(float) && s < a + bytes;
  }
};

// Fp8Weight: the FP8 copies of one fp32 weight matrix w (rows, cols), a matmul's (OC, IC), that the matmuls of
// --fp8 multiply (matmul.cu): E4M3 values with one scale for the whole tensor, tensor-wise current scaling as in
// torchao's float8 training (the recipe torchtitan uses): scale = 448 / amax(w), 448 the largest finite E4M3
// value (OCP 8-bit floating point specification), values saturated there. Both layouts the FP8 GEMMs of Hopper
// take (both operands contiguous along the reduction, LtGemm): w8 (rows, cols) for the forward, w8t (cols, rows)
// for dinp. amax and inv (= 1 / scale, the factor cuBLASLt multiplies the product back by) are one device fp32
// each, 16-byte aligned. Written by fp8_prepare_weights (fp8.cu) from the current weights.
struct Fp8Weight {
  const float* w = nullptr;
  int rows = 0, cols = 0;
  __nv_fp8_e4m3* w8 = nullptr;
  __nv_fp8_e4m3* w8t = nullptr;
  float* amax = nullptr;
  float* inv = nullptr;
};
// Fp8Weights: the matrices --fp8 selects (CudaBackend::set_fp8_weights). find: the entry of w with that shape,
// or null.
struct Fp8Weights {
  std::vector<Fp8Weight> list;
  const Fp8Weight* find(const float* w, int rows, int cols) const {
    for (const Fp8Weight& e : list)
      if (e.w == w && e.rows == rows && e.cols == cols) return &e;
    return nullptr;
  }
};

struct OpContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  CachingAllocator* alloc = nullptr;
  int* error_flag = nullptr;  // device int; kernels set it on bad input (checked at the next sync)
  // Math of gemm() (attention's products, the matmul forward): CUBLAS_COMPUTE_32F (plain fp32, --dtype fp32) or
  // CUBLAS_COMPUTE_32F_FAST_16BF (--dtype bf16: fp32 operands rounded to bf16 inside cuBLAS,
  // tensor-core products, fp32 accumulation and fp32 output; cuBLAS docs, cublasComputeType_t).
  cublasComputeType_t gemm_compute = CUBLAS_COMPUTE_32F;
  // --dtype bf16: activations and their gradients are stored in bf16 (every `void*` argument), the
  // matmuls multiply bf16 operands (weights through bf16 copies: `weights`, or to_bf16) with fp32 accumulation.
  bool bf16 = false;
  // Attention route (attention.cu), resolved from --attention (never automatic here): fused
  // FlashAttention-2 kernels (flash_attention.cu; bf16 tensor-core products when bf16), cuBLAS GEMMs
  // around a softmax kernel, or cuDNN's fused attention (cudnn_attention.h; bf16 only, through `cudnn`).
  Attention attention = Attention::gemm;
  CudnnAttention* cudnn = nullptr;  // the cuDNN handle and plan cache; set only on the cudnn route
  cublasLtHandle_t cublaslt = nullptr;  // fused-epilogue GEMMs (gemm_lt)
  void* workspace = nullptr;            // cuBLAS(Lt) workspace, shared: both run in order on `stream`
  size_t workspace_bytes = 0;
  // --dtype bf16: the bf16 copy of the parameters from the last prepare_weights; matmul.cu takes weights and
  // biases from it where they lie inside it (else a scratch copy per call). Empty with fp32.
  WeightMirror weights;
  // --fp8: the FP8 copies of the selected weights, set by the prepare_weights that made `weights` and dropped with
  // it (so they hold the current weights); null otherwise, and then those matmuls take the bf16 route.
  const Fp8Weights* fp8 = nullptr;
  // kSplitCounters counters of attention_decode's chunks (attention_decode.cu), zero between its launches:
  // the launch's last block of each row resets its counter, so a recorded graph needs no memset node.
  unsigned* split_counters = nullptr;
  // kArgmaxStateWords words of argmax_rows' decoding launches (argmax.cu): per row a counter of the slices done,
  // zero between launches (the row's last block resets it), and the slices' candidates.
  unsigned* argmax_state = nullptr;
};

// kSplitCounters: the counters OpContext::split_counters holds (one per query row and head group of an
// attention_decode launch; a larger call launches several times). kSplitCountersTag: their allocator tag.
constexpr int kSplitCounters = 1 << 14;
// kArgmaxSlices: the most blocks argmax_rows spreads a decoding row over (argmax.cu); kArgmaxStateWords: the
// words of OpContext::argmax_state, per row of a decoding launch (kGemvMaxRows, gemv.h) a counter and the
// slices' candidates (3 words each).
constexpr int kArgmaxSlices = 64;
constexpr int kArgmaxStateWords = kGemvMaxRows * (1 + 3 * kArgmaxSlices);
constexpr const char* kSplitCountersTag = "attention_decode split counters";

// with_act: calls f(T()) with T the activation storage type of ctx: __nv_bfloat16 when ctx.bf16, else
// float. Launchers use it as `with_act(ctx, [&](auto tag) { using T = decltype(tag); ... })`.
template <typename F>
void with_act(const OpContext& ctx, F&& f) {
  if (ctx.bf16) f(__nv_bfloat16());
  else f(float());
}

// Bad-input codes a kernel writes into OpContext::error_flag (first error wins).
enum DeviceError : int { kDeviceOk = 0, kBadTarget = 1, kBadToken = 2, kBadPosition = 3 };

void encoder_forward(const OpContext& ctx, void* out, const int32_t* tokens, const float* wte,
                     const float* wpe, int B, int T, int C, const int32_t* pos = nullptr);
void encoder_backward(const OpContext& ctx, float* dwte, float* dwpe, const void* dout,
                      const int32_t* tokens, int B, int T, int C);

void layernorm_forward(const OpContext& ctx, void* out, float* mean, float* rstd, const void* inp,
                       const float* w, const float* b, int N, int C);
// residual_layernorm_forward: res = a + b, then layernorm_forward(res) in one kernel, the same bits.
void residual_layernorm_forward(const OpContext& ctx, void* res, void* out, float* mean, float* rstd, const void* a,
                                const void* b, const float* w, const float* bias, int N, int C);
// accumulate_dw: dw, db += (Backend's Grad::accumulate) or = (Grad::assign); likewise rmsnorm's dw, the matmuls'
// dw and dbias.
void layernorm_backward(const OpContext& ctx, void* dinp, float* dw, float* db, const void* dout,
                        const void* inp, const float* w, const float* mean, const float* rstd, int N,
                        int C, bool accumulate_dw);

// The Llama family's ops (rmsnorm.cu, rotary.cu, swiglu.cu). residual_rmsnorm_forward: res = a + b, then
// rmsnorm_forward(res) in one kernel, the same bits. rotary_*: throw Error for an odd HS or HS > 512.
void rmsnorm_forward(const OpContext& ctx, void* out, float* rstd, const void* inp, const float* w, int N, int C,
                     float eps);
void residual_rmsnorm_forward(const OpContext& ctx, void* res, void* out, float* rstd, const void* a, const void* b,
                              const float* w, int N, int C, float eps);
void rmsnorm_backward(const OpContext& ctx, void* dinp, float* dw, const void* dout, const void* inp, const float* w,
                      const float* rstd, int N, int C, bool accumulate_dw);
void rotary_forward(const OpContext& ctx, void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS,
                    float theta);
void rotary_backward(const OpContext& ctx, void* dqkv, int B, int T, int NH, int KVH, int HS, float theta);
// RotaryRoute: the kernel rotary_forward/backward take (rotary.cu), the same bits either way: `rows`, a block per
// position (the angles' cos and sin once per position, the heads in 16-byte vectors), where HS/2 is a multiple of
// the 16-byte pack of the activation type and qkv is 16-byte aligned; `pairs`, a thread per channel pair, else.
enum class RotaryRoute { rows, pairs };
RotaryRoute rotary_route(const OpContext& ctx, const void* qkv, int HS);
void swiglu_forward(const OpContext& ctx, void* out, const void* inp, int N, int F);
void swiglu_backward(const OpContext& ctx, void* dinp, const void* dout, const void* inp, int N, int F);

// matmul_forward: the Backend op; N <= kGemvMaxRows takes gemv_forward (gemv.h), larger N cuBLAS(Lt) (matmul.cu).
// route: see MatmulRoute; the Backend always passes automatic.
void matmul_forward(const OpContext& ctx, void* out, const void* inp, const float* w,
                    const float* bias, int N, int IC, int OC, MatmulRoute route = MatmulRoute::automatic);
// accumulate: dinp += (Backend's Grad::accumulate) or dinp = (Grad::assign); likewise dqkv, GELU's dinp.
void matmul_backward(const OpContext& ctx, void* dinp, float* dw, float* dbias, const void* dout,
                     const void* inp, const float* w, int N, int IC, int OC, bool accumulate, bool accumulate_dw);

// matmul_gelu_forward / gelu_matmul_backward: the Backend ops of that name fused into cuBLASLt epilogues
// (bf16, IC and OC multiples of 8), and the forward for N <= kGemvMaxRows into gemv_forward (fp32 and bf16, any
// IC, OC). Return false, doing nothing, where they do not fuse: the caller then takes the Backend's default
// route (matmul and gelu ops).
bool matmul_gelu_forward(const OpContext& ctx, void* pre, void* out, const void* inp, const float* w,
                         const float* bias, int N, int IC, int OC, MatmulRoute route = MatmulRoute::automatic);
bool gelu_matmul_backward(const OpContext& ctx, void* dpre, float* dw, float* dbias, const void* dout,
                          const void* inp, const void* pre, const float* w, int N, int IC, int OC, bool accumulate_dw);

// gemv_forward (gemv.cu): the few-row product, any N (kGemvMaxRows is where matmul.cu uses it).
// inp (N,IC), w (OC,IC) with row stride ldw >= IC, both of the activation type (bf16: the weight's bf16 copy),
// bias (OC) fp32 or null -> out (N,OC) = inp w^T + bias, fp32 sums and bias, rounded once to the activation type.
// pre non-null (N,OC): the fc layer's GELU, pre = inp w^T + bias and out = gelu(that fp32 value) (gelu.cuh).
// Each weight element is read once per launch (gemv.cu's row tile of rows); a row's bits do not depend on N or the other rows (for a given
// IC and whether IC, ldw are multiples of 16 bytes' elements with inp, w 16-byte aligned). Throws Error for a bad
// shape.
void gemv_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const void* w, int ldw,
                  const float* bias, int N, int IC, int OC);

// GemvFusion: what gemv_fused_forward does around the one-row product (the decoder's batch-1 step).
// norm_w set: inp is the raw (IC) row, normalized first as layernorm_forward (norm_b set) or rmsnorm_forward
// (norm_b null; its eps rms_eps) would normalize it: the same bits. residual set (N = 1, OC):
// out = residual + the product rounded to the activation type, rounded again as residual_forward rounds (the
// bits of matmul_forward then residual_forward); out may alias residual, not inp.
struct GemvFusion {
  const float* norm_w = nullptr;
  const float* norm_b = nullptr;
  float rms_eps = 0.0f;
  const void* residual = nullptr;
  // prefetch_weights: no kernel that may still run writes w, the bias or the norm's weights, so the launch may
  // read them before its wait (gemv.cu's programmatic dependent launch). A decoding step's kernels each let the
  // next start at their top (launch.cuh), so that is every kernel since the last plain launch or host
  // synchronization, not only the one just before; fused_row_forward sets it for weights that are not a per-call
  // scratch copy (the decoder's weights do not change during a step, which starts after copy_to_device's
  // synchronization).
  bool prefetch_weights = false;
};
// gemv_fused_forward: gemv_forward's N = 1 (pre: the fc layer's GELU, not with residual) with f's prologue and
// epilogue, one launch, each output's bits those of the unfused ops. Returns false, doing nothing, where it does
// not apply (IC or ldw not a multiple of 16 bytes' elements, a pointer not 16-byte aligned, a normalized row over
// 48 KB): the caller then runs the unfused ops. Throws Error for a bad shape.
bool gemv_fused_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const void* w, int ldw,
                        const float* bias, int IC, int OC, const GemvFusion& f);
// fused_row_forward (matmul.cu): gemv_fused_forward over the fp32 weight w (OC,IC) as matmul_forward reads it
// (bf16: its bf16 copy), for Backend::norm_matmul_forward and matmul_residual_forward; false where it does not fuse.
bool fused_row_forward(const OpContext& ctx, void* out, void* pre, const void* inp, const float* w, const float* bias,
                       int IC, int OC, const GemvFusion& f);

// attention_route: the route attention_forward/backward take for these sizes: ctx.attention where that
// route takes the shape (cudnn: cudnn_attention_supported; flash: flash_attention_supported), else flash
// where it can, else gemm. attention_scratch_count: the floats of `att` that route keeps.
Attention attention_route(const OpContext& ctx, int T, int HS);
size_t attention_scratch_count(const OpContext& ctx, int B, int T, int NH, int KVH, int HS);
void attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, int B, int T,
                       int NH, int KVH, int HS);
void attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                        const float* att, int B, int T, int NH, int KVH, int HS, bool accumulate);

// attention_decode: append to the KV cache and attend over it (attention_decode.cu, its split in
// attention_decode.h; Backend contract).
void attention_decode(const OpContext& ctx, void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn,
                      const int32_t* pos, int maxT, int NH, int KVH, int HS);

void gelu_forward(const OpContext& ctx, void* out, const void* inp, size_t count);
void gelu_backward(const OpContext& ctx, void* dinp, const void* inp, const void* dout,
                   size_t count, bool accumulate);

void residual_forward(const OpContext& ctx, void* out, const void* a, const void* b, size_t count);
void add_inplace(const OpContext& ctx, void* dst, const void* src, size_t count);

// dropout_apply: seq_keys (B) is host memory; copied to the device inside.
void dropout_apply(const OpContext& ctx, void* x, const uint64_t* seq_keys, int B, size_t per_seq,
                   float p);

void cross_entropy_forward_backward(const OpContext& ctx, float* losses, void* dlogits,
                                    const void* logits, const int32_t* targets, float dloss, int N,
                                    int V, int Vp);

// argmax_rows: greedy next tokens, one block per row, or a decoding row over up to kArgmaxSlices blocks (argmax.cu;
// Backend contract).
void argmax_rows(const OpContext& ctx, int32_t* out, const void* logits, int rows, int V, int ld,
                 int32_t* tokens = nullptr);

// sum / sum_squares: double accumulation in a fixed order (deterministic); synchronizes the stream.
// device_error (optional): receives the device error flag (ctx.error_flag, DeviceError codes) read by the
// same copy as the result, so a caller checking for bad input needs no second round trip.
double sum(const OpContext& ctx, const float* x, size_t count, bool squares, int* device_error = nullptr);

// Muon's ops (Backend::muon_momentum, newton_schulz, muon_apply): muon_momentum.cu, newton_schulz.cu (bf16
// tensor-core GEMMs batched over the matrices, scratch from ctx.alloc), muon_apply.cu; MuonTable and AdamWTable
// (the optimizers' chunk tables): chunk_table.h.
// muon_momentum, muon_apply: the Backend ops over every span in one launch (a block per chunk of `table`).
void muon_momentum(const OpContext& ctx, MuonTable& table, float* buf, float* out, const float* grad,
                   const std::vector<MuonSpan>& spans, float momentum, bool nesterov, float grad_scale);
void newton_schulz(const OpContext& ctx, float* x, int batch, int rows, int cols, int steps, float eps);
void muon_apply(const OpContext& ctx, MuonTable& table, float* param, const float* update,
                const std::vector<MuonSpan>& spans, float decay, float lr);

// adamw_update: the Backend op over every span in one launch (a block per chunk of `table`).
void adamw_update(const OpContext& ctx, AdamWTable& table, float* param, const float* grad, float* m, float* v,
                  const std::vector<ParamSpan>& spans, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int t);

// gemm: ROW-MAJOR C = alpha op(A) op(B) + beta C for `batch` matrices at fixed element strides
// sA, sB, sC. op(A) (M,K), op(B) (K,N), C (M,N); lda/ldb/ldc are row strides (elements) of the
// matrices as stored (A stored (M,K) or, when ta, (K,M)). fp32 storage, math ctx.gemm_compute.
void gemm(const OpContext& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
          long long sA, const float* B, int ldb, long long sB, float beta, float* C, int ldc, long long sC,
          int batch = 1);

// gemm_bf16: as gemm, with A and B in bf16 (tensor cores, CUBLAS_COMPUTE_32F accumulation); C of type
// c_type (CUDA_R_32F or CUDA_R_16BF: then beta C is read and the result written back in bf16).
void gemm_bf16(const OpContext& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const __nv_bfloat16* A,
               int lda, const __nv_bfloat16* B, int ldb, float beta, void* C, cudaDataType_t c_type, int ldc);

// LtGemm / gemm_lt: ROW-MAJOR C (M,N) = op(A) op(B) + beta C through cuBLASLt with a fused epilogue
// (gemm_lt.cpp), same operand convention as gemm. Operands of type ab_type (CUDA_R_32F, CUDA_R_16BF or FP8),
// C of type c_type (fp32, or bf16 for bf16 activations), math `compute`; the bias vector of C's type. epilogue CUBLASLT_EPILOGUE_BIAS: C += bias (N) broadcast over rows (before
// beta C is added; use beta 0). CUBLASLT_EPILOGUE_GELU_AUX_BIAS (GELU_AUX without a bias):
// aux (M,N) (row stride ldc, C's type) = the sum with bias, then C = gelu(aux) (GELU's tanh approximation,
// computed from the fp32 sum); CUBLASLT_EPILOGUE_DGELU: C = gelu'(aux) * op(A) op(B), aux read (beta 0).
// Returns false, doing nothing, when cuBLASLt offers no algorithm for the case; throws Error on any other
// cuBLASLt failure.
struct LtGemm {
  bool ta, tb;
  int M, N, K;
  const void* A;
  int lda;
  const void* B;
  int ldb;
  cudaDataType_t ab_type;
  float beta;
  void* C;
  int ldc;
  cublasComputeType_t compute;
  cublasLtEpilogue_t epilogue;
  void* bias;  // BIAS, GELU_AUX_BIAS: of c_type (fp32, or bf16 for a bf16 C)
  cudaDataType_t c_type = CUDA_R_32F;
  void* aux = nullptr;  // GELU_AUX(_BIAS): written; DGELU: read. (M,N) of c_type, row stride ldc
  // FP8 operands (ab_type CUDA_R_8F_E4M3: --fp8 in matmul.cu, bench/gemm_fp8.cu): one fp32 in device memory
  // each, the factor that turns A's and B's stored values back into theirs (cuBLASLt's A_SCALE_POINTER and
  // B_SCALE_POINTER). cuBLASLt takes FP8 only with ta false and tb true (both operands K-contiguous) on Hopper.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  // FP8: A's type where it is not ab_type (an E5M2 gradient times E4M3 weights or activations; cuBLASLt takes
  // E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3), and CUBLASLT_MATMUL_DESC_FAST_ACCUM (accumulation in the tensor
  // cores' own precision, no periodic promotion to fp32; torchao uses it for the forward only).
  std::optional<cudaDataType_t> a_type = std::nullopt;
  bool fast_accum = false;
};
bool gemm_lt(const OpContext& ctx, const LtGemm& g);
// gemm_lt_enabled: false where XTRAIN_CUDA_LT=off turns cuBLASLt's route off (gemm_lt then returns false at once).
bool gemm_lt_enabled();

// warm_gemm_heuristics: one cuBLASLt heuristic query on a handle of its own on `device`, for a thread beside the
// start-up. A process's first query loads cuBLASLt's heuristics (about 0.1 s on an H100, also for the cuBLAS
// calls, which choose through them), which its first GEMM would otherwise wait for. Returns the milliseconds it
// took, or -1 where a CUDA or cuBLASLt call failed (nothing else changes: a hint). Never throws.
double warm_gemm_heuristics(int device) noexcept;

// bf16_ld: the row stride of a bf16 copy of a matrix with `cols` columns: rounded up to 8 elements,
// so every row starts 16-byte aligned (cuBLAS's tensor-core kernels want aligned rows; V = 50257).
inline int bf16_ld(int cols) { return (cols + 7) / 8 * 8; }
// to_bf16: dst (rows, bf16_ld(cols)) = src (rows, cols) rounded to nearest even; padding unwritten.
void to_bf16(const OpContext& ctx, __nv_bfloat16* dst, const float* src, int rows, int cols);
// to_bf16_flat: dst (count) = src (count) rounded as to_bf16, in one launch (prepare_weights' copy).
void to_bf16_flat(const OpContext& ctx, __nv_bfloat16* dst, const float* src, size_t count);

// column_sum_accumulate: dst (C) += sum over rows of src (N,C) (= when accumulate is false: dst not read; N == 0
// then writes zeros), in a fixed order (deterministic).
void column_sum_accumulate(const OpContext& ctx, float* dst, const float* src, int N, int C, bool accumulate);
void column_sum_accumulate(const OpContext& ctx, float* dst, const __nv_bfloat16* src, int N, int C, bool accumulate);

// Conversions between bf16 activations and fp32 scratch (count elements, contiguous; convert.cu).
// to_f32: dst = src. from_f32: dst = src rounded to nearest even, or dst += src when accumulate.
void to_f32(const OpContext& ctx, float* dst, const __nv_bfloat16* src, size_t count);
void from_f32(const OpContext& ctx, __nv_bfloat16* dst, const float* src, size_t count, bool accumulate);

// FP8 casts (fp8.cu) for the matmuls of --fp8, tensor-wise current scaling (Fp8Weight): amax over the whole
// tensor, then every value times scale = fmax / amax (1 for an all-zero tensor) rounded to nearest and saturated
// to +-fmax, fmax the format's largest finite value (E4M3 448, E5M2 57344). The last dimension of every matrix
// is a multiple of 16 and every pointer 16-byte aligned, as cuBLASLt's FP8 GEMMs require anyway.
// fp8_prepare_weights: each entry's w8, w8t, amax and inv from its fp32 weights (two kernels a matrix).
void fp8_prepare_weights(const OpContext& ctx, const Fp8Weights& weights);
// fp8_cast: x (rows, cols) bf16 -> y (rows, cols) and/or yt (cols, rows), either may be null, of format
// `format` (CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2); amax and inv (= 1 / scale): one device float each, inv 16-byte
// aligned (cuBLASLt reads it as a scale pointer).
void fp8_cast(const OpContext& ctx, const __nv_bfloat16* x, int rows, int cols, cudaDataType_t format, void* y,
              void* yt, float* amax, float* inv);

}  // namespace xtrain::cuda
