// Token + position embedding (GPT-2 encoder; without wpe the token embedding alone, the Llama family).
// The backward scatters into dwte rows chosen by the tokens; to be deterministic without atomics,
// (token, position) pairs are stable-sorted by token (CUB radix sort) and one block sums each run of
// equal tokens in position order, which is the CPU oracle's order, so dwte matches it bit for bit.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;

// grid-stride over B*T*C; out activations of type A (float or bf16, ops.h); wpe null: no positions; the
// positions start at *pos (null: 0), read after the wait
template <typename A>
__global__ void encoder_forward_kernel(A* out, const int32_t* tokens, const float* wte, const float* wpe,
                                       int T, int C, size_t count, int* error_flag, const int32_t* pos,
                                       bool decoding) {
  griddep_begin(decoding);  // a decoding step's launch is programmatic (encoder_forward)
  const int start = pos ? *pos : 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const size_t bt = i / C;
    const int c = int(i % C), t = int(bt % T);
    const int32_t tok = tokens[bt];
    if (tok < 0) {
      atomicCAS(error_flag, kDeviceOk, kBadToken);
      continue;
    }
    float v = wte[size_t(tok) * C + c];
    if (wpe) v += wpe[size_t(start + t) * C + c];
    out[i] = from_f<A>(v);
  }
}

// dwpe (t, c) += sum over b of dout (b, t, c), b ascending. grid-stride over T*C.
template <typename A>
__global__ void encoder_backward_wpe_kernel(float* dwpe, const A* dout, int B, int T, int C) {
  const size_t count = size_t(T) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += to_f(dout[size_t(b) * count + i]);
    dwpe[i] = acc;
  }
}

// One block per sorted index i; the block that starts a run of equal tokens adds the run's dout
// rows (positions ascending) into dwte[token], one thread per channel (C <= 1024; more channels loop).
// The run's end is found by the whole block at once (the first index holding another token: a
// block-wide minimum), not by one thread walking a run that can hold ~10% of all tokens; the sum per
// channel stays sequential in position order, the CPU oracle's order, so dwte matches it bit for bit.
template <typename A>
__global__ void encoder_backward_wte_kernel(float* dwte, const A* dout, const int32_t* sorted_tok,
                                            const int32_t* sorted_pos, int N, int C, int* error_flag) {
  __shared__ int s_end;
  const int i = blockIdx.x;
  const int32_t tok = sorted_tok[i];
  if (i > 0 && sorted_tok[i - 1] == tok) return;  // not the start of a run (uniform over the block)
  if (tok < 0) {
    if (threadIdx.x == 0) atomicCAS(error_flag, kDeviceOk, kBadToken);
    return;
  }
  if (threadIdx.x == 0) s_end = N;
  __syncthreads();
  for (int base = i + 1; base < N; base += blockDim.x) {
    const int k = base + threadIdx.x;
    const bool other = k < N && sorted_tok[k] != tok;
    if (other) atomicMin(&s_end, k);  // sorted: the run ends at the first such k
    if (__syncthreads_or(other)) break;  // a barrier: the same decision in every thread, s_end complete
  }
  const int end = s_end;
  float* row = dwte + size_t(tok) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
#pragma unroll 8
    for (int j = i; j < end; ++j) acc += to_f(dout[size_t(sorted_pos[j]) * C + c]);
    row[c] = acc;
  }
}

__global__ void iota_kernel(int32_t* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = i;
}
}  // namespace

void encoder_forward(const OpContext& ctx, void* out, const int32_t* tokens, const float* wte, const float* wpe,
                     int B, int T, int C, const int32_t* pos) {
  const size_t count = size_t(B) * T * C;
  if (count == 0) return;
  with_act(ctx, [&](auto tag) {
    using A = decltype(tag);
    const bool decoding = decoding_rows(size_t(B) * T);
    launch_kernel(decoding, ctx.stream, dim3(blocks_for(count, kThreads)), dim3(kThreads), 0, encoder_forward_kernel<A>,
                  static_cast<A*>(out), tokens, wte, wpe, T, C, count, ctx.error_flag, pos, decoding);
  });
}

void encoder_backward(const OpContext& ctx, float* dwte, float* dwpe, const void* dout, const int32_t* tokens,
                      int B, int T, int C) {
  const int N = B * T;
  if (N == 0 || C == 0) return;
  if (dwpe) {  // null: no learned positions
    with_act(ctx, [&](auto tag) {
      using A = decltype(tag);
      encoder_backward_wpe_kernel<A><<<blocks_for(size_t(T) * C, kThreads), kThreads, 0, ctx.stream>>>(
          dwpe, static_cast<const A*>(dout), B, T, C);
    });
    XT_CUDA_LAUNCH_CHECK();
  }

  ScratchBuffer<int32_t> pos(*ctx.alloc, N, "encoder backward sort"), sorted_tok(*ctx.alloc, N, "encoder backward sort"),
      sorted_pos(*ctx.alloc, N, "encoder backward sort");
  iota_kernel<<<blocks_for(N, kThreads), kThreads, 0, ctx.stream>>>(pos.get(), N);
  XT_CUDA_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  XT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, sorted_tok.get(), pos.get(),
                                                sorted_pos.get(), N, 0, 32, ctx.stream));
  ScratchBuffer<char> temp(*ctx.alloc, temp_bytes, "encoder backward sort");
  XT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, tokens, sorted_tok.get(), pos.get(),
                                                sorted_pos.get(), N, 0, 32, ctx.stream));
  constexpr int kMaxWteThreads = 1024;  // one thread per channel up to C = 1024
  const int threads = C < kMaxWteThreads ? ((C + kWarp - 1) / kWarp) * kWarp : kMaxWteThreads;
  with_act(ctx, [&](auto tag) {
    using A = decltype(tag);
    encoder_backward_wte_kernel<A><<<N, threads, 0, ctx.stream>>>(dwte, static_cast<const A*>(dout), sorted_tok.get(),
                                                                  sorted_pos.get(), N, C, ctx.error_flag);
  });
  XT_CUDA_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
