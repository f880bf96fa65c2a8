// cuDNN fused causal attention (cudnn_attention.h). The graphs are the operation patterns cuDNN's fused
// "flash" attention engines recognize (cuDNN developer guide, "Fused Attention fprop / bprop"; the same
// nodes cudnn-frontend's sdpa and sdpa_backward expand into), with bf16 operands, fp32 scores, softmax
// and statistics:
//   forward:  S = scale * Q K^T, causal mask (row >= col, else the lowest float), softmax with
//             Stats = max + log(sum exp(S - max)) written out, O = P V (P in bf16).
//   backward: D = rowsum(dO * O); P = exp(scale * Q K^T (masked) - Stats); dV = P^T dO;
//             dS = scale * P * (dO V^T - D); dK = dS^T Q; dQ = dS K.
// Grouped-query heads: K, V have KVH heads and are broadcast over each group of NH/KVH query heads; dK and
// dV are summed over the group by a reduction node. The backward graph has no fp32 dQ accumulator tensor,
// which selects cuDNN's deterministic (workspace) backward; plan() also refuses engines cuDNN marks
// non-deterministic.
#include "backend/cuda/cudnn_attention.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace xtrain::cuda {

namespace {
using cudnn::Dims;
using cudnn::Graph;

// Variant-pack ids of the tensors the caller supplies (virtual tensors take ids from Graph::kFirstVirtual).
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kScale, kMaskValue, kOne, kDO, kDQ, kDK, kDV };

// Strided views, dims (b, h, rows, cols) with strides in elements. qkv rows are W = (NH+2*KVH)*HS wide.
struct Views {
  int64_t B, T, NH, KVH, HS, W, C;  // C = NH*HS: the output row
  explicit Views(const QkvLayout& s)
      : B(s.B), T(s.T), NH(s.NH), KVH(s.KVH), HS(s.HS), W(s.row()), C(s.out_row()) {}
  Dims q() const { return {B, NH, T, HS}; }
  Dims q_strides() const { return {T * W, HS, W, 1}; }  // head h starts at column h*HS (QkvLayout::q_col)
  Dims kv() const { return {B, KVH, T, HS}; }
  Dims kv_strides() const { return {T * W, HS, W, 1}; }  // from the k (or v) column base
  Dims kv_t() const { return {B, KVH, HS, T}; }          // K^T, V^T: the same memory, last two dims swapped
  Dims kv_t_strides() const { return {T * W, HS, 1, W}; }
  Dims o() const { return {B, NH, T, HS}; }
  Dims o_strides() const { return {T * C, HS, C, 1}; }
  Dims s() const { return {B, NH, T, T}; }               // scores (virtual)
  Dims s_strides() const { return {NH * T * T, T * T, T, 1}; }
  Dims s_t_strides() const { return {NH * T * T, T * T, 1, T}; }  // their transpose (square: same dims)
  Dims row() const { return {B, NH, T, 1}; }             // one value per score row (Stats)
  Dims row_strides() const { return {NH * T, T, 1, 1}; }
  Dims q_dense_strides() const { return {NH * T * HS, T * HS, HS, 1}; }
};

// causal_scores: S = scale * a b, then the causal mask; returns the masked scores' uid.
int64_t causal_scores(Graph& g, const Views& v, int64_t a, int64_t b) {
  const int64_t s0 = g.virt(v.s(), v.s_strides()), s1 = g.virt(v.s(), v.s_strides());
  g.matmul(a, b, s0);
  g.pointwise(CUDNN_POINTWISE_MUL, s0, s1, kScale);
  const int64_t row = g.virt(v.s(), v.s_strides(), CUDNN_DATA_INT32), col = g.virt(v.s(), v.s_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, row, -1, -1, CUDNN_DATA_INT32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, col, -1, -1, CUDNN_DATA_INT32, 3);
  const int64_t keep = g.virt(v.s(), v.s_strides(), CUDNN_DATA_BOOLEAN), masked = g.virt(v.s(), v.s_strides());
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, -1, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s1, masked, kMaskValue, keep);  // keep ? s1 : lowest
  return masked;
}

// group_matmul: c = a b into `out` (dims of KVH heads); with grouped heads through an NH-head bf16
// intermediate summed over each group (cuDNN's GQA dK / dV pattern).
void group_matmul(Graph& g, const Views& v, int64_t a, int64_t b, int64_t out) {
  if (v.NH == v.KVH) return g.matmul(a, b, out);
  const int64_t full = g.virt(v.q(), v.q_dense_strides(), CUDNN_DATA_BFLOAT16);
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

Graph forward_graph(const Views& v) {
  Graph g;
  const auto bf16 = CUDNN_DATA_BFLOAT16;
  const int64_t q = g.tensor(kQ, v.q(), v.q_strides(), bf16), kt = g.tensor(kK, v.kv_t(), v.kv_t_strides(), bf16);
  const int64_t vv = g.tensor(kV, v.kv(), v.kv_strides(), bf16), o = g.tensor(kO, v.o(), v.o_strides(), bf16);
  const int64_t stats = g.tensor(kStats, v.row(), v.row_strides(), CUDNN_DATA_FLOAT);
  g.scalar(kScale), g.scalar(kMaskValue);
  const int64_t s = causal_scores(g, v, q, kt);
  // softmax with statistics
  const int64_t mx = g.virt(v.row(), v.row_strides()), sub = g.virt(v.s(), v.s_strides());
  const int64_t e = g.virt(v.s(), v.s_strides()), sum = g.virt(v.row(), v.row_strides());
  const int64_t lg = g.virt(v.row(), v.row_strides()), p = g.virt(v.s(), v.s_strides(), bf16);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, mx);
  g.pointwise(CUDNN_POINTWISE_SUB, s, sub, mx);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, e);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, stats, lg);
  g.pointwise(CUDNN_POINTWISE_DIV, e, p, sum);
  g.matmul(p, vv, o);
  return g;
}

