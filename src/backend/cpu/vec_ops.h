// The CPU backend's float kernels for the ops whose reference (ops.h, attention.h) spends a training step in
// scalar libm calls or in loops the compiler leaves scalar: the cross-entropy over the vocabulary, GELU, the
// attention's dot products, AdamW. Each has its reference's contract and double arithmetic, vectorized across
// independent outputs, so that every output sums its terms in the reference's order. What differs, and only in
// the last bits of a double before its rounding to float: the cross-entropy's and GELU's exp is exp_lanes
// (exp_table.h's method, within 3 double ulps of the exact value, where their references call std::exp), a row's
// sum of exponentials is taken in 8 partial sums and its probabilities times dloss are e (dloss / s) where the
// reference takes e^(l - max - log s) dloss, and GELU uses tanh(y) = 1 - 2 / (1 + e^{2y}) rearranged.
// test_cpu_vec_ops checks each against its double reference; the finite-difference tests check the references.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xtrain::cpu::vec {

// cross_entropy_forward_backward: ops.h's contract (losses (N); dlogits (N,Vp) or null, may alias logits;
// targets checked before anything is written). The loss takes log of the row's sum in double; every loss and
// dlogit is the exact value rounded to float, up to 2^-50 of its own size (exp_lanes and a few double roundings).
// A row at a time, in three passes: its max (float), its exponentials (double, kept in a row buffer of V doubles,
// 393 KiB for GPT-2's vocabulary, which stays in L2), its dlogits; the next row is prefetched meanwhile.
void cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                                    double dloss, int N, int V, int Vp);

// gelu_forward: out (count) = 0.5 x (1 + tanh(y)) = x / (1 + e^{-2y}), y = k (x + a x^3) (ops.h's constants).
void gelu_forward(float* out, const float* inp, size_t count);
// gelu_backward: dinp (count) += gelu'(inp) * dout, or = when assign; with s = 1 / (1 + e^{-2y}) (= (1 + tanh y)/2)
// gelu'(x) = s + 2 k x s (1 - s) (1 + 3 a x^2).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t count, bool assign);

// attention_forward / attention_backward: attention.h's contracts and arithmetic; scores and weighted sums
// vectorized across positions and channels (every dot product in the reference's order; the softmax's exp is
// exp_table's, vectorized, as in attention_decode, so prefill through the cache still gives these bits).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH, int HS);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int NH,
                        int KVH, int HS);

// adamw_update: ops.h's contract and arithmetic (the same operations in double, in the same order: the same bits).
void adamw_update(float* param, const float* grad, float* m, float* v, size_t count, double lr, double beta1,
                  double beta2, double eps, double weight_decay, double grad_scale, int t);

// sum_squares: x (count) -> sum of x^2 in double, ops.h's 8 partial sums (the same bits).
double sum_squares(const float* x, size_t count);

// Build: the kernels' builds (vec_ops.cpp): vectors of 8 doubles for AVX-512, 4 for AVX2 (both with FMA3), 2 for the
// x86-64 baseline (SSE2; the only build elsewhere). Every build gives the same bits. automatic: the widest this CPU
// runs.
enum class Build { automatic, avx512, avx2, baseline };
// use_build: every kernel runs build `b` from now on, in every thread (automatic: the default); for tests that
// compare the builds. Throws Error for a build this CPU cannot run. Returns the build now in use (never automatic).
Build use_build(Build b);

}  // namespace xtrain::cpu::vec
