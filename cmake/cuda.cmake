# CUDA backend + NCCL communicator (included by CMakeLists.txt when XTRAIN_CUDA=ON).
# Architectures are an explicit list, never "native", so this configures and builds on machines with
# nvcc and no GPU (NVIDIA/nccl-tests habit): 80 = A100, 90 = H100/H200. Override with
# -DCMAKE_CUDA_ARCHITECTURES=90 for a faster single-target build.
# The CUDA runtime is linked statically (CMake's default, CUDA::cudart_static) and libcuda never
# directly: the runtime loads the driver at first use, so a CUDA build starts on a GPU-less machine
# and reports "no GPU" cleanly. cuBLAS, NCCL and cuDNN are shared libraries (soname libcublas.so.13,
# libnccl.so.2, libcudnn.so.9), resolved on the machine that runs the binary.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to build for")
endif()
enable_language(CUDA)
# xtrain_backend was created before this file was included, so it did not inherit the default above.
set_target_properties(xtrain_backend PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
find_package(CUDAToolkit 12.0 REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)

# xtrain_find_prefixed(NAME HEADER LIB WHAT): a library that ships no CMake package, found by its
# header and library in NAME_ROOT (a cache path, optional), then the CUDA toolkit's directories
# (NVIDIA's installers put NCCL and cuDNN there), then the system ones (Debian/Ubuntu -dev packages,
# headers possibly under x86_64-linux-gnu). Defines the INTERFACE target xtrain_<name>; a missing
# header or library stops the configure naming WHAT and NAME_ROOT. scripts/setup.sh looks in the
# same places before it turns the CUDA build on.
function(xtrain_find_prefixed NAME HEADER LIB WHAT)
  set(${NAME}_ROOT "" CACHE PATH "${NAME} install prefix (optional)")
  set(root "${${NAME}_ROOT}")
  find_path(${NAME}_INCLUDE_DIR ${HEADER}
            HINTS ${root}/include ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include
            PATH_SUFFIXES x86_64-linux-gnu)
  find_library(${NAME}_LIBRARY ${LIB}
               HINTS ${root}/lib ${root}/lib64 ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
                     ${CUDAToolkit_LIBRARY_ROOT}/lib64)
  if(NOT ${NAME}_INCLUDE_DIR OR NOT ${NAME}_LIBRARY)
    message(FATAL_ERROR "XTRAIN_CUDA=ON needs ${WHAT}; set ${NAME}_ROOT to its prefix")
  endif()
  message(STATUS "${NAME}: ${${NAME}_LIBRARY} (headers ${${NAME}_INCLUDE_DIR})")
  string(TOLOWER "${NAME}" lower)
  add_library(xtrain_${lower} INTERFACE)
  target_include_directories(xtrain_${lower} INTERFACE ${${NAME}_INCLUDE_DIR})
  target_link_libraries(xtrain_${lower} INTERFACE ${${NAME}_LIBRARY})
  install(TARGETS xtrain_${lower} EXPORT xtrainTargets)  # the library's own absolute paths
endfunction()

xtrain_find_prefixed(NCCL nccl.h nccl "NCCL (nccl.h, libnccl.so)")
# cuDNN 9: the graph API of cudnn_graph.h (the --attention cudnn route). Linked as the shared
# libcudnn.so.9, which loads its sub-libraries itself.
xtrain_find_prefixed(CUDNN cudnn_graph.h cudnn "cuDNN 9 (cudnn_graph.h, libcudnn.so)")

target_sources(xtrain_backend PRIVATE
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/allocator.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/chunk_table.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/cuda_backend.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/event_clock.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/adamw.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/argmax.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/attention.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/attention_decode.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/convert.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/cudnn_attention.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/cudnn_graph.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/cross_entropy.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/dropout.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/encoder.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/flash_attention.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/fp8.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemm_lt.cpp
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/gelu.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/gemv.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/layernorm.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/matmul.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/muon_apply.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/muon_momentum.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/newton_schulz.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/reduce.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/residual.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/rmsnorm.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/rotary.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/swiglu.cu
  ${PROJECT_SOURCE_DIR}/src/backend/cuda/weight_upload.cu
)
target_link_libraries(xtrain_backend PUBLIC CUDA::cudart_static CUDA::cublas CUDA::cublasLt xtrain_nccl xtrain_cudnn)
# -Wall -Wextra are host-compiler flags; nvcc gets them through -Xcompiler.
target_compile_options(xtrain_backend PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/backend/registry.cpp PROPERTIES COMPILE_DEFINITIONS XTRAIN_HAVE_CUDA)
# the NCCL communicator, one layer up (src/distributed): communicators.cpp is the one file that knows of it
target_sources(xtrain_distributed PRIVATE ${PROJECT_SOURCE_DIR}/src/distributed/nccl_comm.cpp)
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/distributed/communicators.cpp PROPERTIES COMPILE_DEFINITIONS XTRAIN_HAVE_CUDA)

# Per-op timings at GPT-2 124M sizes (bench/bench_cuda_ops.cpp); not a test.
add_executable(bench_cuda_ops ${PROJECT_SOURCE_DIR}/bench/bench_cuda_ops.cpp)
target_link_libraries(bench_cuda_ops PRIVATE xtrain_model)
xtrain_internal(bench_cuda_ops)
set_target_properties(bench_cuda_ops PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
# Every cuBLASLt algorithm the heuristic offers for GPT-2 124M's GEMMs, timed (bench/gemm_algos.cpp); not a test.
add_executable(gemm_algos ${PROJECT_SOURCE_DIR}/bench/gemm_algos.cpp)
set_target_properties(gemm_algos PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
target_link_libraries(gemm_algos PRIVATE CUDA::cublasLt CUDA::cudart)
# The step's GEMMs in bf16 (the backend's own calls) against FP8 E4M3 with its casts (bench/gemm_fp8.cu); not a test.
add_executable(gemm_fp8 ${PROJECT_SOURCE_DIR}/bench/gemm_fp8.cu)
set_target_properties(gemm_fp8 PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
                                          CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_link_libraries(gemm_fp8 PRIVATE xtrain_backend)
xtrain_internal(gemm_fp8)
# CUPTI kernel timeline of a real run (bench/kernel_trace.cpp, loaded via CUDA_INJECTION64_PATH); not a test.
# Built where CUPTI is found and has the activity record it reads (CUpti_ActivityKernel10, CUDA 12.8+).
find_library(XTRAIN_CUPTI cupti HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/lib64)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${CUDAToolkit_INCLUDE_DIRS})
check_cxx_source_compiles("#include <cupti.h>
int main() { CUpti_ActivityKernel10 k{}; return int(k.start); }" XTRAIN_CUPTI_KERNEL10)
unset(CMAKE_REQUIRED_INCLUDES)
if(XTRAIN_CUPTI AND XTRAIN_CUPTI_KERNEL10)
  add_library(xtrain_kernel_trace SHARED ${PROJECT_SOURCE_DIR}/bench/kernel_trace.cpp)
  target_include_directories(xtrain_kernel_trace PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  set_target_properties(xtrain_kernel_trace PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
  target_link_libraries(xtrain_kernel_trace PRIVATE ${XTRAIN_CUPTI})
endif()
