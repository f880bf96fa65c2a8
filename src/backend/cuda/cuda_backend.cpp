// CudaBackend: device binding, stream, cuBLAS handle, memory and the dispatch of every op to its
// launcher (one .cu file per op). See cuda_backend_impl.h.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/weight_upload.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <system_error>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/event_clock.h"
#include <xtrain/core/log.h>

namespace xtrain {

namespace {
// cuBLAS workspace: the cuBLAS documentation recommends 32 MiB on Hopper (cublasSetWorkspace);
// providing it from our allocator keeps cuBLAS from allocating behind our counters.
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

// The allocator tags of the backend's own blocks, and what the memory report says of each.
constexpr const char* kWorkspaceTag = "cuBLAS workspace";
constexpr const char* kErrorFlagTag = "device error flag";
constexpr const char* kMirrorTag = "bf16 weight mirror";
constexpr const char* kFp8Tag = "fp8 weight copies";
struct OwnBlock {
  const char* tag;
  MemoryCategory category;
  const char* dtype;
  const char* why;
};
constexpr OwnBlock kOwnBlocks[] = {
    {kMirrorTag, MemoryCategory::parameters, "bf16", "the weights rounded once per forward for the GEMMs (prepare_weights)"},
    {kFp8Tag, MemoryCategory::parameters, "fp8",
     "--fp8's weights in E4M3, both layouts, made with the bf16 copy (set_fp8_weights)"},
    {kWorkspaceTag, MemoryCategory::workspace, "bytes", "cuBLAS and cuBLASLt workspace (cublasSetWorkspace; 32 MiB for Hopper)"},
    {cuda::kAdamWTableTag, MemoryCategory::optimizer, "bytes", "adamw_update's chunk table (one launch for every tensor)"},
    {cuda::kMuonTableTag, MemoryCategory::optimizer, "bytes",
     "muon_momentum's and muon_apply's chunk table (one launch for every matrix)"},
    {kErrorFlagTag, MemoryCategory::other, "int32", "kernels flag bad input here (checked at the next sync)"},
    {cuda::kSplitCountersTag, MemoryCategory::other, "uint32",
     "attention_decode's chunk counters and argmax_rows' slices of a decoding row (counters 0 between launches)"},
};

// gemm_compute: the cuBLAS compute type of gemm() on fp32 operands (the attention GEMM route). bf16:
// CUBLAS_COMPUTE_32F_FAST_16BF rounds the fp32 operands to bf16 for the tensor cores and accumulates in
// fp32 (cuBLAS docs, cublasComputeType_t). The matmuls of --dtype bf16 take bf16 operands (matmul.cu).
cublasComputeType_t gemm_compute(DType dtype) {
  if (dtype == DType::fp32) return CUBLAS_COMPUTE_32F;
  if (dtype == DType::bf16) return CUBLAS_COMPUTE_32F_FAST_16BF;
  throw UsageError("--dtype must be fp32 or bf16 on the CUDA backend (got " + std::string(to_string(dtype)) + ")");
}

// resolve_attention: --attention resolved for this dtype (OpContext::attention). auto: cuDNN's fused
// attention with bf16 (deterministic and about 2x faster than the flash kernels on an H200: docs/cuda.md,
// bench/results/training_h200_2026-12.md), falling back to flash per shape (CudnnAttention::usable); with fp32 the GEMM route,
// whose fp32 products are cuBLAS SGEMMs, faster than the flash kernels' fp32 CUDA-core products. cuDNN's
// fused attention takes bf16 only.
Attention resolve_attention(Attention requested, DType dtype) {
  if (requested == Attention::cudnn && dtype != DType::bf16)
    throw UsageError("--attention cudnn needs --dtype bf16 (cuDNN's fused attention takes bf16 operands)");
  if (requested != Attention::automatic) return requested;
  return dtype == DType::bf16 ? Attention::cudnn : Attention::gemm;
}
}  // namespace

int cuda_device_count() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  cudaGetLastError();  // no driver / no device leaves an error state; clear it
  return rc == cudaSuccess ? n : 0;
}

bool cuda_device_available() { return cuda_device_count() > 0; }

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts) {
  return std::make_unique<cuda::CudaBackend>(opts);
}

CudaAllocStats cuda_alloc_stats(const Backend& backend) {
  XT_CHECK(backend.kind() == Device::cuda, "cuda_alloc_stats: backend '" << backend.name() << "' is not the CUDA backend");
  return static_cast<const cuda::CudaBackend&>(backend).alloc_stats();
}

