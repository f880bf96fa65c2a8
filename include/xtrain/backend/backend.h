// Backend: the small compute interface the model and the training step are written against
// (ggml-backend style). The CPU backend (src/backend/cpu/) is a full backend and the test oracle for every
// other backend. Exactly one file, src/backend/registry.cpp, knows which backends were compiled in.
//
// Conventions for every op: raw pointers into the backend's memory plus explicit sizes; row-major;
// shape letters B batch, T sequence, C channels, V vocab, NH query heads, KVH key/value heads,
// HS head size, N = B*T rows, IC/OC matmul in/out features. `count` is elements, `bytes` is bytes.
// Backward ops ACCUMULATE (+=) into every gradient they produce by default, so parameter gradients sum
// over micro-steps and residual branches add up. Three ops also take `Grad::assign` for their activation
// gradient (matmul's dinp, attention's dqkv, GELU's dinp), and the ops that write weight gradients
// (matmul's dw and dbias, the fused GELU matmul's, the norms' dw and db) take it for those: the first op
// to write such a buffer then overwrites it, so the caller need not zero it first (the model does this
// for activation gradients in every backward, and for the weight gradients in the first micro-step's
// backward, GPT::backward(Grad::assign): a memset of the buffer and the read of it by the op are saved).
// The embeddings' scatter-add (encoder_backward) touches only the rows a batch uses, so it always
// accumulates.
//
// Storage types. Parameters, parameter gradients, optimizer state, layernorm statistics, the
// attention scratch `att` and per-row losses are always fp32 (`float*`). ACTIVATIONS and their
// gradients (every `void*` argument below) are stored in the backend's activation type:
// activation_bytes() == 4 for fp32 (the CPU backend, CUDA --dtype fp32), 2 for bf16 (CUDA --dtype
// bf16: bf16 storage, fp32 arithmetic inside every op; docs/cuda.md, "Precision"). Buffers for them
// are count * activation_bytes() bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <xtrain/core/clock.h>
#include <xtrain/core/error.h>

