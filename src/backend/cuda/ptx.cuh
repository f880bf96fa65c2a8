// Inline-PTX wrappers for the tensor-core and async-copy instructions the flash attention kernels use
// (sm_80+), one instruction each, named after the PTX ISA sections that define them: "Warp-level
// matrix load instruction: ldmatrix", "Matrix Fragments for mma.m16n8k16", "cp.async"; and the programmatic
// dependent launch pair of "griddepcontrol" (sm_90+) that the decoding step's kernels use (launch.cuh), and the
// L2 prefetch ("prefetch") attention_decode issues before its wait.
// (FlashAttention keeps the same wrappers apart from its kernels, through CUTLASS's cute/arch.)
#pragma once

#include <cstdint>

namespace xtrain::cuda::ptx {

// smem_addr: the 32-bit shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix_x4: four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of
// matrix l / 8 (16-byte aligned), and receives in r[m] its fragment of matrix m (two b16 values).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}
// ldmatrix_x4_trans: as ldmatrix_x4, each matrix transposed on the way.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// mma_bf16_16816: c (16x8, fp32) += a (16x16, bf16, row-major fragments a[0..3]) b (16x8, bf16,
// column-major fragments b0, b1); every operand in the warp-distributed mma.m16n8k16 layout.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp_async_16: an asynchronous 16-byte copy global -> shared (both 16-byte aligned) that reads
// src_bytes (0 or 16) from src and zero-fills the rest; .cg: cached in L2 only.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
// cp_async_commit: closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// cp_async_wait<n>: this thread's copies are complete except for the n most recent committed groups.
template <int n>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

// griddepcontrol_launch_dependents: lets the next kernel of the stream, launched with programmatic stream
// serialization, start its blocks once every block of this grid has run it (or exited). A no-op below sm_90
// and for a next kernel launched without the attribute.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// griddepcontrol_wait: waits until the grids this one depends on have completed and their memory is visible.
// A kernel launched with programmatic stream serialization must run it before it reads anything they write
// (or writes anything they read). A no-op below sm_90 and for a launch without the attribute.
__device__ __forceinline__ void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// prefetch_l2: brings the line holding the global address p into L2. A hint: nothing is read into a register, and
// a line another kernel is writing is still read coherently later (L2 is where global memory is coherent).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(__cvta_generic_to_global(p)));
}

}  // namespace xtrain::cuda::ptx
