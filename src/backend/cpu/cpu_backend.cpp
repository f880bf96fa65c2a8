// CpuBackend: Backend over aligned host memory; every op forwards to the float instantiation of the
// reference templates in ops.h / attention.h, or, for the cross-entropy, GELU, attention and AdamW, to their
// vectorized float kernels (vec_ops.h: the references' arithmetic). Copies are memcpy; synchronize is a no-op.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cctype>
#include <mutex>
#include <unordered_map>
#include <sstream>

#include "backend/cpu/attention_decode.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/ops_llama.h"
#include "backend/cpu/vec_ops.h"
#include "backend/greedy.h"
#include <xtrain/core/error.h>

namespace xtrain {
namespace {

// 64 B: one cache line and the widest SIMD vector (AVX-512), so BLAS gets aligned operands.
constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's transparent huge page

// "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." -> "OpenBLAS 0.3.21": the first two words of the build config.
std::string openblas_version() {
  std::istringstream config(openblas_get_config());
  std::string name, version;
  config >> name >> version;
  return name + " " + version;
}

}  // namespace
}  // namespace xtrain

// OpenBLAS built with DYNAMIC_ARCH (Debian's, most distributions') exports these two: the kernel table chosen
// at load from OPENBLAS_CORETYPE or the CPU's model, and its reset. Weak, so a build without them links and
// keeps the library's own choice.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace xtrain {
namespace {

// OpenBLAS picks its kernels when it loads, from the CPU's family and model number. A release older than the
// CPU does not know the model and falls back to its generic Prescott (SSE3) kernels: Debian 12's 0.3.21 on an
// Intel Xeon of family 6, model 207 (Emerald Rapids, AVX-512) ran the default model's GEMMs at ~30 GFLOP/s
// instead of ~150 with its SkylakeX kernels (`build/bench_cpu_ops 8 3`, bench/results/cpu_2core_2026-12.md).
// Where the library fell back so although the CPU has AVX2 and FMA, and the user chose no kernels
// (OPENBLAS_CORETYPE unset; any value, even "Prescott", keeps the library's choice), the kernels of the CPU's
// vector width are taken, as OPENBLAS_CORETYPE=SkylakeX (AVX-512 F, CD, BW, DQ, VL) or =Haswell would give them.
// It runs when the program loads (a constructor: after OpenBLAS's own, before main and before any thread of the
// program can be running BLAS, so no call sees the kernel table change under it; a program that links xtrain as
// a library gets the same kernels for its own BLAS calls, docs/embedding.md). A no-op elsewhere (no DYNAMIC_ARCH
// build, another CPU, another library choice).
__attribute__((constructor)) void select_blas_kernels() {
#if defined(__x86_64__)
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's choice stands
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (core != "prescott") return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  ::setenv("OPENBLAS_CORETYPE", avx512 ? "SkylakeX" : "Haswell", 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  ::unsetenv("OPENBLAS_CORETYPE");  // the environment as the user left it (child processes detect for themselves)
#endif
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(RowKernels rows) : rows_(rows) {
    // One BLAS thread: xtrain's parallelism is MPI ranks, one per core; BLAS threads on top of them
    // would oversubscribe the cores (ranks x threads runnable threads) and slow every rank down.
    openblas_set_num_threads(1);
  }

  Device kind() const override { return Device::cpu; }
  std::string device_name() const override {
    const int threads = openblas_get_num_threads();
    std::ostringstream os;
    os << "cpu (" << openblas_version() << " " << openblas_get_corename() << ", " << threads
       << (threads == 1 ? " thread)" : " threads)");
    return os.str();
  }

  // ---- memory ----
  void* alloc(size_t bytes) override {
    // aligned_alloc needs a size that is a multiple of the alignment; 0 bytes still gets a unique block.
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    size_t block = rounded ? rounded : kAlignment;
    // A block of 2 MiB or more (parameters, gradients, AdamW moments, logits, a KV cache) in transparent
    // huge pages where the kernel gives them on request (THP "madvise" mode): its first touch takes one
    // fault per 2 MiB instead of 512, so the training run's first step and a model read's one conversion pay
    // far less (figures: bench/results/coldstart_cpu_2026-12.md), at the price of zeroing a sparsely used
    // block whole (a decoder's KV cache of maxT rows at its first prompt). Bits computed are the same.
    const bool huge = block >= kHugePage;
    if (huge) block = (block + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(huge ? kHugePage : kAlignment, block);
    if (p && huge) ::madvise(p, block, MADV_HUGEPAGE);  // a hint: where refused, 4 KiB pages as before
    XT_CHECK(p != nullptr, "out of host memory allocating " << bytes << " bytes");
    std::lock_guard<std::mutex> lock(blocks_mutex_);
    blocks_.emplace(p, block);
    held_ += block;
    peak_ = std::max(peak_, held_);
    return p;
  }
  void free(void* ptr) noexcept override {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(blocks_mutex_);
      const auto it = blocks_.find(ptr);
      if (it != blocks_.end()) held_ -= it->second, blocks_.erase(it);
    }
    std::free(ptr);
  }
  // The blocks are counted for the memory report only (memory_in_use_bytes stays 0: the step line's
  // mem figures are device memory).
  BackendMemory memory_accounting() const override {
    std::lock_guard<std::mutex> lock(blocks_mutex_);
    BackendMemory m;
    m.caller_bytes = m.held_bytes = held_;
    m.peak_bytes = peak_;
    return m;
  }
  size_t allocation_bytes(const void* ptr) const override {
    std::lock_guard<std::mutex> lock(blocks_mutex_);
    const auto it = blocks_.find(const_cast<void*>(ptr));
    return it == blocks_.end() ? 0 : it->second;
  }
  size_t available_memory_bytes() const override {
    // MemAvailable: the kernel's estimate of memory available without swapping (proc(5)).
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    unsigned long long kib = 0;
    char line[256];
    bool found = false;
    while (f && !found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    if (f) std::fclose(f);
    if (found) return size_t(kib) * 1024;
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
  }
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override {
    if (bytes) std::memcpy(dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(host_dst, src, bytes);
  }
  void zero(void* ptr, size_t bytes) override {
    if (bytes) std::memset(ptr, 0, bytes);
  }
  void synchronize() override {}

  // ---- ops: float instantiations of the reference templates; activations are fp32 here
  // (activation_bytes() == 4), so every `void*` activation argument is a float array ----
  static float* F(void* p) { return static_cast<float*>(p); }
  static const float* F(const void* p) { return static_cast<const float*>(p); }
  // Grad::assign: the reference ops accumulate, so the buffer is zeroed first (count floats; p may be null
  // where the op has no such output)
  static void clear_for(Grad mode, void* p, size_t count) {
    if (mode == Grad::assign && p && count) std::memset(p, 0, count * sizeof(float));
  }
  using Backend::attention_backward;  // the accumulating overloads of the base class
  using Backend::gelu_backward;
  using Backend::layernorm_backward;
  using Backend::matmul_backward;
  using Backend::rmsnorm_backward;

  void encoder_forward(void* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                       int C, const int32_t* pos) override {
    const int p = pos ? *pos : 0;
    XT_CHECK(p >= 0, "encoder_forward: negative position " << p);
    cpu::encoder_forward(F(out), tokens, wte, wpe ? wpe + size_t(p) * C : nullptr, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, int B, int T,
                        int C) override {
    cpu::encoder_backward(dwte, dwpe, F(dout), tokens, B, T, C);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const float* w,
                         const float* b, int N, int C) override {
    cpu::layernorm_forward(F(out), mean, rstd, F(inp), w, b, N, C);
  }
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp,
                          const float* w, const float* mean, const float* rstd, int N, int C, Grad dw_mode) override {
    clear_for(dw_mode, dw, size_t(C));  // the reference sums row by row into dw, db
    clear_for(dw_mode, db, size_t(C));
    cpu::layernorm_backward(F(dinp), dw, db, F(dout), F(inp), w, mean, rstd, N, C);
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const float* w, int N, int C, float eps) override {
    cpu::rmsnorm_forward(F(out), rstd, F(inp), w, N, C, eps);
  }
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const float* w, const float* rstd,
                        int N, int C, Grad dw_mode) override {
    clear_for(dw_mode, dw, size_t(C));  // the reference sums row by row into dw
    cpu::rmsnorm_backward(F(dinp), dw, F(dout), F(inp), w, rstd, N, C);
  }
  void rotary_forward(void* qkv, const int32_t* pos, int B, int T, int NH, int KVH, int HS, float theta) override {
    cpu::rotate_heads(F(qkv), B, T, pos ? *pos : 0, NH, KVH, HS, theta, +1);
  }
  void rotary_backward(void* dqkv, int B, int T, int NH, int KVH, int HS, float theta) override {
    cpu::rotate_heads(F(dqkv), B, T, 0, NH, KVH, HS, theta, -1);
  }
  void swiglu_forward(void* out, const void* inp, int N, int Fd) override { cpu::swiglu_forward(F(out), F(inp), N, Fd); }
  void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int Fd) override {
    cpu::swiglu_backward(F(dinp), F(dout), F(inp), N, Fd);
  }
  void matmul_forward(void* out, const void* inp, const float* w, const float* bias, int N, int IC,
                      int OC) override {
    if (rows_ == RowKernels::fastest) return cpu::matmul_forward(F(out), F(inp), w, bias, N, IC, OC);
    for (int n = 0; n < N; ++n)  // RowKernels::per_row: one GEMM per row, whatever N
      cpu::matmul_forward(F(out) + size_t(n) * OC, F(inp) + size_t(n) * IC, w, bias, 1, IC, OC);
  }
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp,
                       const float* w, int N, int IC, int OC, Grad dinp_mode, Grad dw_mode) override {
    cpu::matmul_backward(F(dinp), dw, dbias, F(dout), F(inp), w, N, IC, OC, dinp_mode == Grad::accumulate,
                         dw_mode == Grad::accumulate);
  }
  void attention_forward(void* out, float* att, const void* qkv, int B, int T, int NH, int KVH,
                         int HS) override {
    cpu::vec::attention_forward(F(out), att, F(qkv), B, T, NH, KVH, HS);
  }
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* /*out: att has the probabilities*/,
                          const float* att, int B, int T, int NH, int KVH, int HS, Grad dqkv_mode) override {
    clear_for(dqkv_mode, dqkv, qkv_layout(B, T, NH, KVH, HS).qkv_count());
    cpu::vec::attention_backward(F(dqkv), F(dout), F(qkv), att, B, T, NH, KVH, HS);
  }
  void attention_decode(void* out, void* kcache, void* vcache, const void* qkv, int B, int Tn, const int32_t* pos,
                        int maxT, int NH, int KVH, int HS) override {
    cpu::attention_decode(F(out), F(kcache), F(vcache), F(qkv), B, Tn, *pos, maxT, NH, KVH, HS);  // host memory
  }
  void gelu_forward(void* out, const void* inp, size_t count) override {
    cpu::vec::gelu_forward(F(out), F(inp), count);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, size_t count, Grad dinp_mode) override {
    cpu::vec::gelu_backward(F(dinp), F(inp), F(dout), count, dinp_mode == Grad::assign);
  }
  void residual_forward(void* out, const void* a, const void* b, size_t count) override {
    cpu::residual_forward(F(out), F(a), F(b), count);
  }
  void add_inplace(void* dst, const void* src, size_t count) override { cpu::add_inplace(F(dst), F(src), count); }
  void dropout_apply(void* x, const uint64_t* seq_keys, int B, size_t per_seq, float p) override {
    cpu::dropout_apply(F(x), seq_keys, B, per_seq, p);
  }
  void cross_entropy_forward_backward(float* losses, void* dlogits, const void* logits,
                                      const int32_t* targets, float dloss, int N, int V, int Vp) override {
    cpu::vec::cross_entropy_forward_backward(losses, F(dlogits), F(logits), targets, dloss, N, V, Vp);
  }
  void argmax_rows(int32_t* out, const void* logits, int rows, int V, int ld, int32_t* tokens) override {
    check_argmax_rows_args(rows, V, ld);
    for (int r = 0; r < rows; ++r) {
      out[r] = argmax_code(F(logits) + size_t(r) * ld, V);  // the rule's home
      if (tokens) tokens[r] = argmax_code_id(out[r]);
    }
  }
  double sum(const float* x, size_t count) override { return cpu::sum(x, count); }
  double sum_squares(const float* x, size_t count) override { return cpu::vec::sum_squares(x, count); }
  void adamw_update(float* param, const float* grad, float* m, float* v, const std::vector<ParamSpan>& spans,
                    float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int t) override {
    check_adamw_args(spans, t);
    for (const ParamSpan& s : spans) {
      const size_t o = s.offset;
      cpu::vec::adamw_update(param + o, grad + o, m + o, v + o, s.count, lr, beta1, beta2, eps,
                        s.decay ? weight_decay : 0.0f, grad_scale, t);
    }
  }
  void muon_momentum(float* buf, float* out, const float* grad, const std::vector<MuonSpan>& spans, float momentum,
                     bool nesterov, float grad_scale) override {
    check_muon_spans(spans);
    for (const MuonSpan& s : spans)
      cpu::muon_momentum(buf + s.state_at, out + s.update_at, grad + s.param_at, s.count, momentum, nesterov,
                         grad_scale);
  }
  void newton_schulz(float* x, int batch, int rows, int cols, int steps, float eps) override {
    check_newton_schulz_args(batch, rows, cols, steps);
    const size_t r = std::min(rows, cols), c = std::max(rows, cols);
    std::vector<float> work(2 * r * c + 2 * r * r);
    for (int b = 0; b < batch; ++b)
      cpu::newton_schulz(x + size_t(b) * rows * cols, rows, cols, steps, eps, work.data());
  }
  void muon_apply(float* param, const float* update, const std::vector<MuonSpan>& spans, float decay,
                  float lr) override {
    check_muon_spans(spans);
    for (const MuonSpan& s : spans)
      cpu::muon_apply(param + s.param_at, update + s.update_at, s.count, decay,
                      static_cast<float>(static_cast<double>(lr) * s.lr_ratio));
  }

 private:
  RowKernels rows_;
  mutable std::mutex blocks_mutex_;  // alloc and free may come from several threads
  std::unordered_map<void*, size_t> blocks_;  // block -> bytes held (the request rounded to kAlignment)
  size_t held_ = 0, peak_ = 0;               // bytes held now, and the most at once
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(RowKernels rows) { return std::make_unique<CpuBackend>(rows); }

}  // namespace xtrain
