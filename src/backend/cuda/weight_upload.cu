// The CUDA backend's weight upload (weight_upload.h): the host fills one pinned buffer while the part in
// the other is copied to the device and widened (F16/BF16 -> fp32, exact) and transposed there by
// weight_part_kernel, so no host copy of the model is made and the host never converts.
#include "backend/cuda/weight_upload.h"

#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// weight_part_kernel: convert_weight_part's (xtrain/backend/weight_upload.h) n = i1 - i0 elements at src
// (wire: 0 F32, 1 F16, 2 BF16) into dst, as they are or transposed
__global__ void weight_part_kernel(float* dst, const void* src, size_t i0, size_t n, size_t A, size_t B, int wire,
                                   bool transpose) {
  for (size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x; j < n; j += size_t(gridDim.x) * blockDim.x) {
    float v;
    if (wire == 0) {
      v = static_cast<const float*>(src)[j];
    } else {
      const unsigned short h = static_cast<const unsigned short*>(src)[j];
      v = wire == 1 ? __half2float(__ushort_as_half(h)) : __uint_as_float(unsigned(h) << 16);  // bf16: the top half
    }
    const size_t i = i0 + j;
    if (transpose) dst[(i % B) * A + i / B] = v;
    else dst[i] = v;
  }
}

class CudaWeightUpload final : public WeightUpload {
 public:
  CudaWeightUpload(cudaStream_t stream, size_t capacity, std::function<void(const void*, size_t)> written)
      : stream_(stream), capacity_(capacity), written_(std::move(written)) {
    try {
      for (int k = 0; k < 2; ++k) {
        XT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_[k]), capacity_, cudaHostAllocDefault));
        XT_CUDA_CHECK(cudaMalloc(&dev_[k], capacity_));
        XT_CUDA_CHECK(cudaEventCreateWithFlags(&done_[k], cudaEventDisableTiming));
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaWeightUpload() override {
    cudaStreamSynchronize(stream_);  // what is in flight reads the buffers; an error is finish()'s to report
    release();
  }
  size_t capacity_bytes() const override { return capacity_; }
  char* buffer() override {
    if (pending_[next_]) XT_CUDA_CHECK(cudaEventSynchronize(done_[next_]));  // its last part is on the device
    pending_[next_] = false;
    return host_[next_];
  }
  void write(const WeightPart& p) override {
    const size_t n = p.i1 > p.i0 ? p.i1 - p.i0 : 0;
    XT_CHECK(n * wire_bytes(p.wire) <= capacity_, "weight upload: a part of " << n << " elements over the buffer");
    if (n == 0) return;
    const int k = next_;
    if (p.transpose) written_(p.dst, p.A * p.B * sizeof(float));
    else written_(p.dst + p.i0, n * sizeof(float));
    XT_CUDA_CHECK(cudaMemcpyAsync(dev_[k], host_[k], n * wire_bytes(p.wire), cudaMemcpyHostToDevice, stream_));
    const int wire = p.wire == WireDType::f32 ? 0 : p.wire == WireDType::f16 ? 1 : 2;
    weight_part_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream_>>>(p.dst, dev_[k], p.i0, n, p.A, p.B, wire, p.transpose);
    XT_CUDA_LAUNCH_CHECK();
    XT_CUDA_CHECK(cudaEventRecord(done_[k], stream_));
    pending_[k] = true;
    next_ ^= 1;
  }
  void finish() override {
    XT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    pending_[0] = pending_[1] = false;
  }

 private:
  void release() noexcept {
    for (int k = 0; k < 2; ++k) {
      if (host_[k]) cudaFreeHost(host_[k]);
      if (dev_[k]) cudaFree(dev_[k]);
      if (done_[k]) cudaEventDestroy(done_[k]);
      host_[k] = nullptr, dev_[k] = nullptr, done_[k] = nullptr;
    }
  }
  cudaStream_t stream_;
  size_t capacity_;
  std::function<void(const void*, size_t)> written_;
  char* host_[2] = {nullptr, nullptr};
  void* dev_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false};
  int next_ = 0;
};
}  // namespace

std::unique_ptr<WeightUpload> make_weight_upload(cudaStream_t stream, size_t capacity_bytes,
                                                 std::function<void(const void*, size_t)> written) {
  return std::make_unique<CudaWeightUpload>(stream, capacity_bytes, std::move(written));
}

}  // namespace xtrain::cuda
