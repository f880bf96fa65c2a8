// Entry points of the CUDA backend for src/backend/registry.cpp and the tests. This header includes no
// CUDA header, so code that only creates backends compiles without the CUDA toolkit's includes.
#pragma once

#include <cstddef>
#include <memory>

#include <xtrain/backend/backend.h>
#include <xtrain/backend/weight_upload.h>
#include <xtrain/comm/comm.h>
#include "backend/cuda/alloc_stats.h"

namespace xtrain {

// cuda_device_available: true when the CUDA runtime sees at least one device. False (never an
// exception) on a machine without GPU or driver, so a CUDA build starts everywhere.
bool cuda_device_available();

// make_cuda_backend: binds one GPU and returns the CUDA backend. Device choice: one visible device
// -> device 0 (the launcher or CUDA_VISIBLE_DEVICES gave each process its own); several visible ->
// device opts.local_rank. Throws Error when no GPU is visible, or when more ranks share the node
// (opts.local_size) than GPUs are visible (the message names the host and both counts).
// opts.dtype picks the GEMM math: fp32, or bf16 tensor cores with fp32 accumulation (UsageError else).
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& opts);

// cuda_device_count: the devices the CUDA runtime sees (0 without GPU or driver; never throws).
int cuda_device_count();

// make_cuda_weight_upload: the WeightUpload (xtrain/backend/weight_upload.h) of a backend made by
// make_cuda_backend: two pinned host buffers of capacity_bytes, each part copied and converted on the
// device; throws Error for another backend.
std::unique_ptr<WeightUpload> make_cuda_weight_upload(Backend& backend, size_t capacity_bytes);

// cuda_alloc_stats: counters of a backend made by make_cuda_backend; throws Error for another one.
CudaAllocStats cuda_alloc_stats(const Backend& backend);

namespace cuda {
struct OpContext;
}
// cuda_op_context: the op context (stream, handles, allocator, weight mirror) of a backend made by
// make_cuda_backend, for a benchmark that calls the cuda:: ops (backend/cuda/ops.h) with what the Backend
// interface does not pass (bench_cuda_ops: a MatmulRoute); throws Error for another backend.
const cuda::OpContext& cuda_op_context(const Backend& backend);

}  // namespace xtrain