std::unique_ptr<WeightUpload> make_cuda_weight_upload(Backend& backend, size_t capacity_bytes) {
  XT_CHECK(backend.kind() == Device::cuda, "make_cuda_weight_upload: backend '" << backend.name() << "' is not the CUDA backend");
  return static_cast<cuda::CudaBackend&>(backend).weight_upload(capacity_bytes);
}

const cuda::OpContext& cuda_op_context(const Backend& backend) {
  XT_CHECK(backend.kind() == Device::cuda, "cuda_op_context: backend '" << backend.name() << "' is not the CUDA backend");
  return static_cast<const cuda::CudaBackend&>(backend).op_context();
}

namespace cuda {

CudaBackend::CudaBackend(const BackendOptions& opts) : host_(host_name()) {
  // each part's wall time, for xtrain_generate --timing (setup_ms)
  auto t0 = std::chrono::steady_clock::now();
  auto lap = [&](std::string what) {
    const auto t = std::chrono::steady_clock::now();
    setup_ms_.emplace_back(std::move(what), std::chrono::duration<double, std::milli>(t - t0).count());
    t0 = t;
  };
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);  // the first runtime call: loads and initializes the driver
  if (rc != cudaSuccess || n == 0) {
    cudaGetLastError();
    XT_FAIL("no GPU: the CUDA runtime sees no device on host " << host_ << " ("
                                                               << (rc == cudaSuccess ? "0 devices" : cudaGetErrorString(rc))
                                                               << "); use --device cpu");
  }
  lap("CUDA driver (cudaGetDeviceCount)");
  // One visible device: the launcher (or CUDA_VISIBLE_DEVICES) gave this process its own GPU.
  // Several: node-local rank i takes device i, and there must be one per local rank.
  if (n > 1) {
    if (opts.local_size > n) {
      const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
      XT_FAIL("host " << host_ << ": " << opts.local_size << " ranks on this node but only " << n
                      << " GPUs visible (CUDA_VISIBLE_DEVICES=" << (cvd ? cvd : "<unset>")
                      << "); start at most one rank per GPU");
    }
    device_ = opts.local_rank;
  }
  XT_CUDA_CHECK(cudaSetDevice(device_));
  XT_CUDA_CHECK(cudaFree(nullptr));  // the primary context made here, not inside the first call that needs it
  lap("CUDA context (device " + std::to_string(device_) + ")");
  cudaDeviceProp prop{};
  XT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  char bus[64] = {};
  XT_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device_));
  pci_bus_id_ = bus;
  device_name_ = std::string(prop.name) + " (" + pci_bus_id_ + ")";
  gpu_id_ = GpuId{prop.name, prop.major, prop.minor, prop.multiProcessorCount};

  XT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  lap("device properties and stream");
  XT_CUBLAS_CHECK(cublasCreate(&cublas_));
  XT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));  // resets the workspace: set it afterwards
  // fp32 mode: plain FP32 arithmetic. CUBLAS_DEFAULT_MATH never uses TF32 or BF16x9 emulation for
  // SGEMM (both are opt-in math modes), so results match the CPU within fp32 rounding.
  XT_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  lap("cuBLAS handle");
  cublas_workspace_ = alloc_.alloc(kCublasWorkspaceBytes, kWorkspaceTag);
  XT_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
  error_flag_ = static_cast<int*>(alloc_.alloc(sizeof(int), kErrorFlagTag));
  XT_CUDA_CHECK(cudaMemsetAsync(error_flag_, 0, sizeof(int), stream_));
  // attention_decode's chunk counters, then argmax_rows' state (OpContext::argmax_state): one allocation
  constexpr size_t kCounterBytes = (cuda::kSplitCounters + cuda::kArgmaxStateWords) * sizeof(unsigned);
  split_counters_ = static_cast<unsigned*>(alloc_.alloc(kCounterBytes, cuda::kSplitCountersTag));
  XT_CUDA_CHECK(cudaMemsetAsync(split_counters_, 0, kCounterBytes, stream_));
  XT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the memsets' time counted here
  lap("workspace and allocator (32 MiB cuBLAS workspace, error flag, split counters)");
  XT_CUBLAS_CHECK(cublasLtCreate(&cublaslt_));
  lap("cuBLASLt handle");
  // cuBLASLt's heuristics loaded beside whatever the caller does next (a model read, the data), not in its
  // first GEMM (setup_ms reports the time once done)
  try {
    gemm_warmup_ = std::async(std::launch::async, [device = device_] { return warm_gemm_heuristics(device); }).share();
  } catch (const std::system_error&) {  // no thread to be had: a hint, not a failed set-up (the first GEMM loads them)
  }
  const Attention route = resolve_attention(opts.attention, opts.dtype);
  if (route == Attention::cudnn) {
    // --attention cudnn: the handle now (a cuDNN that cannot start fails the set-up); auto: at its first use
    // (CudnnAttention::handle), outside any graph capture, so a run that never calls the training attention
    // (xtrain_generate's decoding reads the cache through attention_decode) never pays for it
    const bool strict = opts.attention == Attention::cudnn;
    cudnn_ = std::make_unique<CudnnAttention>(stream_, strict);
    if (strict) lap("cuDNN handle");
  }
  // --weight-copy per-use: bf16 weights rounded into a scratch copy per matmul call instead of kept (less
  // memory; the same bits, test_cuda_train). fp32 GEMMs read the fp32 weights: no copy either way.
  mirror_enabled_ = opts.dtype == DType::bf16 && opts.weight_copy == WeightCopy::persistent;
  rows_ = opts.rows;
  ctx_ = OpContext{stream_, cublas_, &alloc_, error_flag_, gemm_compute(opts.dtype), opts.dtype == DType::bf16,
                   route, cudnn_.get(), cublaslt_, cublas_workspace_, kCublasWorkspaceBytes, WeightMirror{}, nullptr,
                   split_counters_, split_counters_ + cuda::kSplitCounters};
}

