// The CPU backend: a full Backend over host memory, and the oracle the other backends are tested
// against. Its ops are the float instantiations of the templates in src/backend/cpu/ops.h.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace xtrain {

// make_cpu_backend: the CPU backend. Sets OpenBLAS to one thread (one MPI rank per core).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace xtrain