namespace xtrain {

// Grad: how a backward op stores a gradient (of an activation or of a weight): add to the buffer, or
// overwrite it (an assigned gradient never reads the buffer: whatever it held, NaN included, is gone).
enum class Grad { accumulate, assign };

// Device and DType: --device and --dtype, parsed once (options.cpp) into these. automatic: decided
// by make_backend (cuda when compiled in and a GPU is visible; bf16 on cuda, fp32 on cpu).
enum class Device { automatic, cpu, cuda };
enum class DType { automatic, fp32, bf16 };
// Attention: --attention, the CUDA backend's attention route (docs/cuda.md, "Attention"): FlashAttention-2
// kernels, cuBLAS GEMMs around a softmax kernel, or cuDNN's fused attention (bf16 only). automatic: flash
// with bf16, gemm with fp32. The CPU backend has one route (the oracle) and takes automatic only.
enum class Attention { automatic, flash, gemm, cudnn };
// WeightCopy: --weight-copy, where the CUDA backend's bf16 matmuls get bf16 copies of the fp32 weights
// (docs/cuda.md, "Matmuls"). persistent: one copy of every weight, rounded once per forward by
// prepare_weights and kept (2 bytes per parameter); per_use: each matmul rounds its weight into a scratch
// copy (no lasting memory; every weight rounded once more per step). The products are the same bits.
// Only bf16 keeps a copy: make_backend refuses per_use with fp32 and on the CPU backend.
enum class WeightCopy { persistent, per_use };

// parse_device / parse_dtype / parse_attention / parse_weight_copy: "auto" | "cpu" | "cuda", "auto" | "fp32" |
// "bf16", "auto" | "flash" | "gemm" | "cudnn", "persistent" | "per-use"; throw UsageError naming the option
// and the value otherwise.
// to_string gives the same words back.
Device parse_device(const std::string& s);
DType parse_dtype(const std::string& s);
Attention parse_attention(const std::string& s);
WeightCopy parse_weight_copy(const std::string& s);
const char* to_string(Device d);
const char* to_string(DType t);
const char* to_string(Attention a);
const char* to_string(WeightCopy w);

// GpuId: a GPU as the CUDA runtime describes it (cudaDeviceProp): what the MFU peak table (mfu.h)
// is keyed by.
struct GpuId {
  std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H200", "NVIDIA H100 80GB HBM3"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;  // cudaDeviceProp::multiProcessorCount (a MIG slice has fewer: no match)
};

// ParamSpan: one tensor of a flat parameter buffer as the optimizer sees it: elements
// [offset, offset + count) of the buffer, with AdamW's weight decay on or off.
struct ParamSpan {
  size_t offset = 0, count = 0;
  bool decay = false;
};
// check_adamw_args: throws Error unless the step t >= 1 and the spans are in increasing order, do not
// overlap and do not wrap around the address range (so one
// launch over all of them updates each element once, as one call per span would).
void check_adamw_args(const std::vector<ParamSpan>& spans, int t);
// MuonSpan: one Muon matrix in the buffers of Backend::muon_momentum and muon_apply: count elements at
// param_at of the parameter and gradient buffers, at state_at of the momentum buffer and at update_at of
// the update buffer; lr_ratio: muon_apply's learning rate for it is float(double(lr) * lr_ratio) (the
// shape's adjustment, muon_adjusted_lr).
struct MuonSpan {
  size_t param_at = 0, state_at = 0, update_at = 0, count = 0;
  double lr_ratio = 1.0;
};
// check_muon_spans: throws Error unless the spans' ranges are disjoint in each of the three layouts (so one
// launch over all of them equals one call per span) and none wraps around the address range.
void check_muon_spans(const std::vector<MuonSpan>& spans);
// check_newton_schulz_args: throws Error unless batch >= 0, rows >= 1, cols >= 1 and steps >= 0
// (Backend::newton_schulz).
void check_newton_schulz_args(int batch, int rows, int cols, int steps);
// check_argmax_rows_args: throws Error unless rows >= 0, V >= 1 and ld >= V (Backend::argmax_rows).
void check_argmax_rows_args(int rows, int V, int ld);

// StepGraph: device work recorded once and launched again as a whole (a CUDA graph, from
// Backend::capture_graph). launch() queues the recorded work on the backend's stream, with the buffer
// addresses and kernel arguments of the capture: the same ops on whatever those buffers hold now.
// MemoryCategory, MemoryEntry, BackendMemory: the accounting of a backend's memory by what holds it
// (--memory-report; the table is assembled in src/train/memory_report.h from the model's parameter and
// activation tables, the optimizer and Backend::memory_accounting).
enum class MemoryCategory { parameters, gradients, optimizer, activations, workspace, other, count };
const char* to_string(MemoryCategory c);  // "parameters", "gradients", ...
// MemoryEntry: one named buffer or group of buffers. bytes: what it holds (a buffer from Backend::alloc:
// the bytes requested, its block's rounding is counted apart; a backend's own block: the block's size).
// blocks: the starts of the Backend::alloc blocks it lies in (none for a backend's own memory).
struct MemoryEntry {
  std::string name;
  size_t bytes = 0;
  std::string dtype;  // "fp32", "bf16", "int32", "bytes"
  std::string why;
  MemoryCategory category = MemoryCategory::other;
  std::vector<const void*> blocks;
};
// BackendMemory: what the backend's allocator holds. own: the backend's own blocks by purpose (CUDA: the
// cuBLAS workspace, the bf16 weight copy, the AdamW chunk table, a recorded graph's scratch, the cache of
// freed blocks by the op that last used them); caller_bytes: the blocks handed out by alloc() and not
// freed (the block sizes); held_bytes = caller_bytes + the sum of own; peak_bytes: the most held at once
// (Backend::peak_memory_bytes where tracked); outside_bytes: device memory in use that the allocator
// does not hold (CUDA: cudaMemGetInfo's used bytes minus held_bytes: the CUDA context, cuBLAS, cuDNN and
// NCCL internals, other processes on the GPU; 0 on the CPU). All bytes.
struct BackendMemory {
  std::vector<MemoryEntry> own;
  size_t caller_bytes = 0, held_bytes = 0, peak_bytes = 0, outside_bytes = 0;
};

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void launch() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device kind() const = 0;              // Device::cpu or Device::cuda, never automatic
  std::string name() const { return to_string(kind()); }  // "cpu", "cuda"
  virtual std::string device_name() const = 0;  // e.g. "cpu (OpenBLAS)", "NVIDIA H200 (0000:1b:00.0)"
  virtual DType dtype() const { return DType::fp32; }  // training precision: fp32 or bf16
  // activation_bytes: bytes per element of activation storage (the `void*` op arguments): 4 for
  // fp32, 2 for bf16.
  size_t activation_bytes() const { return dtype() == DType::bf16 ? 2 : 4; }