CudaBackend::~CudaBackend() {
  if (gemm_warmup_.valid()) gemm_warmup_.wait();
  if (stream_) cudaStreamSynchronize(stream_);
  cudnn_.reset();  // its handle is bound to the stream
  if (cublaslt_) cublasLtDestroy(cublaslt_);
  if (cublas_) cublasDestroy(cublas_);
  alloc_.free(cublas_workspace_);
  alloc_.free(error_flag_);
  alloc_.free(split_counters_);
  alloc_.free(mirror_);
  alloc_.free(fp8_block_);
  if (timeline_base_) cudaEventDestroy(timeline_base_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::vector<std::pair<std::string, double>> CudaBackend::setup_ms() const {
  std::vector<std::pair<std::string, double>> parts = setup_ms_;
  if (gemm_warmup_.valid() && gemm_warmup_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    parts.emplace_back("cuBLASLt heuristics (in a thread of their own, beside what follows the set-up)",
                       gemm_warmup_.get());
  if (cudnn_ && !cudnn_->strict() && cudnn_->created())
    parts.emplace_back("cuDNN handle (made at the first cuDNN attention)", cudnn_->created_ms());
  return parts;
}

BackendMemory CudaBackend::memory_accounting() const {
  using State = CachingAllocator::BlockState;
  BackendMemory m;
  for (const CachingAllocator::TagBytes& g : alloc_.blocks()) {
    const std::string tag = g.tag, blocks = std::to_string(g.blocks) + (g.blocks == 1 ? " block" : " blocks");
    if (g.state == State::in_use && tag == CachingAllocator::kCallerTag) {
      m.caller_bytes += g.bytes;
      continue;
    }
    MemoryEntry e{tag, g.bytes, "bytes", "", MemoryCategory::workspace, {}};
    if (g.state == State::cached) {
      e.name = "cache: " + tag;
      e.why = blocks + " freed and kept for reuse by the caching allocator (last used: " + tag + ")";
    } else if (g.state == State::graph) {
      e.name = "graph: " + tag;
      e.why = blocks + " of scratch held by the recorded step (CUDA graph), written at each launch";
    } else {
      e.why = blocks + " in use";
      for (const OwnBlock& o : kOwnBlocks)
        if (tag == o.tag) e.category = o.category, e.dtype = o.dtype, e.why = o.why;
    }
    m.own.push_back(e);
  }
  m.held_bytes = alloc_.stats().bytes_reserved;
  m.peak_bytes = alloc_.stats().peak_bytes_reserved;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total_b - free_b > m.held_bytes)
    m.outside_bytes = total_b - free_b - m.held_bytes;
  return m;
}

std::unique_ptr<TimelineClock> CudaBackend::make_timeline_clock() {
  if (!timeline_base_) XT_CUDA_CHECK(cudaEventCreate(&timeline_base_));
  return std::make_unique<EventClock>(stream_, timeline_base_, true);
}

std::unique_ptr<TimelineClock> CudaBackend::make_stream_clock(cudaStream_t stream) {
  if (!timeline_base_) XT_CUDA_CHECK(cudaEventCreate(&timeline_base_));
  return std::make_unique<EventClock>(stream, timeline_base_, false);
}

namespace {
// CudaStepGraph: an instantiated CUDA graph and the scratch blocks its recording used (allocator.h,
// Pool), which stay reserved for it until it goes.
class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaStream_t stream, cudaGraphExec_t exec, CachingAllocator& alloc, CachingAllocator::Pool pool)
      : stream_(stream), exec_(exec), alloc_(alloc), pool_(std::move(pool)) {}
  ~CudaStepGraph() override {
    cudaGraphExecDestroy(exec_);  // a launch still queued completes first (CUDA graph docs)
    alloc_.release_pool(pool_);   // stream-ordered reuse, as any freed block (allocator.h)
  }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;
  void launch() override { XT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
  CachingAllocator& alloc_;
  CachingAllocator::Pool pool_;
};
}  // namespace

// Stream capture in relaxed mode (cudaStreamCaptureModeRelaxed: a cudaMalloc of the allocator's first use
// of a size is allowed); a synchronizing call inside `work` fails the capture with an error, rethrown here
// after the capture is ended and its recording dropped. The graph holds the weight mirror's address too:
// prepare_weights moves the mirror only for a larger parameter count, which a training run never asks; a
// Decoder records again when weights_generation() moved (another model prepared its weights).
std::unique_ptr<StepGraph> CudaBackend::capture_graph(const std::function<void()>& work) {
  alloc_.begin_pool();
  if (const cudaError_t rc = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed); rc != cudaSuccess) {
    alloc_.release_pool(alloc_.end_pool());
    XT_CUDA_CHECK(rc);
  }
  cudaGraph_t graph = nullptr;
  auto abandon = [&] {
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; clear the last one
    alloc_.release_pool(alloc_.end_pool());  // the recorded work never ran
  };
  try {
    work();
  } catch (...) {
    abandon();
    throw;
  }
  CachingAllocator::Pool pool = alloc_.end_pool();
  cudaError_t rc = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (rc == cudaSuccess) {
    rc = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    alloc_.release_pool(pool);
    XT_FAIL("CUDA graph capture of the step failed: " << cudaGetErrorString(rc));
  }
  return std::make_unique<CudaStepGraph>(stream_, exec, alloc_, std::move(pool));
}