Graph backward_graph(const Views& v) {
  Graph g;
  const auto bf16 = CUDNN_DATA_BFLOAT16;
  const int64_t q = g.tensor(kQ, v.q(), v.q_strides(), bf16), kt = g.tensor(kK, v.kv_t(), v.kv_t_strides(), bf16);
  const int64_t vt = g.tensor(kV, v.kv_t(), v.kv_t_strides(), bf16), o = g.tensor(kO, v.o(), v.o_strides(), bf16);
  const int64_t d_o = g.tensor(kDO, v.o(), v.o_strides(), bf16);
  const int64_t stats = g.tensor(kStats, v.row(), v.row_strides(), CUDNN_DATA_FLOAT);
  const int64_t dq = g.tensor(kDQ, v.q(), v.q_strides(), bf16), dk = g.tensor(kDK, v.kv(), v.kv_strides(), bf16);
  const int64_t dv = g.tensor(kDV, v.kv(), v.kv_strides(), bf16);
  g.scalar(kScale), g.scalar(kMaskValue), g.scalar(kOne);
  // D = rowsum(dO * O)
  const int64_t prod = g.virt(v.o(), v.q_dense_strides()), dsum = g.virt(v.row(), v.row_strides());
  const int64_t dsum1 = g.virt(v.row(), v.row_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, prod, o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, dsum);
  g.pointwise(CUDNN_POINTWISE_MUL, dsum, dsum1, kOne);  // the dropout-scale slot of the pattern (1: no dropout)
  // P = exp(S - Stats); dV = P^T dO
  const int64_t s = causal_scores(g, v, q, kt);
  const int64_t sub = g.virt(v.s(), v.s_strides()), p = g.virt(v.s(), v.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, s, sub, stats);
  g.pointwise(CUDNN_POINTWISE_EXP, sub, p);
  const int64_t p_t = g.virt(v.s(), v.s_t_strides(), bf16);
  g.reshape(p, p_t);
  group_matmul(g, v, p_t, d_o, dv);
  // dS = scale * P * (dO V^T - D)
  const int64_t dp = g.virt(v.s(), v.s_strides()), dp1 = g.virt(v.s(), v.s_strides());
  const int64_t dp2 = g.virt(v.s(), v.s_strides()), dp3 = g.virt(v.s(), v.s_strides());
  const int64_t ds = g.virt(v.s(), v.s_strides());
  g.matmul(d_o, vt, dp);
  g.pointwise(CUDNN_POINTWISE_MUL, dp, dp1, kOne);  // the dropout-mask slot (1: no dropout)
  g.pointwise(CUDNN_POINTWISE_SUB, dp1, dp2, dsum1);
  g.pointwise(CUDNN_POINTWISE_MUL, dp2, dp3, p);
  g.pointwise(CUDNN_POINTWISE_MUL, dp3, ds, kScale);
  // dK = dS^T Q; dQ = dS K
  const int64_t ds_t = g.virt(v.s(), v.s_t_strides(), bf16);
  g.reshape(ds, ds_t);
  group_matmul(g, v, ds_t, q, dk);
  const int64_t k = g.virt(v.kv(), v.kv_strides(), bf16);
  g.reshape(kt, k);
  g.matmul(ds, k, dq);
  return g;
}

void check_aligned(const void* p, const char* what) {
  XT_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "cuDNN attention: " << what << " is not 16-byte aligned");
}

size_t stats_floats(const QkvLayout& s) { return (size_t(s.B) * s.NH * s.T + 3) / 4 * 4; }  // 16-byte padded
}  // namespace

CudnnAttention::CudnnAttention(cudaStream_t stream, bool strict) : stream_(stream), strict_(strict) {
  if (strict_) handle();  // --attention cudnn: a cuDNN that cannot start is an error of the set-up
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // plans reference the handle: destroy them first
  if (handle_) cudnnDestroy(handle_);
}

cudnnHandle_t CudnnAttention::handle() {
  if (handle_) return handle_;
  if (!init_error_.empty()) throw Error(init_error_);
  check_not_capturing();
  const auto t0 = std::chrono::steady_clock::now();
  cudnnHandle_t h = nullptr;
  try {
    XT_CUDNN_CHECK(cudnnCreate(&h));
    XT_CUDNN_CHECK(cudnnSetStream(h, stream_));
  } catch (const Error& e) {
    if (h) cudnnDestroy(h);
    init_error_ = std::string("cuDNN cannot be initialized: ") + e.what();
    throw Error(init_error_);
  }
  handle_ = h;
  created_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return handle_;
}

