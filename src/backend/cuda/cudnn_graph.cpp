// cuDNN graph (backend) API owners and builder: see cudnn_graph.h. Attribute names and the order of
// the calls (tensors, operations, operation graph, heuristics, engine config, execution plan, variant
// pack) follow the cuDNN Backend API reference.
#include "backend/cuda/cudnn_graph.h"

#include <algorithm>

namespace xtrain::cuda::cudnn {

std::string message(cudnnStatus_t status) {
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string m = cudnnGetErrorString(status);
  if (last[0] != '\0') m += std::string(" (") + last + ")";
  std::replace(m.begin(), m.end(), '\n', ' ');  // one line
  return m;
}

Desc::Desc(cudnnBackendDescriptorType_t type) { XT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                const void* values) {
  const cudnnStatus_t rc = cudnnBackendSetAttribute(d_, name, type, count, values);
  XT_CHECK(rc == CUDNN_STATUS_SUCCESS, "cudnnBackendSetAttribute(attribute " << int(name) << "): " << message(rc));
  return *this;
}

Desc& Desc::set(cudnnBackendAttributeName_t name, const Desc& d) {
  cudnnBackendDescriptor_t raw = d.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Desc& Desc::finalize() {
  XT_CUDNN_CHECK(cudnnBackendFinalize(d_));
  return *this;
}

void Plan::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                   void* workspace) const {
  XT_CHECK(uids.size() == ptrs.size(), "cuDNN variant pack: " << uids.size() << " ids but " << ptrs.size() << " pointers");
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  XT_CUDNN_CHECK(cudnnBackendExecute(handle, plan.get(), pack.get()));
}

int64_t Graph::add_tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type, bool is_virtual,
                          bool by_value) {
  XT_CHECK(tensors_.count(uid) == 0, "cuDNN graph: tensor uid " << uid << " used twice");
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;  // 16-byte aligned operands: the tensor-core engines need it
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual)
      .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)
      .finalize();
  tensors_.emplace(uid, std::move(t));
  return uid;
}

int64_t Graph::tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type) {
  XT_CHECK(uid < kFirstVirtual, "cuDNN graph: tensor uid " << uid << " is in the virtual range");
  return add_tensor(uid, dims, strides, type, false, false);
}

int64_t Graph::scalar(int64_t uid) {
  XT_CHECK(uid < kFirstVirtual, "cuDNN graph: scalar uid " << uid << " is in the virtual range");
  return add_tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true);
}

int64_t Graph::virt(Dims dims, Dims strides, cudnnDataType_t type) {
  return add_tensor(next_virtual_++, dims, strides, type, true, false);
}

const Desc& Graph::at(int64_t uid) const {
  const auto it = tensors_.find(uid);
  XT_CHECK(it != tensors_.end(), "cuDNN graph: no tensor with uid " << uid);
  return it->second;
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t, cudnnDataType_t math,
                      int64_t axis) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw.finalize();
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(x))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(y));
  if (b >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(b));
  if (t >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(t));
  op.finalize();
  descs_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void Graph::matmul(int64_t a, int64_t b, int64_t c) {
  Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math).finalize();
  Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(a))
      .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(b))
      .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(c))
      .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm)
      .finalize();
  descs_.push_back(std::move(mm));
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t red, int64_t x, int64_t y) {
  Desc rd(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  rd.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math)
      .finalize();
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(x))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(y))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd)
      .finalize();
  descs_.push_back(std::move(rd));
  ops_.push_back(std::move(op));
}

void Graph::reshape(int64_t x, int64_t y) {
  Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(x)).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(y)).finalize();
  ops_.push_back(std::move(op));
}

Plan Graph::plan(cudnnHandle_t handle, bool deterministic) const {
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Desc& op : ops_) ops.push_back(op.get());
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  cudnnStatus_t rc = cudnnBackendFinalize(graph.get());
  XT_CHECK(rc == CUDNN_STATUS_SUCCESS, "cuDNN operation graph (" << ops.size() << " ops) not supported: " << message(rc));

  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize();
  int64_t count = 0;
  XT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                          &count, nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  XT_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          count, &count, raw.data()));
  rc = CUDNN_STATUS_NOT_SUPPORTED;
  int skipped = 0;
  for (int64_t i = 0; i < count; ++i) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t engine_raw = engine.get();
    int64_t n = 0;
    XT_CUDNN_CHECK(cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                            &engine_raw));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    XT_CUDNN_CHECK(cudnnBackendGetAttribute(engine_raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    const bool det = std::find(notes, notes + n, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) == notes + n;
    if (deterministic && !det) {
      ++skipped;
      continue;
    }
    Plan p;
    p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
    rc = cudnnBackendFinalize(p.plan.get());
    if (rc != CUDNN_STATUS_SUCCESS) continue;  // this engine cannot run the graph: try the next
    XT_CUDNN_CHECK(cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                            1, &n, &p.workspace_bytes));
    p.deterministic = det;
    return p;
  }
  XT_FAIL("cuDNN: no execution plan for the " << ops.size() << "-op graph: heuristics offered " << count
                                              << " engine configs (" << skipped
                                              << " skipped as non-deterministic); last finalize: " << message(rc));
}

}  // namespace xtrain::cuda::cudnn
