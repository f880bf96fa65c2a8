// Fused causal grouped-query attention (FlashAttention-2, Dao 2023), flash_attention.cu. Selected by
// attention.cu (attention_route) on the flash route, or as the fallback of the cuDNN route, when
// flash_attention_supported(T, HS).
#pragma once

#include "backend/cuda/ops.h"
#include <xtrain/backend/qkv_layout.h>

namespace xtrain::cuda {

// flash_attention_supported: HS in {32, 64} and T > HS (att must hold lse and the output copy).
bool flash_attention_supported(int T, int HS);

// flash_attention_forward: qkv (B,T,(NH+2*KVH)*HS) -> out (B,T,NH*HS), activations (ops.h), shapes and
// offsets per QkvLayout `s` (checked by the caller); att: B*NH*T*(HS+1) floats of scratch
// (CudaBackend::attention_scratch_count), the first B*NH*T the log-sum-exp of each scaled score row
// (natural log), then B*NH*T*HS the output, head-major (B,NH,T,HS), for the backward's rowsum(dO * O).
void flash_attention_forward(const OpContext& ctx, void* out, float* att, const void* qkv, const QkvLayout& s);
// flash_attention_backward: dout (B,T,NH*HS), att as the forward left it -> dqkv +=. Deterministic.
// Both throw Error when an activation buffer is not 16-byte aligned (tiles move as 16-byte copies).
// accumulate false: dqkv = instead of += (every element of dqkv is written exactly once).
void flash_attention_backward(const OpContext& ctx, void* dqkv, const void* dout, const void* qkv,
                              const float* att, const QkvLayout& s, bool accumulate);

}  // namespace xtrain::cuda