void CudnnAttention::check_not_capturing() const {
  // cudnnCreate inside a capture would be recorded nowhere and its set-up work would break the capture: the
  // handle is made before (training: its memory estimate and first step ask usable())
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  XT_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capturing));
  XT_CHECK(capturing == cudaStreamCaptureStatusNone,
           "cuDNN attention: the cuDNN handle would first be made inside a CUDA graph capture; run the attention once "
           "uncaptured first");
}

const cudnn::Plan& CudnnAttention::plan(const QkvLayout& s, bool backward) {
  const auto key = std::make_tuple(backward, s.B, s.T, s.NH, s.KVH, s.HS);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    const Views v(s);
    const Graph g = backward ? backward_graph(v) : forward_graph(v);
    it = plans_.emplace(key, g.plan(handle(), /*deterministic=*/true)).first;
  }
  return it->second;
}

bool CudnnAttention::usable(const QkvLayout& s) {
  const Key key{s.B, s.T, s.NH, s.KVH, s.HS};
  const auto it = usable_.find(key);
  if (it != usable_.end()) return it->second;
  if (!handle_ && init_error_.empty()) check_not_capturing();  // an Error to the caller, never "not usable"
  bool ok = true;
  try {
    plan(s, false), plan(s, true);
  } catch (const Error& e) {
    if (strict_) throw;
    std::fprintf(stderr, "xtrain: cuDNN attention unavailable for B=%d T=%d NH=%d KVH=%d HS=%d, using the flash "
                 "kernels: %s\n", s.B, s.T, s.NH, s.KVH, s.HS, e.what());
    ok = false;
  }
  return usable_[key] = ok;
}

bool cudnn_attention_supported(bool bf16, int T, int HS) { return bf16 && HS % 8 == 0 && HS <= 128 && T > HS; }

size_t cudnn_attention_scratch_count(int B, int NH, int T, int HS) { return stats_floats(QkvLayout{B, T, NH, NH, HS}); }

void cudnn_attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, const QkvLayout& s) {
  XT_CHECK(ctx.cudnn != nullptr, "cuDNN attention: the backend has no cuDNN handle");
  check_aligned(qkv, "qkv"), check_aligned(out, "out"), check_aligned(att, "att");
  const cudnn::Plan& plan = ctx.cudnn->plan(s, false);
  const char* base = static_cast<const char*>(qkv);
  const size_t e = sizeof(__nv_bfloat16);
  float scale = float(1.0 / std::sqrt(double(s.HS))), lowest = std::numeric_limits<float>::lowest();
  ScratchBuffer<char> ws(*ctx.alloc, size_t(plan.workspace_bytes), "cuDNN attention workspace");
  plan.execute(ctx.cudnn->handle(), {kQ, kK, kV, kO, kStats, kScale, kMaskValue},
               {const_cast<char*>(base), const_cast<char*>(base + s.k_col(0) * e),
                const_cast<char*>(base + s.v_col(0) * e), out, att, &scale, &lowest},
               ws.get());
}

void cudnn_attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* att, const QkvLayout& s, bool accumulate) {
  XT_CHECK(ctx.cudnn != nullptr, "cuDNN attention: the backend has no cuDNN handle");
  check_aligned(qkv, "qkv"), check_aligned(dqkv, "dqkv"), check_aligned(dout, "dout"), check_aligned(out, "out");
  check_aligned(att, "att");
  const cudnn::Plan& plan = ctx.cudnn->plan(s, true);
  const size_t e = sizeof(__nv_bfloat16);
  // accumulate: cuDNN writes its gradients (=), so through a scratch added once afterwards
  ScratchBuffer<__nv_bfloat16> tmp(*ctx.alloc, accumulate ? s.qkv_count() : 0, "cuDNN attention dqkv (+=)");
  char* d = accumulate ? reinterpret_cast<char*>(tmp.get()) : static_cast<char*>(dqkv);
  char* base = const_cast<char*>(static_cast<const char*>(qkv));
  float* stats = const_cast<float*>(att);
  float scale = float(1.0 / std::sqrt(double(s.HS))), lowest = std::numeric_limits<float>::lowest(), one = 1.0f;
  ScratchBuffer<char> ws(*ctx.alloc, size_t(plan.workspace_bytes), "cuDNN attention workspace");
  plan.execute(ctx.cudnn->handle(),
               {kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kScale, kMaskValue, kOne},
               {base, base + s.k_col(0) * e, base + s.v_col(0) * e, const_cast<void*>(out), const_cast<void*>(dout),
                stats, d, d + s.k_col(0) * e, d + s.v_col(0) * e, &scale, &lowest, &one},
               ws.get());
  if (accumulate) add_inplace(ctx, dqkv, tmp.get(), s.qkv_count());
}

}  // namespace xtrain::cuda
