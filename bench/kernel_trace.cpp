// A kernel timeline of a real run, for machines without Nsight Systems: a CUDA injection library
// (loaded by the CUDA driver through CUDA_INJECTION64_PATH, CUDA driver docs "CUDA_INJECTION64_PATH")
// that records every kernel, memcpy and memset through the CUPTI Activity API and, at exit, writes one CSV
// line per record to $XTRAIN_KERNEL_TRACE: kind,start_ns,end_ns,stream,name (GPU timestamps, ns).
// Unlike Nsight Compute the kernels run as in the real run (concurrent, at the clocks they get), so the
// gaps between kernels and the effect of sustained power on kernel times show. bench/kernel_gaps.py reads it.
//   CUDA_INJECTION64_PATH=build-gpu/libxtrain_kernel_trace.so XTRAIN_KERNEL_TRACE=trace.csv \
//     mpirun -np 1 build-gpu/xtrain_mpi --device cuda ...
// With several processes, give each its own file (e.g. a per-rank wrapper script); a process that recorded
// nothing writes nothing. Recording costs little (records are buffered on the device and copied out in 8 MiB buffers).
#include <cupti.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {
constexpr size_t kBufferBytes = 8u << 20;
std::mutex g_mu;
std::vector<std::string> g_lines;  // guarded by g_mu

#define XT_CUPTI(call)                                                                          \
  do {                                                                                          \
    CUptiResult r_ = (call);                                                                    \
    if (r_ != CUPTI_SUCCESS) {                                                                  \
      const char* s_ = nullptr;                                                                 \
      cuptiGetResultString(r_, &s_);                                                            \
      std::fprintf(stderr, "kernel_trace: %s failed: %s\n", #call, s_ ? s_ : "?");              \
      return;                                                                                   \
    }                                                                                           \
  } while (0)

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<std::string> lines;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    char line[640];
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        std::snprintf(line, sizeof line, "kernel,%llu,%llu,%u,\"%.500s\"", (unsigned long long)k->start,
                      (unsigned long long)k->end, k->streamId, k->name ? k->name : "?");
        lines.emplace_back(line);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        std::snprintf(line, sizeof line, "memcpy,%llu,%llu,%u,\"kind %d bytes %llu\"", (unsigned long long)m->start,
                      (unsigned long long)m->end, m->streamId, int(m->copyKind), (unsigned long long)m->bytes);
        lines.emplace_back(line);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        std::snprintf(line, sizeof line, "memset,%llu,%llu,%u,\"bytes %llu\"", (unsigned long long)m->start,
                      (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes);
        lines.emplace_back(line);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& l : lines) g_lines.push_back(std::move(l));
}

void write_trace() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("XTRAIN_KERNEL_TRACE");
  if (path == nullptr || *path == '\0') return;
  {  // a process that ran no GPU work (e.g. mpirun itself, where its CUDA support loaded the driver) writes
     // nothing, so it cannot replace the trace of the process that did
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_lines.empty()) return;
  }
  const std::string tmp = std::string(path) + ".tmp." + std::to_string(getpid());  // no two writers share one
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", tmp.c_str());
    return;
  }
  std::fprintf(f, "kind,start_ns,end_ns,stream,name\n");
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto& l : g_lines) std::fprintf(f, "%s\n", l.c_str());
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path) != 0)
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
}

void start() {
  XT_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  XT_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  XT_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  XT_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  std::atexit(write_trace);
}
}  // namespace

// Called by the CUDA driver at initialization when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  start();
  return 1;
}
