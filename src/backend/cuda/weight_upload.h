// The CUDA backend's WeightUpload (xtrain/backend/weight_upload.h), made by CudaBackend::weight_upload:
// two pinned host buffers and two device buffers, each part copied and converted on the backend's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>

#include <xtrain/backend/weight_upload.h>

namespace xtrain::cuda {

// make_weight_upload: parts of up to capacity_bytes, on `stream`; written(p, bytes) before each part is
// queued (the backend drops a weight mirror that the bytes [p, p + bytes) touch).
std::unique_ptr<WeightUpload> make_weight_upload(cudaStream_t stream, size_t capacity_bytes,
                                                 std::function<void(const void*, size_t)> written);

}  // namespace xtrain::cuda
