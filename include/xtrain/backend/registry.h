// The registry: the one file (backend/registry.cpp) that knows which backends were compiled in. It
// makes the backend a run asks for; the communicator that matches it comes from
// <xtrain/distributed/communicators.h>, a layer up, so programs that only compute (xtrain_generate) link no MPI.
#pragma once

#include <memory>
#include <string>

#include <xtrain/backend/backend.h>

namespace xtrain {

// make_backend: creates the backend for opts.device. automatic picks cuda when compiled in and a GPU
// is visible, else cpu. Throws UsageError for a device not compiled in and for bf16 on the CPU
// backend; Error when the device cannot be used (e.g. more ranks on
// the node than visible GPUs).
std::unique_ptr<Backend> make_backend(const BackendOptions& opts);

// visible_gpu_count: GPUs the CUDA runtime sees (0 in a build without CUDA, or without GPU/driver).
int visible_gpu_count();

// compiled_backends: e.g. "cpu" or "cpu, cuda" (for --help and the start banner).
std::string compiled_backends();

}  // namespace xtrain
