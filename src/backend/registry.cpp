// The one file that knows which backends were compiled in (ggml-backend style); the communicators that
// go with them are made one layer up (src/distributed/communicators.cpp).
// XTRAIN_HAVE_CUDA is defined for this file only, by cmake/cuda.cmake.
#include <xtrain/backend/registry.h>

#include <memory>
#include <string>

#include <xtrain/backend/backend.h>
#include <xtrain/backend/weight_upload.h>
#include "backend/cpu/cpu_backend.h"
#include <xtrain/core/error.h>
#ifdef XTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace xtrain {

std::string compiled_backends() {
#ifdef XTRAIN_HAVE_CUDA
  return "cpu, cuda";
#else
  return "cpu";
#endif
}

Device parse_device(const std::string& s) {
  if (s == "auto") return Device::automatic;
  if (s == "cpu") return Device::cpu;
  if (s == "cuda") return Device::cuda;
  throw UsageError("--device must be auto, cpu or cuda (got '" + s + "')");
}

DType parse_dtype(const std::string& s) {
  if (s == "auto") return DType::automatic;
  if (s == "fp32") return DType::fp32;
  if (s == "bf16") return DType::bf16;
  throw UsageError("--dtype must be auto, fp32 or bf16 (got '" + s + "')");
}

Attention parse_attention(const std::string& s) {
  if (s == "auto") return Attention::automatic;
  if (s == "flash") return Attention::flash;
  if (s == "gemm") return Attention::gemm;
  if (s == "cudnn") return Attention::cudnn;
  throw UsageError("--attention must be auto, flash, gemm or cudnn (got '" + s + "')");
}

WeightCopy parse_weight_copy(const std::string& s) {
  if (s == "persistent") return WeightCopy::persistent;
  if (s == "per-use") return WeightCopy::per_use;
  throw UsageError("--weight-copy must be persistent or per-use (got '" + s + "')");
}

int visible_gpu_count() {
#ifdef XTRAIN_HAVE_CUDA
  return cuda_device_count();
#else
  return 0;
#endif
}

std::unique_ptr<WeightUpload> make_weight_upload(Backend& be) {
#ifdef XTRAIN_HAVE_CUDA
  if (be.kind() == Device::cuda) return make_cuda_weight_upload(be, kWeightUploadBytes);
#endif
  XT_CHECK(be.kind() == Device::cpu, "make_weight_upload: no weight upload for backend '" << be.name() << "'");
  return make_host_weight_upload(kWeightUploadBytes);
}

const char* to_string(Device d) { return d == Device::cpu ? "cpu" : d == Device::cuda ? "cuda" : "auto"; }
const char* to_string(DType t) { return t == DType::fp32 ? "fp32" : t == DType::bf16 ? "bf16" : "auto"; }
const char* to_string(Attention a) {
  return a == Attention::flash ? "flash" : a == Attention::gemm ? "gemm" : a == Attention::cudnn ? "cudnn" : "auto";
}
const char* to_string(WeightCopy w) { return w == WeightCopy::per_use ? "per-use" : "persistent"; }

std::unique_ptr<Backend> make_backend(const BackendOptions& in) {
  BackendOptions opts = in;
#ifdef XTRAIN_HAVE_CUDA
  if (opts.device == Device::automatic) opts.device = cuda_device_available() ? Device::cuda : Device::cpu;
#else
  if (opts.device == Device::automatic) opts.device = Device::cpu;
  if (opts.device == Device::cuda)
    throw UsageError("--device cuda: this xtrain was built without CUDA (configure with -DXTRAIN_CUDA=ON)");
#endif
  // bf16 mixed precision is the fast default on GPUs; the CPU backend trains in fp32.
  if (opts.dtype == DType::automatic) opts.dtype = opts.device == Device::cuda ? DType::bf16 : DType::fp32;
  // Only bf16 matmuls multiply copies of the weights; asking for another kind of copy elsewhere is a mistake
  // worth naming (as --attention on the CPU backend), not a silent no-op.
  if (opts.weight_copy == WeightCopy::per_use && !(opts.device == Device::cuda && opts.dtype == DType::bf16))
    throw UsageError(opts.device == Device::cuda
                         ? "--weight-copy per-use needs --dtype bf16 on the CUDA backend (--device cuda); fp32 matmuls "
                           "read the fp32 weights and keep no copy"
                         : "--weight-copy per-use needs --dtype bf16 on the CUDA backend (--device cuda); the CPU "
                           "backend trains in fp32 and keeps no copy of the weights");
  if (opts.device == Device::cpu) {
    if (opts.dtype != DType::fp32)
      throw UsageError(std::string("--dtype ") + to_string(opts.dtype) +
                       " needs the CUDA backend (--device cuda); the CPU backend trains in fp32");
    if (opts.attention != Attention::automatic)
      throw UsageError(std::string("--attention ") + to_string(opts.attention) +
                       " needs the CUDA backend (--device cuda); the CPU backend has one attention route");
    return make_cpu_backend(opts.rows);
  }
#ifdef XTRAIN_HAVE_CUDA
  return make_cuda_backend(opts);
#else
  throw Error(std::string("no backend for device ") + to_string(opts.device));  // unreachable: cuda refused above
#endif
}

}  // namespace xtrain
