// The FP8 casts of --fp8's matmuls (matmul.cu): tensor-wise current scaling (ops.h, Fp8Weight), one amax
// reduction over the tensor, then one pass that writes the scaled values in the row-major layout, the
// transposed one, or both (64x64 tiles through shared memory), since cuBLASLt's FP8 GEMMs on Hopper take both
// operands contiguous along the reduction: the forward reads x as stored, dinp the weights transposed, dw the
// output gradient and the input transposed.
#include <cuda_fp8.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kTile = 64;                // a cast block's tile: kTile x kTile elements
constexpr unsigned kAmaxMaxBlocks = 1024;  // enough to fill the GPU; each block loops
constexpr float kE4M3Max = 448.0f;       // OCP 8-bit floating point specification (2023), E4M3 and E5M2
constexpr float kE5M2Max = 57344.0f;
constexpr float kMinAmax = 1e-12f;       // the smallest amax a scale is taken from (torchao's EPS)

// load8: 8 consecutive elements of x from index i (16-byte aligned: i % 8 == 0) as floats
__device__ inline void load8(const __nv_bfloat16* x, size_t i, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(x + i);
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(p[k]);
    v[2 * k] = f.x, v[2 * k + 1] = f.y;
  }
}
__device__ inline void load8(const float* x, size_t i, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(x + i), b = *reinterpret_cast<const float4*>(x + i + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// store8: 8 values, each rounded to nearest and saturated to the format's largest finite value, as 8 bytes
template <typename F8>
__device__ inline void store8(F8* y, size_t i, const float (&v)[8]) {
  alignas(8) F8 out[8];
  for (int k = 0; k < 8; ++k) out[k] = F8(v[k]);  // __nv_fp8_* from float: __NV_SATFINITE, nearest even
  *reinterpret_cast<uint2*>(y + i) = *reinterpret_cast<const uint2*>(out);
}

// amax_kernel: *amax = max(*amax, max |x|) over x (n), n % 8 == 0. Non-negative floats order as their bit
// patterns, so atomicMax on the int view is a float max; *amax starts at 0 (memset by the caller).
template <typename T>
__global__ void amax_kernel(const T* x, size_t n, float* amax) {
  float m = 0.0f;
  for (size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * 8; i < n; i += size_t(gridDim.x) * blockDim.x * 8) {
    float v[8];
    load8(x, i, v);
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(v[k]));
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
  }
}

// cast_kernel: y (rows, cols) = F8(x * s) and yt (cols, rows) = its transpose, either null, s = fmax / *amax with
// *amax clamped below at kMinAmax (an all-zero tensor casts to zeros; torchao clamps likewise), s = NaN when *amax is
// not finite (every value NaN: an overflow reaches the loss, and the run's non-finite stop, as it would in bf16,
// instead of saturating to a finite value); *inv = 1 / s when inv is non-null.
// rows % 8 == 0, cols % 8 == 0. Blocks of 256 threads, one 64x64 tile each: a thread loads 8 consecutive
// elements of two rows, and stores 8 consecutive elements of two rows of each output.
template <typename T, typename F8>
__global__ void cast_kernel(const T* x, int rows, int cols, const float* amax, float fmax, F8* y, F8* yt, float* inv) {
  __shared__ float tile[kTile][kTile + 1];  // +1: two-way bank conflicts at most on the transposed read
  const float a = *amax;
  const float s = isfinite(a) ? fmax / fmaxf(a, kMinAmax) : __int_as_float(0x7fc00000);
  if (inv != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inv = 1.0f / s;
  const int r0 = blockIdx.y * kTile, c0 = blockIdx.x * kTile;
  const int lr = threadIdx.x / 8, lc = (threadIdx.x % 8) * 8;  // row (of 32) and first column (of 64)
  for (int k = 0; k < 2; ++k) {
    const int r = r0 + lr + 32 * k, c = c0 + lc;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rows && c < cols) {
      load8(x, size_t(r) * cols + c, v);
      for (int j = 0; j < 8; ++j) v[j] *= s;
      if (y != nullptr) store8(y, size_t(r) * cols + c, v);
    }
    for (int j = 0; j < 8; ++j) tile[lr + 32 * k][lc + j] = v[j];
  }
  if (yt == nullptr) return;
  __syncthreads();
  for (int k = 0; k < 2; ++k) {
    const int oc = c0 + lr + 32 * k, orow = r0 + lc;  // yt's row (x's column) and first column (x's row)
    if (oc >= cols || orow >= rows) continue;
    float v[8];
    for (int j = 0; j < 8; ++j) v[j] = tile[lc + j][lr + 32 * k];
    store8(yt, size_t(oc) * rows + orow, v);
  }
}

template <typename T>
void amax(const OpContext& ctx, const T* x, size_t n, float* out) {
  XT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), ctx.stream));
  const size_t vecs = n / 8;
  const unsigned blocks = unsigned(std::min<size_t>((vecs + kThreads - 1) / kThreads, kAmaxMaxBlocks));
  amax_kernel<T><<<blocks ? blocks : 1, kThreads, 0, ctx.stream>>>(x, n, out);
  XT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename F8>
void cast(const OpContext& ctx, const T* x, int rows, int cols, const float* amax, float fmax, void* y, void* yt,
          float* inv) {
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  cast_kernel<T, F8><<<grid, kThreads, 0, ctx.stream>>>(x, rows, cols, amax, fmax, static_cast<F8*>(y),
                                                        static_cast<F8*>(yt), inv);
  XT_CUDA_LAUNCH_CHECK();
}

void check_shape(int rows, int cols, const void* x, const void* y, const void* yt) {
  XT_CHECK(rows > 0 && cols > 0 && rows % 16 == 0 && cols % 16 == 0,
           "FP8 cast: rows and cols must be positive multiples of 16, got " << rows << " x " << cols);
  XT_CHECK(aligned16(x) && aligned16(y) && aligned16(yt), "FP8 cast: pointers must be 16-byte aligned");
}

// fp8_max: the largest finite value of an FP8 format
float fp8_max(cudaDataType_t format) {
  XT_CHECK(format == CUDA_R_8F_E4M3 || format == CUDA_R_8F_E5M2, "FP8 cast: format must be E4M3 or E5M2");
  return format == CUDA_R_8F_E4M3 ? kE4M3Max : kE5M2Max;
}
}  // namespace


void fp8_prepare_weights(const OpContext& ctx, const Fp8Weights& weights) {
  for (const Fp8Weight& e : weights.list) {
    check_shape(e.rows, e.cols, e.w, e.w8, e.w8t);
    amax(ctx, e.w, size_t(e.rows) * e.cols, e.amax);
    cast<float, __nv_fp8_e4m3>(ctx, e.w, e.rows, e.cols, e.amax, kE4M3Max, e.w8, e.w8t, e.inv);
  }
}

void fp8_cast(const OpContext& ctx, const __nv_bfloat16* x, int rows, int cols, cudaDataType_t format, void* y,
              void* yt, float* amax_out, float* inv) {
  check_shape(rows, cols, x, y, yt);
  const float fmax = fp8_max(format);
  amax(ctx, x, size_t(rows) * cols, amax_out);
  if (format == CUDA_R_8F_E4M3)
    cast<__nv_bfloat16, __nv_fp8_e4m3>(ctx, x, rows, cols, amax_out, fmax, y, yt, inv);
  else
    cast<__nv_bfloat16, __nv_fp8_e5m2>(ctx, x, rows, cols, amax_out, fmax, y, yt, inv);
}

}  // namespace xtrain::cuda
