// Causal grouped-query attention through cuDNN 9's fused scaled-dot-product attention (cudnn_attention.cpp),
// built with the graph (backend) API. Selected by attention.cu for the `cudnn` route (--attention cudnn)
// with bf16 activations and a supported shape.
#pragma once

#include <cudnn_graph.h>

#include <map>
#include <string>
#include <tuple>

#include "backend/cuda/cudnn_graph.h"
#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>

namespace xtrain::cuda {

// CudnnAttention: the cuDNN handle (on the backend's stream) and one execution plan per direction and
// shape, built at first use and kept (a plan takes milliseconds to build, a run microseconds).
// strict (--attention cudnn): the handle is made in the constructor (Error there when cuDNN cannot be
// initialized) and a shape cuDNN cannot run deterministically is an error. Otherwise (--attention auto) the
// handle is made at its first use (handle(): the first attention's plans, which a run that never calls the
// training attention, such as xtrain_generate's decoding, never reaches), and usable() says false where
// cuDNN cannot run a shape or cannot be initialized at all; attention.cu then takes another route.
class CudnnAttention {
 public:
  CudnnAttention(cudaStream_t stream, bool strict);  // strict: throws Error when cuDNN cannot be initialized
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // handle: the cuDNN handle, made at the first call (cudnnCreate, bound to the stream; its time in
  // created_ms()). Never made inside a CUDA graph capture: a first call while the stream is capturing
  // throws Error (training makes it before: its memory estimate and first, uncaptured step ask usable()).
  // Throws Error, the same each time, when cuDNN cannot be initialized.
  cudnnHandle_t handle();
  bool created() const { return handle_ != nullptr; }
  double created_ms() const { return created_ms_; }  // cudnnCreate + cudnnSetStream; 0 until made
  // unavailable: a call of handle() found that cuDNN cannot be initialized (then usable() is false for every
  // shape when not strict)
  bool unavailable() const { return !init_error_.empty(); }
  bool strict() const { return strict_; }
  // usable: both plans of shape s build (deterministic engines only). Decided once per shape; when not
  // strict a refusal is printed once to stderr and false returned, when strict the Error propagates.
  bool usable(const QkvLayout& s);
  // plan: the cached plan of the forward (backward false) or backward graph for shape s; builds it first.
  const cudnn::Plan& plan(const QkvLayout& s, bool backward);

 private:
  // check_not_capturing: throws Error while the stream is capturing a CUDA graph (the handle is not made there)
  void check_not_capturing() const;
  using Key = std::tuple<int, int, int, int, int>;  // B, T, NH, KVH, HS
  cudaStream_t stream_;
  cudnnHandle_t handle_ = nullptr;
  bool strict_;
  double created_ms_ = 0;
  std::string init_error_;  // why cuDNN cannot be initialized ("" until a handle() call fails)
  std::map<std::tuple<bool, int, int, int, int, int>, cudnn::Plan> plans_;
  std::map<Key, bool> usable_;
};

// cudnn_attention_supported: bf16 activations, HS a multiple of 8 up to 128 (cuDNN's fused attention
// on Hopper), and T > HS (the same `att` bound as the flash route, so a test's (T,T) scratch holds it).
bool cudnn_attention_supported(bool bf16, int T, int HS);

// cudnn_attention_scratch_count: floats of `att` the cuDNN route keeps between forward and backward:
// the log-sum-exp of each scaled score row, (B,NH,T) fp32 (natural log, cuDNN's softmax "Stats"),
// padded to 16 bytes. The backward's rowsum(dO * O) reads the forward's output where the caller keeps it.
size_t cudnn_attention_scratch_count(int B, int NH, int T, int HS);

// cudnn_attention_forward: qkv (B,T,(NH+2*KVH)*HS) bf16 -> out (B,T,NH*HS) bf16, att as above.
// q, k, v are strided views into qkv (QkvLayout), no copies. Throws Error when a buffer is not 16-byte
// aligned, or naming the cuDNN status and step when cuDNN refuses the graph or the run.
void cudnn_attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, const QkvLayout& s);
// cudnn_attention_backward: dout (B,T,NH*HS), out (B,T,NH*HS) and att as the forward left them -> dqkv
// (= , or += when accumulate: then through a bf16 scratch and one add). dq, dk, dv are strided views
// into dqkv.
void cudnn_attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* att, const QkvLayout& s, bool accumulate);

}  // namespace xtrain::cuda