  // ---- memory (backend address space) ----
  virtual void* alloc(size_t bytes) = 0;                         // throws Error when out of memory
  virtual void free(void* ptr) noexcept = 0;                     // ptr may be null
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  virtual void synchronize() = 0;  // all queued work finished (no-op on CPU)
  // peak_memory_bytes: the most device memory this backend has held at once (bytes; for CUDA the
  // caching allocator's peak reservation, without the CUDA context and library internals).
  // 0 = not tracked (CPU).
  virtual size_t peak_memory_bytes() const { return 0; }
  // memory_in_use_bytes: device memory handed out by the backend's allocator now (bytes; CUDA: blocks
  // in use, without the allocator's cache). 0 = not tracked (CPU).
  virtual size_t memory_in_use_bytes() const { return 0; }
  // memory_accounting: what the allocator holds now, by purpose (see BackendMemory).
  virtual BackendMemory memory_accounting() const = 0;
  // allocation_bytes: the bytes held for the block `ptr` returned by alloc() (the request rounded up as the
  // allocator rounds it); 0 for a null or unknown pointer.
  virtual size_t allocation_bytes(const void* ptr) const = 0;
  // gpu_id: the GPU this backend runs on; nullopt on the CPU.
  virtual std::optional<GpuId> gpu_id() const { return std::nullopt; }
  // make_timeline_clock: marks on the stream the ops run on (--timeline, core/clock.h); the host clock
  // where ops run when called.
  virtual std::unique_ptr<TimelineClock> make_timeline_clock() { return std::make_unique<HostClock>(); }
  // available_memory_bytes: bytes this backend could still allocate, for the up-front memory check
  // (estimate_train_bytes, model.h): the CPU backend reads the host's MemAvailable (/proc/meminfo;
  // shared by every rank on the host), CUDA asks cudaMemGetInfo for the device's free memory.
  // 0 = unknown (no check).
  virtual size_t available_memory_bytes() const { return 0; }
  // setup_ms: the parts of this backend's set-up in the order they ran, with their wall time in milliseconds
  // (CUDA: the driver, the context, the stream, each library handle, the workspace and allocator), for
  // xtrain_generate --timing; empty where the set-up has no parts worth telling (CPU).
  virtual std::vector<std::pair<std::string, double>> setup_ms() const { return {}; }

  // ---- the weights' copy for the GEMMs ----
  // prepare_weights: called with the whole flat parameter buffer, params (count floats), at the start of
  // every GPT::forward, and by a Decoder when made (its cache assumes fixed weights between
  // resets) and when weights_generation() says its copy is gone. A backend whose GEMMs take another type than fp32 (CUDA
  // --dtype bf16) rounds the buffer here, in one pass, into a persistent copy of that type, and its matmul
  // ops read the copy of every weight and bias lying in [params, params + count) instead of converting it
  // per call (the same rounding: the same bits). The copy is valid until the next prepare_weights, or
  // until this backend writes into the range (copy_to_device, zero, adamw_update) or frees the buffer
  // holding it, which drop it: ops then convert per call again. A write the backend does not see (another
  // library's kernel into params) must be followed by prepare_weights before the next matmul. No-op where
  // the GEMMs take fp32 (the CPU backend, CUDA --dtype fp32).
  virtual void prepare_weights(const float* params, size_t count) {
    (void)params;
    (void)count;
  }
  // weights_generation: changes whenever the copy prepare_weights keeps is dropped (a write into its
  // source, its source freed), moved, or made from another buffer; not when prepare_weights refreshes a
  // valid copy of the same buffer in place. Constant where there is no copy (0). A user that prepared
  // weights and holds on to them (a Decoder, whose recorded graph reads the copy's address) compares it
  // with the value it saw after its own prepare_weights: different means the copy no longer holds its
  // weights (e.g. another model's forward or decoder on this backend), and it must prepare them again.
  // A recorded graph that contains a prepare_weights (the training step's, train/graph_step.cpp) rewrites the copy
  // when launched without moving this number: do not launch one while a Decoder of another model on the
  // same backend is in use (nothing in xtrain does).
  virtual uint64_t weights_generation() const { return 0; }
  // capture_graph: runs `work` with the backend recording its device work instead of running it, and
  // returns the recording (nullptr where the backend has none: the CPU). `work` must only queue device
  // ops: no copy to or from the host and nothing that waits for the device (those throw Error while
  // recording); the host-side effects of `work` happen once, now. Scratch memory taken and returned
  // during the recording stays reserved for the graph until it is destroyed (it must go before the
  // backend). Throws Error, leaving the backend as before, when recording fails.
  virtual std::unique_ptr<StepGraph> capture_graph(const std::function<void()>& work) {
    (void)work;
    return nullptr;
  }
  // weight_copy_bytes: bytes per parameter of the copy prepare_weights keeps (CUDA bf16: 2; 0: none),
  // counted by the memory estimate (estimate_train_memory, model.h).
  virtual size_t weight_copy_bytes() const { return 0; }
  // set_fp8_weights (--fp8): the weight matrices whose matmuls run in FP8 from now on, each w (rows = OC,
  // cols = IC) inside the buffer prepare_weights is given; an empty list turns FP8 off. A backend that keeps
  // FP8 copies (CUDA bf16 with --weight-copy persistent, compute capability 8.9 or newer) makes them in each
  // prepare_weights, beside the bf16 copy (2 bytes per selected parameter: both layouts), and its matmuls
  // with one of these weights and N multiple of 16 multiply in FP8 (src/backend/cuda/matmul.cu); every other
  // product is unchanged. A matrix whose rows or cols are not multiples of 16, or that does not start 16-byte
  // aligned, is not taken (its products stay bf16). Returns the number of matrices taken. Throws UsageError,
  // keeping the previous list, where FP8 is not available (fp8_unavailable; this base: the CPU backend). Freeing
  // the buffer that holds a selected weight empties the list; a prepare_weights of a buffer that does not hold
  // them all makes no FP8 copies (those matmuls take bf16 until a prepare_weights of their buffer). Call it before
  // recording a graph of steps that use it: a new list moves the copies (weights_generation changes).
  struct WeightMatrix {
    const float* w = nullptr;
    int rows = 0, cols = 0;
  };
  // fp8_takes: whether a (rows, cols) fp32 matrix at `address` is one set_fp8_weights takes: dimensions multiples
  // of 16 (cuBLASLt's FP8 layouts), a start 16-byte aligned (the weight casts' 16-byte loads). GPT's memory
  // estimate applies it with the offset in the parameter buffer, whose start is 256-byte aligned.
  static constexpr bool fp8_takes(int rows, int cols, uintptr_t address) {
    return rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0 && address % 16 == 0;
  }
  virtual size_t set_fp8_weights(const std::vector<WeightMatrix>& weights) {
    if (!weights.empty()) throw UsageError(fp8_unavailable());
    return 0;
  }
  // fp8_unavailable: why set_fp8_weights would refuse any weight here (one line naming --fp8 and the cause), or
  // empty where FP8 products are available.
  virtual std::string fp8_unavailable() const {
    return "--fp8 needs the CUDA backend with --dtype bf16 (the " + name() + " backend multiplies in " +
           std::string(to_string(dtype())) + " only)";
  }
  // fp8_copy_bytes: device bytes of the FP8 copies set_fp8_weights' list keeps (0 without one).
  virtual size_t fp8_copy_bytes() const { return 0; }

