// The CPU backend: a full Backend over host memory, and the oracle the other backends are tested
// against. Its ops are the float instantiations of the templates in src/backend/cpu/ops.h, or their
// vectorized float kernels with the same arithmetic (vec_ops.h: cross-entropy, GELU, attention, AdamW).
#pragma once

#include <memory>

#include <xtrain/backend/backend.h>

namespace xtrain {

// make_cpu_backend: the CPU backend. Sets OpenBLAS to one thread (one MPI rank per core). rows (backend.h):
// fastest = one BLAS GEMM of all N rows; per_row = one GEMM per row (attention is row by row either way:
// the same double arithmetic as attention_decode, attention.h).
std::unique_ptr<Backend> make_cpu_backend(RowKernels rows = RowKernels::fastest);

}  // namespace xtrain
