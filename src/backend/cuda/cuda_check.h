// Error checks for CUDA runtime, cuBLAS and NCCL calls and for kernel launches. Each throws
// xtrain::Error with file:line, the failing expression and the library's own message
// (flashlight / tiny-cuda-nn style). Kept out of src/core/error.h so that CPU code never
// sees GPU headers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include <xtrain/core/error.h>

// XT_CUDA_CHECK(call): call returns cudaError_t; throws with cudaGetErrorName/String on failure.
#define XT_CUDA_CHECK(call)                                         \
  XT_STATUS_CHECK(call, xt_rc_ == cudaSuccess,                      \
                  std::string(cudaGetErrorName(xt_rc_)) + ": " + cudaGetErrorString(xt_rc_))

// XT_CUDA_LAUNCH_CHECK(): after every kernel launch; catches bad launch configurations at once
// (errors raised while the kernel runs surface at the next synchronizing call).
#define XT_CUDA_LAUNCH_CHECK() XT_CUDA_CHECK(cudaGetLastError())

// XT_CUBLAS_CHECK(call): call returns cublasStatus_t; throws with cublasGetStatusString.
#define XT_CUBLAS_CHECK(call) \
  XT_STATUS_CHECK(call, xt_rc_ == CUBLAS_STATUS_SUCCESS, cublasGetStatusString(xt_rc_))

// XT_NCCL_CHECK(call): call returns ncclResult_t; ncclInProgress counts as success (non-blocking
// communicators report completion through ncclCommGetAsyncError, see comm_nccl.cpp). Throws with
// ncclGetErrorString.
#define XT_NCCL_CHECK(call) \
  XT_STATUS_CHECK(call, xt_rc_ == ncclSuccess || xt_rc_ == ncclInProgress, ncclGetErrorString(xt_rc_))