  // ---- ops ----
  // encoder_forward: tokens (B,T) int32, wte (V,C), wpe (maxT,C) -> out (B,T,C) = wte[tok] + wpe[p + t];
  // wpe null: no learned positions (the Llama family), out = wte[tok]. p: the int32 at pos in backend memory,
  // read when the op runs (as attention_decode, so that one recorded decoding step serves every position), 0
  // where pos is null; p + T must not exceed wpe's rows. Throws Error for a negative token id (CPU at once,
  // CUDA at the next copy to the host).
  virtual void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe,
                               int B, int T, int C, const int32_t* pos = nullptr) = 0;
  // encoder_backward: dout (B,T,C) -> dwte (V,C) +=, dwpe (maxT,C) += (dwpe null: no learned positions)
  virtual void encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                                int B, int T, int C) = 0;

  // layernorm_forward: inp (N,C), w,b (C) -> out (N,C), mean,rstd (N); eps 1e-5 (Ba et al. 2016;
  // GPT-2 / PyTorch default).
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const float* w, const float* b, int N, int C) = 0;
  // layernorm_backward: dout (N,C) -> dinp (N,C) +=, dw,db (C) += (= with dw_mode Grad::assign)
  virtual void layernorm_backward(void* dinp, float* dw, float* db, const void* dout,
                                  const void* inp, const float* w, const float* mean,
                                  const float* rstd, int N, int C, Grad dw_mode) = 0;
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) {
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, Grad::accumulate);
  }

  // matmul_forward: inp (N,IC), w (OC,IC), bias (OC) or null -> out (N,OC) = inp w^T + bias
  virtual void matmul_forward(void* out, const void* inp, const float* w, const float* bias, int N,
                              int IC, int OC) = 0;
  // matmul_backward: dout (N,OC) -> dinp (N,IC) += (= with dinp_mode Grad::assign), dw (OC,IC) +=,
  // dbias (OC) += (both = with dw_mode Grad::assign: the GEMM's beta 0; dbias may be null). An empty sum
  // assigned (N == 0 for dw, dbias; OC == 0 for dinp) writes zeros.
  virtual void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                               const float* w, int N, int IC, int OC, Grad dinp_mode, Grad dw_mode) = 0;
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const float* w,
                       int N, int IC, int OC, Grad dinp_mode) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_mode, Grad::accumulate);
  }
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const float* w,
                       int N, int IC, int OC) {
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, Grad::accumulate, Grad::accumulate);
  }

  // attention_forward: causal scaled-dot-product attention with grouped-query heads
  // (Ainslie et al. 2023): query head h reads key/value head h / (NH/KVH).
  // qkv (B,T,(NH+2*KVH)*HS) laid out [q heads | k heads | v heads] per position
  // -> out (B,T,NH*HS); att: attention_scratch_count(B,T,NH,KVH,HS) floats of scratch owned by the op
  // between forward and backward; the CPU backend stores softmax probabilities (B,NH,T,T) (rows t,
  // columns <= t; rest 0), other backends may store less (e.g. the log-sum-exp per row; CUDA:
  // docs/cuda.md, "Attention").
  virtual void attention_forward(void* out, float* att, const void* qkv, int B, int T, int NH,
                                 int KVH, int HS) = 0;
  // attention_scratch_count: floats of `att` that attention_forward needs for these sizes (elements,
  // not bytes). Default B*NH*T*T (the softmax probabilities); a backend that keeps less says so.
  virtual size_t attention_scratch_count(int B, int T, int NH, int KVH, int HS) const {
    (void)KVH, (void)HS;
    return static_cast<size_t>(B) * NH * T * T;
  }
  // attention_backward: dout (B,T,NH*HS) -> dqkv (B,T,(NH+2*KVH)*HS) += (= with Grad::assign).
  // qkv, out and att as attention_forward left them (out (B,T,NH*HS): its output, which the caller keeps
  // for the projection's backward anyway, so a backend needs no copy of it in att).
  virtual void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* att,
                                  int B, int T, int NH, int KVH, int HS, Grad dqkv_mode) = 0;
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* att, int B,
                          int T, int NH, int KVH, int HS) {
    attention_backward(dqkv, dout, qkv, out, att, B, T, NH, KVH, HS, Grad::accumulate);
  }

  // attention_decode: causal grouped-query attention for Tn new positions [pos, pos+Tn) of each sequence
  // against a key/value cache (inference: prefill is Tn = prompt length at pos 0, then Tn = 1 per token).
  // qkv (B,Tn,(NH+2*KVH)*HS) of the new positions, laid out as for attention_forward. First writes their
  // keys and values into kcache, vcache (B,maxT,KVH*HS) at rows [pos, pos+Tn); then out (B,Tn,NH*HS):
  // new position pos+i attends to cache rows [0, pos+i] with the attention_forward formula. Caches are
  // activations (activation_bytes() per element); rows past pos+Tn are neither read nor written.
  // `pos` is one int32 in backend memory, read when the op runs (not when it is queued), so that one
  // recorded decoding step (capture_graph) serves every position. Throws Error unless Tn >= 1 and
  // NH % KVH == 0; a position outside [0, maxT - Tn] writes nothing and is an Error: at once on the CPU,
  // at the next copy to the host on CUDA (the device error flag).
  virtual void attention_decode(void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn,
                                const int32_t* pos, int maxT, int NH, int KVH, int HS) = 0;

  // gelu_forward: tanh approximation (Hendrycks & Gimpel 2016, as in GPT-2). inp,out (count)
  virtual void gelu_forward(void* out, const void* inp, size_t count) = 0;
  // gelu_backward: dinp (count) += gelu'(inp) * dout (= with Grad::assign)
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t count, Grad dinp_mode) = 0;
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t count) {
    gelu_backward(dinp, inp, dout, count, Grad::accumulate);
  }

  // matmul_gelu_forward: the MLP's fc layer and its GELU as one op. inp (N,IC), w (OC,IC), bias (OC) or
  // null -> pre (N,OC) = inp w^T + bias (GELU's input, kept for the backward), out (N,OC) = gelu(pre).
  // Default (the CPU oracle): matmul_forward, then gelu_forward. A backend may fuse the two (CUDA bf16:
  // cuBLASLt's GELU_AUX_BIAS epilogue, which applies GELU to the fp32 accumulator before the bf16 rounding
  // of pre, so out need not equal gelu_forward(pre) bit for bit; a recompute of out calls this op again).
  virtual void matmul_gelu_forward(void* pre, void* out, const void* inp, const float* w, const float* bias, int N,
                                   int IC, int OC) {
    matmul_forward(pre, inp, w, bias, N, IC, OC);
    gelu_forward(out, pre, static_cast<size_t>(N) * OC);
  }
  // gelu_matmul_backward: the backward of out = matmul(gelu(pre)) through the matmul and the GELU.
  // dout (N,OC), inp = gelu(pre) (N,IC), pre (N,IC), w (OC,IC) -> dpre (N,IC) = gelu'(pre) * (dout w)
  // (assigned), dw (OC,IC) +=, dbias (OC) += (both = with dw_mode Grad::assign; dbias may be null). scratch
  // (N,IC) activations: the default route's dinp of the matmul (matmul_backward, then gelu_backward); a fusing
  // backend (CUDA bf16: cuBLASLt's DGELU epilogue on the dinp GEMM) leaves it untouched.
  virtual void gelu_matmul_backward(void* dpre, float* dw, float* dbias, const void* dout, const void* inp,
                                    const void* pre, const float* w, void* scratch, int N, int IC, int OC,
                                    Grad dw_mode) {
    matmul_backward(scratch, dw, dbias, dout, inp, w, N, IC, OC, Grad::assign, dw_mode);
    gelu_backward(dpre, pre, scratch, static_cast<size_t>(N) * IC, Grad::assign);
  }
  void gelu_matmul_backward(void* dpre, float* dw, float* dbias, const void* dout, const void* inp, const void* pre,
                            const float* w, void* scratch, int N, int IC, int OC) {
    gelu_matmul_backward(dpre, dw, dbias, dout, inp, pre, w, scratch, N, IC, OC, Grad::accumulate);
  }

  // residual_layernorm_forward: the residual add and the layernorm that reads its sum, as one op.
  // a, b (N,C) -> res (N,C) = a + b (residual_forward; res may alias a or b), then out (N,C), mean, rstd
  // (N) = layernorm_forward(res, w, bias). Default (the CPU oracle): the two ops. A fusing backend gives
  // the same bits (CUDA: one kernel that rounds the sum to the activation type before its statistics).
  virtual void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a,
                                          const void* b, const float* w, const float* bias, int N, int C) {
    residual_forward(res, a, b, static_cast<size_t>(N) * C);
    layernorm_forward(out, mean, rstd, res, w, bias, N, C);
  }
  // ---- the Llama family's ops: RMSNorm, rotary position embeddings, SwiGLU (CPU oracle: cpu/ops_llama.h) ----
  // rmsnorm_forward: inp (N,C), w (C) -> out (N,C) = x * rstd * w, rstd (N) fp32 = 1/sqrt(mean_c(x^2) + eps)
  // (Zhang & Sennrich 2019; transformers' LlamaRMSNorm: statistics in fp32, no mean subtracted, no bias).
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const float* w, int N, int C, float eps) = 0;
  // rmsnorm_backward: dout (N,C) -> dinp (N,C) +=, dw (C) += (= with dw_mode Grad::assign); with xhat = x rstd,
  // g = dout w: dinp = rstd (g - xhat mean_c(g xhat)), dw = sum_n dout xhat.
  virtual void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const float* w,
                                const float* rstd, int N, int C, Grad dw_mode) = 0;
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const float* w, const float* rstd,
                        int N, int C) {
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, Grad::accumulate);
  }
  // residual_rmsnorm_forward: res (N,C) = a + b (res may alias a or b), then out, rstd = rmsnorm_forward(res),
  // as residual_layernorm_forward. Default (the CPU oracle): the two ops; a fusing backend gives the same bits.
  virtual void residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b,
                                        const float* w, int N, int C, float eps) {
    residual_forward(res, a, b, static_cast<size_t>(N) * C);
    rmsnorm_forward(out, rstd, res, w, N, C, eps);
  }
  // ---- one-row fused ops: the decoder's batch-1 step (Decoder, inference.h; block_forward_row) ----
  // Each gives the bits of the ops it stands for, in one launch on a backend that fuses them. false (the
  // default: the CPU oracle; a fusing backend for a shape it does not fuse): nothing done, the caller runs those
  // ops. fuses_rows: whether the backend has them at all, so a caller keeps its usual op sequence otherwise.
  // Their weights w and bias must not be written by the op just before (CUDA may start reading them early).
  virtual bool fuses_rows() const { return false; }
  // norm_matmul_forward: inp (1,C) -> the norm of it, layernorm_forward(norm_w, norm_b) or, norm_b null,
  // rmsnorm_forward(norm_w, rms_eps), then matmul_forward into out (1,OC); pre non-null: matmul_gelu_forward
  // into pre and out (1,OC). The normalized row itself is not kept.
  virtual bool norm_matmul_forward(void* /*pre*/, void* /*out*/, const void* /*inp*/, const float* /*norm_w*/,
                                   const float* /*norm_b*/, float /*rms_eps*/, const float* /*w*/,
                                   const float* /*bias*/, int /*C*/, int /*OC*/) {
    return false;
  }
  // matmul_residual_forward: inp (1,IC) -> res (1,OC) = residual_forward(residual, matmul_forward(inp));
  // res may alias residual, not inp. The product itself is not kept.
  virtual bool matmul_residual_forward(void* /*res*/, const void* /*residual*/, const void* /*inp*/,
                                       const float* /*w*/, const float* /*bias*/, int /*IC*/, int /*OC*/) {
    return false;
  }
  // rotary_forward: rotary position embeddings on the q and k heads of qkv (B,T,(NH+2*KVH)*HS) in place (v
  // untouched), position of row t = pos + t with pos one int32 in backend memory read when the op runs (as
  // attention_decode; null = 0): each head's channel pairs (i, i + HS/2) rotated by a(p, i), backend/rotary.h
  // (transformers' rotate-half convention). Throws Error for an odd HS.
  virtual void rotary_forward(void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS, float theta) = 0;
  // rotary_backward: dqkv (B,T,(NH+2*KVH)*HS), the gradient at the rotated q and k, in place -> the gradient at
  // the unrotated ones (each pair rotated by -a(t, i), positions from 0: the training's); v's untouched.
  virtual void rotary_backward(void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) = 0;
  // swiglu_forward: inp (N,2F), rows [gate (F) | up (F)] (the fused gate and up projections) -> out (N,F) =
  // silu(gate) * up, silu(x) = x sigmoid(x) (Shazeer 2020; transformers' LlamaMLP).
  virtual void swiglu_forward(void* out, const void* inp, int N, int F) = 0;
  // swiglu_backward: dout (N,F), inp (N,2F) -> dinp (N,2F) = [dgate | dup] (assigned); s = sigmoid(gate):
  // dup = dout gate s, dgate = dout up s (1 + gate (1 - s)).
  virtual void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) = 0;

  // residual_forward: out = a + b (count)
  virtual void residual_forward(void* out, const void* a, const void* b, size_t count) = 0;
  // add_inplace: dst += src (count). Residual backward and gradient routing.
  virtual void add_inplace(void* dst, const void* src, size_t count) = 0;

  // dropout_apply: x (B, per_seq) *= keep / (1 - p), keep = uniform01(seq_keys[b], j) >= p.
  // The same call is the forward (on activations) and the backward (on their gradients): the mask
  // is recomputed from the keys, never stored. seq_keys (B) is HOST memory. p in [0, 1).
  virtual void dropout_apply(void* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) = 0;

  // cross_entropy_forward_backward: logits (N,Vp) rows of which the first V columns are the vocabulary
  // (Vp >= V: a padded row stride, GPTConfig::Vp()), targets (N) int32 -> losses (N) = -log
  // softmax(logits[:, :V])[target]; if dlogits is non-null, dlogits (N,Vp) = (softmax - onehot(target))
  // * dloss in the first V columns and 0 in the padded ones (dlogits may alias logits: fused loss +
  // gradient in one pass). Targets outside [0,V) are an error.
  virtual void cross_entropy_forward_backward(float* losses, void* dlogits, const void* logits,
                                              const int32_t* targets, float dloss, int N, int V, int Vp) = 0;

  // argmax_rows: greedy next tokens on the device. logits (rows, ld) activations, of which the first V
  // columns of a row are the vocabulary (ld >= V: a padded row stride, GPTConfig::Vp()) -> out (rows) int32
  // in backend memory: argmax_code (backend/greedy.h) of each row's [0, V): the lowest id among equal maxima,
  // or -1 - v when the row holds a non-finite logit, v the lowest id of one. Bad logits are reported in `out`,
  // not thrown, so the op can be recorded in a graph and the caller raises fail_non_finite_logit for the
  // rows it uses (the host sampler's message). Deterministic. tokens non-null: also (rows) int32 in backend
  // memory, each row's greedy id as a valid token id (out's id, or v where out is -1 - v), so that recorded
  // decoding steps can feed each step's tokens to the next (Decoder::append_greedy_steps). Throws Error for
  // what check_argmax_rows_args refuses.
  virtual void argmax_rows(int32_t* out, const void* logits, int rows, int V, int ld,
                           int32_t* tokens = nullptr) = 0;

  // sum / sum_squares over x (count), accumulated in double, returned on the host.
  virtual double sum(const float* x, size_t count) = 0;
  virtual double sum_squares(const float* x, size_t count) = 0;

  // adamw_update: AdamW (Loshchilov & Hutter 2019) with bias correction at step t (1-based) over the
  // tensors `spans` of the flat buffers param, grad, m, v (one layout), in one pass (CUDA: one launch):
  //   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //   param -= lr * ( (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd * param ),
  // wd = weight_decay on spans with `decay`, 0 on the others; elements outside every span are untouched.
  // grad_scale carries gradient clipping. Each element's result is that of a call with its span alone.
  // Throws Error for what check_adamw_args refuses.
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, const std::vector<ParamSpan>& spans,
                            float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                            int t) = 0;

  // ---- Muon (Jordan et al. 2024; PyTorch's torch.optim.Muon, torch/optim/_muon.py, is the definition) ----
  // muon_momentum: momentum with Nesterov over every span (CUDA: one launch), as torch.optim.Muon's step:
  //   g = grad * grad_scale; buf = buf.lerp(g, 1 - momentum); out = nesterov ? g.lerp(buf, momentum) : buf,
  // with torch.lerp's arithmetic: lerp(a, b, w) = w < 0.5 ? a + w (b - a) : b - (b - a)(1 - w); span s's
  // elements: buf + s.state_at, out + s.update_at (the update Newton-Schulz then orthogonalizes), grad +
  // s.param_at, s.count each, fp32. Throws Error for what check_muon_spans refuses.
  virtual void muon_momentum(float* buf, float* out, const float* grad, const std::vector<MuonSpan>& spans,
                             float momentum, bool nesterov, float grad_scale) = 0;
  // newton_schulz: x (batch, rows, cols) fp32, in place -> the quintic Newton-Schulz iteration of each matrix
  // (torch.optim.Muon's _zeropower_via_newtonschulz): X = the matrix, transposed when rows > cols (so X X^T
  // is the smaller Gram matrix); X /= max(||X||_F, eps); `steps` times: A = X X^T, B = b A + c A A,
  // X = a X + B X; transposed back. (a, b, c) = kMuonNsCoefficients. It acts on each singular value s of
  // X / ||X||_F alone (s -> a s + b s^3 + c s^5 per step): after 5 steps every s >= 0.003 lies in
  // [0.68, 1.21] (kMuonNsBand; the coefficients trade exact convergence to 1 for slope at zero). The CPU backend runs in
  // fp32; CUDA in bf16 on tensor cores (as PyTorch, which rounds to bf16 on every device), fp32
  // accumulation, batched over the matrices. Throws Error unless batch >= 0, rows, cols >= 1 and steps >= 0.
  virtual void newton_schulz(float* x, int batch, int rows, int cols, int steps, float eps) = 0;
  // muon_apply: over every span (CUDA: one launch), param = param * decay - lr_s * update, fp32, param +
  // s.param_at and update + s.update_at (s.count each): decay = 1 - lr * weight_decay (the unadjusted lr, as
  // torch.optim.Muon), lr_s = float(double(lr) * s.lr_ratio) the span's adjusted learning rate. Throws
  // Error for what check_muon_spans refuses.
  virtual void muon_apply(float* param, const float* update, const std::vector<MuonSpan>& spans, float decay,
                          float lr) = 0;
};