void CudaBackend::check_device_errors() {
  int flag = 0;
  // Device-to-pageable-host copies return only when complete, so `flag` is valid afterwards.
  XT_CUDA_CHECK(cudaMemcpyAsync(&flag, error_flag_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  XT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  fail_on_device_error(flag);
}

void CudaBackend::fail_on_device_error(int flag) {
  if (flag == kDeviceOk) return;
  XT_CUDA_CHECK(cudaMemsetAsync(error_flag_, 0, sizeof(int), stream_));
  if (flag == kBadTarget) XT_FAIL("cross-entropy: a target id is outside the vocabulary [0, V)");
  if (flag == kBadToken) XT_FAIL("encoder: a token id is negative");
  if (flag == kBadPosition) XT_FAIL("attention_decode: positions outside the key/value cache");
  XT_FAIL("CUDA kernel reported error code " << flag);
}

void CudaBackend::free(void* ptr) noexcept {
  if (ptr != nullptr && mirror_source_.overlaps(ptr, alloc_.block_bytes(ptr))) {
    // the parameters go: so does their copy (its memory follows theirs), valid or already dropped
    ctx_.weights = mirror_source_ = WeightMirror{};
    ctx_.fp8 = nullptr;
    ++weights_generation_;
    alloc_.free(mirror_);
    mirror_ = nullptr, mirror_capacity_ = 0;
  }
  // a selected FP8 weight's buffer goes: so does the FP8 list (set_fp8_weights({}))
  if (ptr != nullptr && !fp8_.list.empty()) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(ptr), end = a + alloc_.block_bytes(ptr);
    for (const cuda::Fp8Weight& e : fp8_.list) {
      const uintptr_t w = reinterpret_cast<uintptr_t>(e.w);
      if (w < end && a < w + size_t(e.rows) * e.cols * sizeof(float)) {
        drop_fp8();
        break;
      }
    }
  }
  alloc_.free(ptr);
}

void CudaBackend::prepare_weights(const float* params, size_t count) {
  if (!mirror_enabled_ || count == 0) return;  // fp32 GEMMs read the fp32 weights themselves
  const WeightMirror before = ctx_.weights;
  ctx_.weights = WeightMirror{};         // none valid until the refresh below is queued
  ctx_.fp8 = nullptr;
  if (mirror_capacity_ < count) {
    alloc_.free(mirror_);  // stream-ordered reuse: kernels queued before still read it first (allocator.h)
    mirror_ = nullptr, mirror_capacity_ = 0;
    mirror_ = static_cast<__nv_bfloat16*>(alloc_.alloc(count * sizeof(__nv_bfloat16), kMirrorTag));
    mirror_capacity_ = count;
  }
  cuda::to_bf16_flat(ctx_, mirror_, params, count);
  ctx_.weights = mirror_source_ = WeightMirror{params, mirror_, count};
  // the FP8 copies of --fp8's matrices, current exactly as long as the mirror; only where every one lies in this
  // buffer (another buffer's weights, e.g. another model's, get no FP8 products: their copies would be stale)
  const bool fp8_inside = std::all_of(fp8_.list.begin(), fp8_.list.end(), [&](const cuda::Fp8Weight& e) {
    return ctx_.weights.find(e.w, size_t(e.rows) * e.cols) != nullptr;
  });
  if (!fp8_.list.empty() && fp8_inside) {
    cuda::fp8_prepare_weights(ctx_, fp8_);
    ctx_.fp8 = &fp8_;
  }
  // the same valid copy refreshed in place (the weights of one source read again) is not a new one
  if (before.count == 0 || before.src != params || before.bf16 != mirror_ || before.count != count)
    ++weights_generation_;
}

void CudaBackend::drop_fp8() {
  ctx_.fp8 = nullptr;
  ++weights_generation_;
  alloc_.free(fp8_block_);  // stream-ordered: queued kernels still read it first
  fp8_block_ = nullptr, fp8_block_bytes_ = 0, fp8_.list.clear();
}

std::string CudaBackend::fp8_unavailable() const {
  if (!ctx_.bf16) return "--fp8 needs --dtype bf16 (the FP8 products replace bf16 ones)";
  if (!mirror_enabled_) return "--fp8 needs --weight-copy persistent (the FP8 copies are made with the bf16 copy)";
  if (!cuda::gemm_lt_enabled()) return "--fp8 needs cuBLASLt's route, which XTRAIN_CUDA_LT=off turns off";
  if (gpu_id_.cc_major * 10 + gpu_id_.cc_minor < 89)
    return "--fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer); " + device_name_ + " has " +
           std::to_string(gpu_id_.cc_major) + "." + std::to_string(gpu_id_.cc_minor);
  return "";
}

size_t CudaBackend::set_fp8_weights(const std::vector<WeightMatrix>& weights) {
  if (!weights.empty())
    if (const std::string why = fp8_unavailable(); !why.empty()) throw UsageError(why);
  // the matrices taken (fp8_takes; a GPT-2 layout whose qkv bias width is not a multiple of 4 shifts the later
  // tensors off 16-byte boundaries)
  std::vector<WeightMatrix> taken;
  for (const WeightMatrix& m : weights)
    if (m.w != nullptr && fp8_takes(m.rows, m.cols, reinterpret_cast<uintptr_t>(m.w))) taken.push_back(m);
  // the previous block goes (stream-ordered: queued kernels still read it first), the new one is laid out as
  // per matrix w8 | w8t | amax, inv, each part on a 256-byte boundary
  if (fp8_block_ != nullptr) drop_fp8();
  if (taken.empty()) return 0;
  ++weights_generation_;  // a recorded graph's FP8 copies start
  auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t bytes = 0;
  for (const WeightMatrix& m : taken) bytes += 2 * round(size_t(m.rows) * m.cols) + 256;
  fp8_block_ = alloc_.alloc(bytes, kFp8Tag);
  fp8_block_bytes_ = bytes;
  auto* p = static_cast<uint8_t*>(fp8_block_);
  for (const WeightMatrix& m : taken) {
    cuda::Fp8Weight e;
    e.w = m.w, e.rows = m.rows, e.cols = m.cols;
    const size_t n = round(size_t(m.rows) * m.cols);
    e.w8 = reinterpret_cast<__nv_fp8_e4m3*>(p), e.w8t = reinterpret_cast<__nv_fp8_e4m3*>(p + n);
    e.amax = reinterpret_cast<float*>(p + 2 * n), e.inv = e.amax + 4;  // inv 16-byte aligned (scale pointer)
    p += 2 * n + 256;
    fp8_.list.push_back(e);
  }
  // copies made now where the mirror is current (else by the next prepare_weights)
  if (ctx_.weights.count > 0) prepare_weights(ctx_.weights.src, ctx_.weights.count);
  return taken.size();
}

// The host buffer may be pageable or pinned; the stream sync makes the copy complete before return
// in both cases, so the caller may reuse host_src at once.
std::unique_ptr<WeightUpload> CudaBackend::weight_upload(size_t capacity_bytes) {
  return make_weight_upload(stream_, capacity_bytes, [this](const void* p, size_t bytes) { weights_written(p, bytes); });
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  weights_written(dst, bytes);
  XT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  XT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) {
  if (bytes > 0) XT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  check_device_errors();  // synchronizes the stream
}

void CudaBackend::zero(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  weights_written(ptr, bytes);
  XT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
}

void CudaBackend::synchronize() { check_device_errors(); }

void CudaBackend::encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                  int T, int C, const int32_t* pos) {
  cuda::encoder_forward(ctx_, out, tokens, wte, wpe, B, T, C, pos);
}
void CudaBackend::encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B,
                                   int T, int C) {
  cuda::encoder_backward(ctx_, dwte, dwpe, dout, tokens, B, T, C);
}
void CudaBackend::layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* w,
                                    const float* b, int N, int C) {
  cuda::layernorm_forward(ctx_, out, mean, rstd, inp, w, b, N, C);
}

