// The CPU backend: a full Backend over host memory, and the oracle the other backends are tested
// against. Its ops are the float instantiations of the templates in src/backend/cpu/ops.h.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace xtrain {

// How the CPU backend's matmul_forward calls BLAS. blas: one GEMM of all N rows (training, serving).
// per_row: one GEMM per row, so a row's bits do not depend on how many rows are multiplied with it
// (OpenBLAS picks its kernel, hence the summation order, by the row count: a one-row decode step then
// differs from a T-row forward in the last bits). For tests that compare the two bit for bit; slower.
enum class CpuGemm { blas, per_row };

// make_cpu_backend: the CPU backend. Sets OpenBLAS to one thread (one MPI rank per core).
std::unique_ptr<Backend> make_cpu_backend(CpuGemm gemm = CpuGemm::blas);

}  // namespace xtrain
