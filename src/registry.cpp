// The one file that knows which backends and communicators were compiled in (ggml-backend style).
// XTRAIN_HAVE_CUDA is defined for this file only, by cmake/cuda.cmake.
#include <memory>
#include <string>

#include "cpu/cpu_backend.h"
#include "xtrain/backend.h"
#include "xtrain/comm.h"
#include "xtrain/error.h"
#include "xtrain/mpi_context.h"
#ifdef XTRAIN_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace xtrain {

std::string compiled_backends() {
#ifdef XTRAIN_HAVE_CUDA
  return "cpu, cuda";
#else
  return "cpu";
#endif
}

namespace {
std::unique_ptr<Backend> cpu_backend(const BackendOptions& opts) {
  if (opts.dtype != "fp32")
    throw UsageError("--dtype " + opts.dtype + " needs the CUDA backend (--device cuda); the CPU backend trains in fp32");
  return make_cpu_backend();
}
}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& in) {
  BackendOptions opts = in;
  if (opts.dtype != "auto" && opts.dtype != "fp32" && opts.dtype != "bf16")
    throw UsageError("--dtype must be auto, fp32 or bf16 (got '" + opts.dtype + "')");
  std::string device = opts.device;
#ifdef XTRAIN_HAVE_CUDA
  if (device == "auto") device = cuda_device_available() ? "cuda" : "cpu";
#else
  if (device == "auto") device = "cpu";
  if (device == "cuda")
    throw UsageError("--device cuda: this xtrain was built without CUDA (configure with -DXTRAIN_CUDA=ON)");
#endif
  // bf16 mixed precision is the fast default on GPUs; the CPU backend trains in fp32.
  if (opts.dtype == "auto") opts.dtype = device == "cuda" ? "bf16" : "fp32";
  if (device == "cpu") return cpu_backend(opts);
#ifdef XTRAIN_HAVE_CUDA
  if (device == "cuda") return make_cuda_backend(opts);
#endif
  throw UsageError("--device must be auto, cpu or cuda (got '" + opts.device + "')");
}

std::unique_ptr<Communicator> make_communicator(MpiContext& mpi, Backend& backend, double comm_timeout_s) {
#ifdef XTRAIN_HAVE_CUDA
  if (backend.name() == "cuda") return make_nccl_communicator(mpi, backend, comm_timeout_s);
#endif
  XT_CHECK(backend.name() == "cpu", "no communicator for backend " << backend.name());
  return make_mpi_communicator(mpi, comm_timeout_s);
}

}  // namespace xtrain
