// Programmatic dependent launch (CUDA programming guide, "Programmatic Dependent Launch and Synchronization";
// compute capability 9.0+) for the decoding step's latency-bound kernels. A kernel launched so may start while
// the kernel before it in the stream still runs, once every block of that one has run
// griddepcontrol_launch_dependents (ptx.cuh) or exited; it must run griddepcontrol_wait before it reads or writes
// anything the earlier kernels write or read. At batch 1 a kernel's own work is a few microseconds of latency,
// about what a launch after its predecessor's end costs again: launched early, a kernel's scheduling, and what it
// may do before its wait (the GEMVs' weight loads, attention_decode's cache prefetches), overlap the kernel
// before. Older devices, and kernels launched plainly, treat both instructions as no-ops; a kernel compiled for an
// older architecture (no instructions to wait with) is launched plainly on any device.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/ptx.cuh"

namespace xtrain::cuda {

// takes_programmatic_launch: whether `kernel` may be launched programmatically on the current device: the device
// takes it (compute capability 9.0+) and the kernel's code there was compiled from PTX of compute capability 9.0 or
// later (cudaFuncAttributes::ptxVersion), the only code in which ptx.cuh's griddepcontrol instructions exist: a
// build for an older architecture only, JIT-compiled on Hopper, has them compiled out, and such a kernel launched
// early would not wait for the one before it. The device and the kernel asked once per (kernel, device), then a
// lookup.
inline bool takes_programmatic_launch(const void* kernel) {
  int device = 0;
  XT_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int major = 0;
  XT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attr{};
  XT_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  return known[key] = major >= 9 && attr.ptxVersion >= 90;
}

// launch_kernel: kernel<<<grid, block, smem, stream>>>(args...), launched programmatically where `programmatic`,
// the device takes it and the kernel was compiled with the griddepcontrol instructions, else plainly. Throws Error
// on a bad launch.
template <typename... Params, typename... Args>
void launch_kernel(bool programmatic, cudaStream_t stream, dim3 grid, dim3 block, size_t smem,
                   void (*kernel)(Params...), Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cudaLaunchAttribute pdl[1] = {};
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  const bool early = programmatic && takes_programmatic_launch(reinterpret_cast<const void*>(kernel));
  cfg.attrs = pdl, cfg.numAttrs = early ? 1 : 0;
  XT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// decoding_rows: whether an op over `rows` rows is a decoding step's (kGemvMaxRows, gemv.h: the rows that take the
// GEMV route), so that its small kernels are launched programmatically; training-sized launches stay plain (a
// kernel launched early holds SM slots that the many blocks of the kernel before it would use).
inline bool decoding_rows(long long rows) { return rows <= kGemvMaxRows; }

// griddep_begin: the top of a kernel that may be launched programmatically and does nothing before its wait:
// with `trigger` (the kernel's launch is a decoding step's, decoding_rows) lets the next kernel start, then waits
// for the earlier ones (a plain launch's semantics). A training-sized launch never triggers: a library kernel
// after it that is launched programmatically would otherwise take SM slots its later blocks need.
__device__ __forceinline__ void griddep_begin(bool trigger) {
  if (trigger) ptx::griddepcontrol_launch_dependents();
  ptx::griddepcontrol_wait();
}

}  // namespace xtrain::cuda
