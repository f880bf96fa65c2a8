// CudaBackend: the Backend on one GPU. Owns the device binding, one compute stream (every op and
// copy is ordered on it), the cuBLAS handle and the caching allocator. Ops forward to the launchers
// in ops.h. Declared here (not in cuda_backend.h) for the NCCL communicator, which needs the
// stream and the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& opts);  // throws Error, see make_cuda_backend
  ~CudaBackend() override;                           // never throws
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device kind() const override { return Device::cuda; }
  std::string device_name() const override { return device_name_; }
  DType dtype() const override { return ctx_.bf16 ? DType::bf16 : DType::fp32; }

  void* alloc(size_t bytes) override { return alloc_.alloc(bytes); }
  void free(void* ptr) noexcept override;  // drops the weight mirror first when ptr's block holds its source
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
  void synchronize() override;
  size_t peak_memory_bytes() const override { return alloc_.stats().peak_bytes_reserved; }
  size_t memory_in_use_bytes() const override { return alloc_.stats().bytes_in_use; }
  // memory_accounting: the allocator's blocks by tag (allocator.h) and state; the backend's own blocks
  // (weight mirror, cuBLAS workspace, AdamW table, error flag, split counters), a recorded graph's scratch and
  // the cache.
  BackendMemory memory_accounting() const override;
  size_t allocation_bytes(const void* ptr) const override { return alloc_.block_bytes(ptr); }
  std::optional<GpuId> gpu_id() const override { return gpu_id_; }
  size_t available_memory_bytes() const override;  // cudaMemGetInfo's free bytes of this rank's device
  // setup_ms: the constructor's parts (cuda_backend.cpp), the cuBLASLt heuristics' load once its thread is done
  // (warm_gemm_heuristics), then, once made, the cuDNN handle of --attention auto
  // (made at its first use, CudnnAttention::handle; --attention cudnn makes it in the constructor)
  std::vector<std::pair<std::string, double>> setup_ms() const override;
  // make_timeline_clock: CUDA events on the compute stream; its clear() records the shared base.
  std::unique_ptr<TimelineClock> make_timeline_clock() override;
  std::unique_ptr<StepGraph> capture_graph(const std::function<void()>& work) override;
  // make_stream_clock: CUDA events on another stream of this device (the NCCL side stream), on the
  // same base as make_timeline_clock's clock.
  std::unique_ptr<TimelineClock> make_stream_clock(cudaStream_t stream);

  // prepare_weights (bf16): params rounded into the weight mirror, one kernel; the matmuls read weights from
  // it (OpContext::weights, matmul.cu). The mirror's block is kept for the next call (grown when a larger
  // buffer comes) and freed with the buffer it copies or with the backend.
  void prepare_weights(const float* params, size_t count) override;
  size_t weight_copy_bytes() const override { return mirror_enabled_ ? sizeof(__nv_bfloat16) : 0; }
  // set_fp8_weights: one block for every matrix's two E4M3 layouts and scales (Fp8Weight), made in each
  // prepare_weights after the mirror and valid with it (ctx_.fp8).
  size_t set_fp8_weights(const std::vector<WeightMatrix>& weights) override;
  // bf16, --weight-copy persistent, cuBLASLt on (XTRAIN_CUDA_LT), compute capability >= 8.9
  std::string fp8_unavailable() const override;
  size_t fp8_copy_bytes() const override { return fp8_block_bytes_; }
  uint64_t weights_generation() const override { return weights_generation_; }

  void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                       int C, const int32_t* pos) override;
  void encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B, int T,
                        int C) override;
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* w, const float* b,
                         int N, int C) override;
  void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a, const void* b,
                                  const float* w, const float* bias, int N, int C) override;
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C, Grad dw_mode) override;
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const float* w, int N, int C, float eps) override;
  void residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b, const float* w, int N,
                                int C, float eps) override;  // one kernel, the bits of the two ops (rmsnorm.cu)
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const float* w, const float* rstd,
                        int N, int C, Grad dw_mode) override;
  void rotary_forward(void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS, float theta) override;
  void rotary_backward(void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) override;
  void swiglu_forward(void* out, const void* inp, int N, int F) override;
  void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) override;
  void matmul_forward(void* out, const void* inp, const float* w, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_gelu_forward(void* pre, void* out, const void* inp, const float* w, const float* bias, int N, int IC,
                           int OC) override;
  void gelu_matmul_backward(void* dpre, float* dw, float* dbias, const void* dout, const void* inp, const void* pre,
                            const float* w, void* scratch, int N, int IC, int OC, Grad dw_mode) override;
  using Backend::attention_backward;  // the accumulating overloads of the base class
  using Backend::gelu_backward;
  using Backend::gelu_matmul_backward;
  using Backend::layernorm_backward;
  using Backend::matmul_backward;
  using Backend::rmsnorm_backward;
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const float* w,
                       int N, int IC, int OC, Grad dinp_mode, Grad dw_mode) override;
  void attention_forward(void* out, float* att, const void* qkv, int B, int T, int NH, int KVH,
                         int HS) override;
  // Per route (ops.h, attention_scratch_count): flash B*NH*T*(HS+1) (log-sum-exp and the output copy,
  // flash_attention.h); cudnn B*NH*T (the log-sum-exp, cudnn_attention.h); GEMM route B*NH*T*T.
  size_t attention_scratch_count(int B, int T, int NH, int KVH, int HS) const override;
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* att, int B,
                          int T, int NH, int KVH, int HS, Grad dqkv_mode) override;
  void attention_decode(void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn, const int32_t* pos, int maxT,
                        int NH, int KVH, int HS) override;
  void gelu_forward(void* out, const void* inp, size_t count) override;
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t count, Grad dinp_mode) override;
  void residual_forward(void* out, const void* a, const void* b, size_t count) override;
  bool fuses_rows() const override { return true; }
  bool norm_matmul_forward(void* pre, void* out, const void* inp, const float* norm_w, const float* norm_b,
                           float rms_eps, const float* w, const float* bias, int C, int OC) override;
  bool matmul_residual_forward(void* res, const void* residual, const void* inp, const float* w, const float* bias,
                               int IC, int OC) override;
  void add_inplace(void* dst, const void* src, size_t count) override;
  void dropout_apply(void* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) override;
  void cross_entropy_forward_backward(float* losses, void* dlogits, const void* logits, const int32_t* targets,
                                      float dloss, int N, int V, int Vp) override;
  void argmax_rows(int32_t* out, const void* logits, int rows, int V, int ld, int32_t* tokens) override;
  double sum(const float* x, size_t count) override;
  double sum_squares(const float* x, size_t count) override;
  void adamw_update(float* param, const float* grad, float* m, float* v, const std::vector<ParamSpan>& spans,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int t) override;
  void muon_momentum(float* buf, float* out, const float* grad, const std::vector<MuonSpan>& spans, float momentum,
                     bool nesterov, float grad_scale) override;
  void newton_schulz(float* x, int batch, int rows, int cols, int steps, float eps) override;
  void muon_apply(float* param, const float* update, const std::vector<MuonSpan>& spans, float decay,
                  float lr) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const std::string& pci_bus_id() const { return pci_bus_id_; }
  const std::string& host() const { return host_; }
  const CudaAllocStats& alloc_stats() const { return alloc_.stats(); }
  const OpContext& op_context() const { return ctx_; }
  // weight_upload: a WeightUpload on this backend's stream (weight_upload.h) that drops the weight mirror
  // it writes over, as every write of parameter memory does
  std::unique_ptr<WeightUpload> weight_upload(size_t capacity_bytes);

 private:
  // check_device_errors: waits for the stream, then throws Error if a kernel flagged bad input
  // (a target outside [0, V), a negative token id) since the last check, and clears the flag.
  void check_device_errors();
  // fail_on_device_error: the same check on a flag value already read (the stream synchronized with it);
  // resets the device flag and throws unless it is kDeviceOk.
  void fail_on_device_error(int flag);
  // weights_written: this backend is about to write bytes [p, p + bytes): drop the weight mirror if they
  // touch its source (ops then convert weights per call until the next prepare_weights).
  void weights_written(const void* p, size_t bytes) {
    if (ctx_.weights.overlaps(p, bytes)) ctx_.weights = WeightMirror{}, ctx_.fp8 = nullptr, ++weights_generation_;
  }

  // drop_fp8: the FP8 list and its copies go (ctx_.fp8 null, the block freed); weights_generation moves.
  void drop_fp8();

  // for_each_row (RowKernels::per_row): op(out1_row, out2_row or null, inp_row) for each of N rows, every call
  // on the same 256-byte aligned one-row scratch buffers (one shape, one alignment: one cuBLASLt algorithm);
  // inp (N,IC) and out1, out2 (N,OC) of the activation type; out2 may be null.
  void for_each_row(int N, const void* inp, int IC, void* out1, void* out2, int OC,
                    const std::function<void(void*, void*, const void*)>& op);

  CachingAllocator alloc_;  // first member: destroyed last, after everything it handed out
  int device_ = 0;
  std::string host_, pci_bus_id_, device_name_;
  GpuId gpu_id_;  // from cudaDeviceProp (the MFU peak lookup, mfu.h)
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;  // fused-epilogue matmuls (gemm_lt.cpp)
  void* cublas_workspace_ = nullptr;
  int* error_flag_ = nullptr;  // device int, DeviceError codes
  unsigned* split_counters_ = nullptr;  // device, cuda::kSplitCounters (OpContext::split_counters)
  std::unique_ptr<CudnnAttention> cudnn_;  // the cudnn attention route only
  cudaEvent_t timeline_base_ = nullptr;  // the timeline clocks' shared base (event_clock.h), made on first use
  OpContext ctx_;
  RowKernels rows_ = RowKernels::fastest;  // BackendOptions::rows
  AdamWTable adamw_table_;  // adamw_update's chunk table, kept across steps
  MuonTable muon_table_;    // muon_momentum's and muon_apply's chunk table, kept across steps
  bool mirror_enabled_ = false;      // bf16 with --weight-copy persistent
  __nv_bfloat16* mirror_ = nullptr;  // the weight mirror's block (ctx_.weights points into it when valid)
  size_t mirror_capacity_ = 0;       // its size in elements
  WeightMirror mirror_source_;       // the range last prepared, kept when ctx_.weights is dropped: free()
                                     // of a block overlapping it releases the mirror
  cuda::Fp8Weights fp8_;             // set_fp8_weights' matrices, their copies in fp8_block_
  void* fp8_block_ = nullptr;
  size_t fp8_block_bytes_ = 0;
  uint64_t weights_generation_ = 0;  // +1 when the mirror is dropped, moved or made for another source
  std::vector<std::pair<std::string, double>> setup_ms_;  // the constructor's parts (setup_ms)
  std::shared_future<double> gemm_warmup_;  // warm_gemm_heuristics in a thread the constructor starts (ms, or -1)
};

}  // namespace xtrain::cuda