void CudaBackend::residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a,
                                             const void* b, const float* w, const float* bias, int N, int C) {
  cuda::residual_layernorm_forward(ctx_, res, out, mean, rstd, a, b, w, bias, N, C);
}
void CudaBackend::layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                                     const float* w, const float* mean, const float* rstd, int N, int C,
                                     Grad dw_mode) {
  cuda::layernorm_backward(ctx_, dinp, dw, db, dout, inp, w, mean, rstd, N, C, dw_mode == Grad::accumulate);
}
void CudaBackend::rmsnorm_forward(void* out, float* rstd, const void* inp, const float* w, int N, int C, float eps) {
  cuda::rmsnorm_forward(ctx_, out, rstd, inp, w, N, C, eps);
}
void CudaBackend::residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b,
                                           const float* w, int N, int C, float eps) {
  cuda::residual_rmsnorm_forward(ctx_, res, out, rstd, a, b, w, N, C, eps);
}
void CudaBackend::rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const float* w,
                                   const float* rstd, int N, int C, Grad dw_mode) {
  cuda::rmsnorm_backward(ctx_, dinp, dw, dout, inp, w, rstd, N, C, dw_mode == Grad::accumulate);
}
void CudaBackend::rotary_forward(void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS, float theta) {
  cuda::rotary_forward(ctx_, qkv, pos, B, T, NH, KVH, HS, theta);
}
void CudaBackend::rotary_backward(void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) {
  cuda::rotary_backward(ctx_, dqkv, B, T, NH, KVH, HS, theta);
}
void CudaBackend::swiglu_forward(void* out, const void* inp, int N, int F) {
  cuda::swiglu_forward(ctx_, out, inp, N, F);
}
void CudaBackend::swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) {
  cuda::swiglu_backward(ctx_, dinp, dout, inp, N, F);
}
void CudaBackend::for_each_row(int N, const void* inp, int IC, void* out1, void* out2, int OC,
                               const std::function<void(void*, void*, const void*)>& op) {
  const size_t ab = activation_bytes(), in_bytes = size_t(IC) * ab, out_bytes = size_t(OC) * ab;
  ScratchBuffer<unsigned char> in_row(alloc_, in_bytes), row1(alloc_, out_bytes), row2(alloc_, out2 ? out_bytes : 0);
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    XT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  };
  for (int n = 0; n < N; ++n) {
    copy(in_row.get(), static_cast<const unsigned char*>(inp) + n * in_bytes, in_bytes);
    op(row1.get(), out2 ? row2.get() : nullptr, in_row.get());
    copy(static_cast<unsigned char*>(out1) + n * out_bytes, row1.get(), out_bytes);
    if (out2) copy(static_cast<unsigned char*>(out2) + n * out_bytes, row2.get(), out_bytes);
  }
}