// kMuonNsCoefficients: (a, b, c) of the quintic Newton-Schulz iteration (Keller Jordan's Muon;
// torch.optim.Muon's DEFAULT_A, DEFAULT_B, DEFAULT_C). kMuonEps: its default eps (torch's EPS).
inline constexpr float kMuonNsCoefficients[3] = {3.4445f, -4.7750f, 2.0315f};
inline constexpr float kMuonEps = 1e-7f;
// kMuonNsBand: where 5 steps take every singular value in [0.003, 1] (the scalar map iterated; in the
// iteration's band); the CPU tests check it (test_muon).
inline constexpr float kMuonNsBand[2] = {0.68f, 1.21f};

// DeviceBuffer: RAII owner of `count` elements of T in a backend's memory.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, size_t count)
      : be_(&be), count_(count), ptr_(static_cast<T*>(count ? be.alloc(count * sizeof(T)) : nullptr)) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), count_(o.count_), ptr_(o.ptr_) {
    o.ptr_ = nullptr;
    o.count_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, count_ = o.count_, ptr_ = o.ptr_;
      o.ptr_ = nullptr, o.count_ = 0;
    }
    return *this;
  }
  void reset() noexcept {
    if (ptr_) be_->free(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* get() const { return ptr_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  Backend* be_ = nullptr;
  size_t count_ = 0;
  T* ptr_ = nullptr;
};

// RowKernels: how the ops that combine rows (the GEMMs, attention) pick their arithmetic.
// fastest: by the whole call (training, serving): OpenBLAS and cuBLASLt choose a kernel, hence a summation
//   order, by the row count N, and training attention runs its route (flash, cuDNN), so a one-row decoding
//   step differs from a B*T-row forward in the last bits.
// per_row: a row's bits do not depend on the rows computed with it: one GEMM per row (CUDA: each row
//   through the same aligned scratch, so every call has one shape and alignment), and on CUDA
//   attention_forward through the decoding kernel (attention_decode over a scratch cache; forward only:
//   attention_backward throws Error). The decoder's logits then equal the training forward's bit for bit
//   (the tests test_inference and test_cuda_inference). For tests; much slower.
enum class RowKernels { fastest, per_row };

// BackendOptions: what a backend needs to bind its device.
struct BackendOptions {
  Device device = Device::automatic;
  int local_rank = 0;           // node-local rank (MPI shared-memory split)
  int local_size = 1;           // ranks on this node
  // fp32 | bf16. bf16 = mixed precision (CUDA only): activations stored in bf16, bf16 tensor-core
  // products with fp32 accumulation, fp32 arithmetic inside every other op; parameters, gradients
  // and optimizer state stay fp32 (docs/cuda.md, "Precision").
  DType dtype = DType::fp32;  // or automatic (make_backend: bf16 on cuda, fp32 on cpu)
  Attention attention = Attention::automatic;  // CUDA only (UsageError for another on the CPU backend)
  RowKernels rows = RowKernels::fastest;       // per_row: tests comparing the decoder with training
  WeightCopy weight_copy = WeightCopy::persistent;  // bf16 on CUDA only (UsageError for per_use otherwise)
};

}  // namespace xtrain
