// The CUDA caching allocator's counters, shared by the allocator (allocator.h) and the backend's entry
// points (cuda_backend.h), so neither header needs the other. No CUDA header.
#pragma once

#include <cstddef>

namespace xtrain {

// CudaAllocStats: the caching allocator's counters (tests assert no cudaMalloc after warm-up).
struct CudaAllocStats {
  size_t cuda_malloc_calls = 0;  // cudaMalloc calls since the backend was created
  size_t cuda_free_calls = 0;    // cudaFree calls since the backend was created
  size_t bytes_in_use = 0;       // handed out and not yet freed
  size_t bytes_reserved = 0;     // held from the device (in use + cached)
  size_t peak_bytes_reserved = 0; // the most bytes_reserved has been
};

}  // namespace xtrain