void CudaBackend::matmul_forward(void* out, const void* inp, const float* w, const float* bias, int N, int IC,
                                 int OC) {
  if (rows_ == RowKernels::fastest) return cuda::matmul_forward(ctx_, out, inp, w, bias, N, IC, OC);
  for_each_row(N, inp, IC, out, nullptr, OC, [&](void* o, void*, const void* i) {
    cuda::matmul_forward(ctx_, o, i, w, bias, 1, IC, OC);
  });
}
void CudaBackend::matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                                  const float* w, int N, int IC, int OC, Grad dinp_mode, Grad dw_mode) {
  cuda::matmul_backward(ctx_, dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_mode == Grad::accumulate,
                        dw_mode == Grad::accumulate);
}
void CudaBackend::attention_forward(void* out, float* att, const void* qkv, int B, int T, int NH, int KVH,
                                    int HS) {
  if (rows_ == RowKernels::fastest) return cuda::attention_forward(ctx_, out, att, qkv, B, T, NH, KVH, HS);
  // RowKernels::per_row: the decoding kernel over a scratch cache of these T positions from position 0, so each
  // query row is computed as a decoding step computes it; `att` is not written (forward only)
  const size_t cache = size_t(B) * T * KVH * HS * activation_bytes();
  ScratchBuffer<unsigned char> kcache(alloc_, cache), vcache(alloc_, cache);
  ScratchBuffer<int32_t> pos(alloc_, 1);
  XT_CUDA_CHECK(cudaMemsetAsync(pos.get(), 0, sizeof(int32_t), stream_));
  cuda::attention_decode(ctx_, out, kcache.get(), vcache.get(), qkv, B, T, pos.get(), T, NH, KVH, HS);
}
size_t CudaBackend::available_memory_bytes() const {
  size_t free_bytes = 0, total_bytes = 0;
  XT_CUDA_CHECK(cudaSetDevice(device_));  // the current device may be another after a library call
  XT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

size_t CudaBackend::attention_scratch_count(int B, int T, int NH, int KVH, int HS) const {
  return cuda::attention_scratch_count(ctx_, B, T, NH, KVH, HS);
}
void CudaBackend::attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* att,
                                     int B, int T, int NH, int KVH, int HS, Grad dqkv_mode) {
  XT_CHECK(rows_ == RowKernels::fastest, "attention_backward: a backend with per-row kernels computes the forward only");
  cuda::attention_backward(ctx_, dqkv, dout, qkv, out, att, B, T, NH, KVH, HS, dqkv_mode == Grad::accumulate);
}
void CudaBackend::attention_decode(void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn,
                                   const int32_t* pos, int maxT, int NH, int KVH, int HS) {
  cuda::attention_decode(ctx_, out, kcache, vcache, qkv, B, Tn, pos, maxT, NH, KVH, HS);
}
void CudaBackend::matmul_gelu_forward(void* pre, void* out, const void* inp, const float* w, const float* bias, int N,
                                      int IC, int OC) {
  if (rows_ == RowKernels::per_row) {
    return for_each_row(N, inp, IC, pre, out, OC, [&](void* p, void* o, const void* i) {
      if (!cuda::matmul_gelu_forward(ctx_, p, o, i, w, bias, 1, IC, OC))
        Backend::matmul_gelu_forward(p, o, i, w, bias, 1, IC, OC);
    });
  }
  if (!cuda::matmul_gelu_forward(ctx_, pre, out, inp, w, bias, N, IC, OC))
    Backend::matmul_gelu_forward(pre, out, inp, w, bias, N, IC, OC);
}
bool CudaBackend::norm_matmul_forward(void* pre, void* out, const void* inp, const float* norm_w, const float* norm_b,
                                      float rms_eps, const float* w, const float* bias, int C, int OC) {
  cuda::GemvFusion f;
  f.norm_w = norm_w, f.norm_b = norm_b, f.rms_eps = rms_eps;
  return cuda::fused_row_forward(ctx_, out, pre, inp, w, bias, C, OC, f);
}
bool CudaBackend::matmul_residual_forward(void* res, const void* residual, const void* inp, const float* w,
                                          const float* bias, int IC, int OC) {
  cuda::GemvFusion f;
  f.residual = residual;
  return cuda::fused_row_forward(ctx_, res, nullptr, inp, w, bias, IC, OC, f);
}
void CudaBackend::gelu_matmul_backward(void* dpre, float* dw, float* dbias, const void* dout, const void* inp,
                                       const void* pre, const float* w, void* scratch, int N, int IC, int OC,
                                       Grad dw_mode) {
  if (!cuda::gelu_matmul_backward(ctx_, dpre, dw, dbias, dout, inp, pre, w, N, IC, OC, dw_mode == Grad::accumulate))
    Backend::gelu_matmul_backward(dpre, dw, dbias, dout, inp, pre, w, scratch, N, IC, OC, dw_mode);
}
void CudaBackend::gelu_forward(void* out, const void* inp, size_t count) {
  cuda::gelu_forward(ctx_, out, inp, count);
}
void CudaBackend::gelu_backward(void* dinp, const void* inp, const void* dout, size_t count, Grad dinp_mode) {
  cuda::gelu_backward(ctx_, dinp, inp, dout, count, dinp_mode == Grad::accumulate);
}
void CudaBackend::residual_forward(void* out, const void* a, const void* b, size_t count) {
  cuda::residual_forward(ctx_, out, a, b, count);
}
void CudaBackend::add_inplace(void* dst, const void* src, size_t count) { cuda::add_inplace(ctx_, dst, src, count); }
void CudaBackend::dropout_apply(void* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) {
  cuda::dropout_apply(ctx_, x, seq_keys, B, per_seq, p);
}
void CudaBackend::cross_entropy_forward_backward(float* losses, void* dlogits, const void* logits,
                                                 const int32_t* targets, float dloss, int N, int V, int Vp) {
  cuda::cross_entropy_forward_backward(ctx_, losses, dlogits, logits, targets, dloss, N, V, Vp);
}
void CudaBackend::argmax_rows(int32_t* out, const void* logits, int rows, int V, int ld, int32_t* tokens) {
  cuda::argmax_rows(ctx_, out, logits, rows, V, ld, tokens);
}
// The sums read the device error flag in the copy that brings the result (one round trip, not two).
double CudaBackend::sum(const float* x, size_t count) {
  int flag = kDeviceOk;
  const double s = cuda::sum(ctx_, x, count, false, &flag);
  fail_on_device_error(flag);
  return s;
}
double CudaBackend::sum_squares(const float* x, size_t count) {
  int flag = kDeviceOk;
  const double s = cuda::sum(ctx_, x, count, true, &flag);
  fail_on_device_error(flag);
  return s;
}
void CudaBackend::adamw_update(float* param, const float* grad, float* m, float* v,
                               const std::vector<ParamSpan>& spans, float lr, float beta1, float beta2, float eps,
                               float weight_decay, float grad_scale, int t) {
  for (const ParamSpan& s : spans) weights_written(param + s.offset, s.count * sizeof(float));
  cuda::adamw_update(ctx_, adamw_table_, param, grad, m, v, spans, lr, beta1, beta2, eps, weight_decay, grad_scale,
                     t);
}
void CudaBackend::muon_momentum(float* buf, float* out, const float* grad, const std::vector<MuonSpan>& spans,
                                float momentum, bool nesterov, float grad_scale) {
  check_muon_spans(spans);
  cuda::muon_momentum(ctx_, muon_table_, buf, out, grad, spans, momentum, nesterov, grad_scale);
}
void CudaBackend::newton_schulz(float* x, int batch, int rows, int cols, int steps, float eps) {
  check_newton_schulz_args(batch, rows, cols, steps);
  cuda::newton_schulz(ctx_, x, batch, rows, cols, steps, eps);
}
void CudaBackend::muon_apply(float* param, const float* update, const std::vector<MuonSpan>& spans, float decay,
                             float lr) {
  check_muon_spans(spans);
  for (const MuonSpan& s : spans) weights_written(param + s.param_at, s.count * sizeof(float));
  cuda::muon_apply(ctx_, muon_table_, param, update, spans, decay, lr);
}

}  // namespace cuda
}  // namespace xtrain
