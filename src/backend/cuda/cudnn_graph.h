// A small owner-and-builder layer over cuDNN 9's graph (backend) API (cudnn_graph.h): RAII descriptors,
// an operation-graph builder of 4-D tensors named by unique id, and an execution plan picked from the
// heuristics. Only what cudnn_attention.cpp needs; the descriptor and attribute names are those of the
// cuDNN Backend API reference ("Backend Descriptor Types").
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <xtrain/core/error.h>

namespace xtrain::cuda::cudnn {

// message: cuDNN's name for `status` plus its last error text (cudnnGetLastErrorString), one line.
std::string message(cudnnStatus_t status);

}  // namespace xtrain::cuda::cudnn

// XT_CUDNN_CHECK(call): call returns cudnnStatus_t; throws with the status string and cuDNN's last error.
#define XT_CUDNN_CHECK(call) \
  XT_STATUS_CHECK(call, xt_rc_ == CUDNN_STATUS_SUCCESS, ::xtrain::cuda::cudnn::message(xt_rc_))

namespace xtrain::cuda::cudnn {

// Desc: owns one backend descriptor (cudnnBackendDestroyDescriptor at scope end); move-only.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&&) = delete;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  // set: cudnnBackendSetAttribute of `count` elements of `type` at `values`; throws Error naming `name`.
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  Desc& set(cudnnBackendAttributeName_t name, const Desc& d);  // one descriptor-valued attribute
  Desc& set(cudnnBackendAttributeName_t name, int64_t v) { return set(name, CUDNN_TYPE_INT64, 1, &v); }
  Desc& finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// Plan: a finalized execution plan; workspace_bytes of device scratch per run; deterministic when its
// engine carries no CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC note.
struct Plan {
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace_bytes = 0;
  bool deterministic = false;
  // execute: runs the plan on the handle's stream; `uids` and `ptrs` pair every non-virtual tensor with
  // its device pointer (by-value scalars: a host pointer); workspace: workspace_bytes of device memory.
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
               void* workspace) const;
};

// Graph: builds one operation graph. Tensors are 4-D with 16-byte alignment; ops reference them by uid.
class Graph {
 public:
  // tensor: a non-virtual tensor the variant pack supplies (uid chosen by the caller, < kFirstVirtual).
  int64_t tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type);
  // scalar: a (1,1,1,1) fp32 tensor passed by value (a host float in the variant pack).
  int64_t scalar(int64_t uid);
  // virt: an intermediate tensor that never reaches memory; returns its generated uid.
  int64_t virt(Dims dims, Dims strides, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  // pointwise: y = mode(x[, b[, t]]) with math in `math`; axis >= 0 for CUDNN_POINTWISE_GEN_INDEX.
  // BINARY_SELECT: y = t ? x : b.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = -1, int64_t t = -1,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void matmul(int64_t a, int64_t b, int64_t c);                  // c = a b, batched over dims 0, 1; fp32 math
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);  // over the dims where y is smaller
  void reshape(int64_t x, int64_t y);                              // same elements, new dims/strides
  // plan: the first heuristics (mode A) engine config that finalizes into a plan, skipping engines
  // marked non-deterministic when `deterministic`. Throws Error naming the step and cuDNN's status.
  Plan plan(cudnnHandle_t handle, bool deterministic) const;

  static constexpr int64_t kFirstVirtual = 1000;

 private:
  int64_t add_tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type, bool is_virtual, bool by_value);
  const Desc& at(int64_t uid) const;
  std::map<int64_t, Desc> tensors_;
  std::vector<Desc> ops_, descs_;  // operations; their pointwise / matmul / reduction descriptors
  int64_t next_virtual_ = kFirstVirtual;
};

}  // namespace xtrain::cuda::cudnn
