// The activation table: every activation buffer of one (B,T) with its shape, element count, storage type and, under activation recompute, whether
// the layers share it, in one place (llm.c's ActivationTensors).
// Shared by model.cpp (allocation) and model_step.cpp (forward, backward).
#pragma once

#include <algorithm>
#include <cstddef>

#include <xtrain/model/model.h>

namespace xtrain {

// activations: kPerLayerActs per layer, then the global ones (offset L * kPerLayerActs); the
// tables below give one row for each, in this order
enum LayerAct {
  kLn1, kLn1Mean, kLn1Rstd, kQkv, kAtty, kAtt, kRes2, kLn2, kLn2Mean, kLn2Rstd, kFch, kFchAct, kRes3,
  kPerLayerActs
};
enum GlobalAct {
  kEncoded, kLnf, kLnfMean, kLnfRstd, kLogits, kLosses, kBranch,
  kDRes, kDTmpC, kDTmpC2, kDQkv, kDAtty, kDFch, kDFchAct, kNumGlobalActs
};

// Storage of an activation buffer: `act` in the backend's activation type
// (Backend::activation_bytes() per element: 4 fp32, 2 bf16), `fp32` 4 bytes whatever it is
// (layernorm statistics, the attention scratch, per-position losses; backend.h, "Storage types").
enum class ActStore { act, fp32 };

// The sizes the table is written in (elements). N = B*T positions; att = the attention scratch of
// one layer, Backend::attention_scratch_count(B,T,NH,KVH,HS): (B,NH,T,T) probabilities on the CPU, less
// on the CUDA flash route (B,NH,T,HS+1).
// FC: the fc layer's outputs, GPTConfig::fc_width(): F, or 2F for SwiGLU ([gate | up], swiglu_forward's input).
// R: the rows of the logits buffer, logits_buffer_rows (the head and the loss run in chunks of rows).
enum class ActDim { one, N, C, QKV, A, F, FC, Vp, att, R, count };
struct ActDims {
  size_t size[static_cast<int>(ActDim::count)];
  size_t operator[](ActDim d) const { return size[static_cast<int>(d)]; }
};

// The head and the loss in chunks of rows (GPT::head_and_loss, model_step.cpp): each chunk's logits (R,Vp)
// are computed, turned into the loss and dlogits in place and, when training, taken through the head's
// backward at once, so the logits buffer holds R rows, not N. logits_chunk_rows: R for N = B*T rows: `requested`
// (--logits-chunk-rows) capped at N where > 0; 0 = automatic: for a vocabulary of more than
// kLogitsChunkVocab tokens, all N rows where their logits (N x Vp activations of act_bytes) fit in
// kLogitsChunkBytes, else the fewest chunks of at most that many bytes, of equal rows (rounded up to a
// multiple of 64 where that stays under the bound); a smaller vocabulary keeps all N rows (one chunk, the
// bits of no chunking). 256 MiB: at the Llama-3.2-1B shape (Vp 128,256, bf16, N 8192) 8 chunks of 1024
// rows, a buffer of 250.5 MiB, instead of 2.0 GiB (test_logits_chunks asserts these figures, docs/usage.md
// quotes them; one H100: the default peak 34,491 -> 30,823 MiB with --recompute auto, the
// step as fast). Each chunk reads and writes the head's fp32 gradient once (dW +=), which weighs more in a
// small model's short step: GPT-2 124M (V 50,257, B=16, T=1024) in 6 chunks was 3.3% slower for 1.3 GB
// (bench/results/training_h100_2026-12.md), hence the vocabulary bound: large vocabularies (Llama 3, Qwen)
// are where the logits dominate the activations.
inline constexpr size_t kLogitsChunkBytes = size_t(256) << 20;
inline constexpr int kLogitsChunkVocab = 65536;
inline int logits_chunk_most(const GPTConfig& c, size_t act_bytes, int requested) {
  if (requested > 0) return requested;
  if (c.V <= kLogitsChunkVocab) return 1 << 30;  // one chunk
  const size_t most = kLogitsChunkBytes / (size_t(c.Vp()) * act_bytes);  // Vp <= 2^24: most >= 4
  return int(std::min<size_t>(most, size_t(1) << 30));
}
inline int logits_chunk_rows(const GPTConfig& c, int N, size_t act_bytes, int requested) {
  const int most = logits_chunk_most(c, act_bytes, requested);
  if (N <= most) return N;
  if (requested > 0) return requested;
  const long long chunks = (N + (long long)most - 1) / most, even = (N + chunks - 1) / chunks;
  const long long rounded = (even + 63) / 64 * 64;
  return int(rounded <= most ? rounded : even);
}
// logits_buffer_rows: the rows the logits buffer of buffers for N rows holds: the chunk N rows use, so no
// row of it is held unused. A smaller batch in the same buffers chunks as in buffers of its own (the same
// bits); where its chunk is larger (automatic chunks: 669 rows fit at once, 1024 are 2 x 512), the logits
// buffer alone grows to it (GPT::ensure_acts).
inline int logits_buffer_rows(const GPTConfig& c, int N, size_t act_bytes, int requested) {
  return logits_chunk_rows(c, N, act_bytes, requested);
}

inline ActDims act_dims(const GPTConfig& c, int B, int T, size_t att, size_t act_bytes, int logits_chunk) {
  return ActDims{{1, size_t(B) * T, size_t(c.C), size_t(c.qkv_width()), size_t(c.NH) * c.HS, size_t(c.F),
                  size_t(c.fc_width()), size_t(c.Vp()), att,
                  size_t(logits_buffer_rows(c, B * T, act_bytes, logits_chunk))}};
}

// Activation recompute (--recompute, llm.c's model->recompute): 0 keeps every per-layer buffer;
// 1 recomputes act(fch) in the backward: GELU with matmul_gelu_forward, the forward's op (it rewrites fch
// with the same values, at the cost of the fc GEMM again, since a fused backend's GELU reads the unrounded
// sum), SwiGLU with swiglu_forward from the kept fch; 2 also the norm outputs ln1, ln2 (norm_forward on the
// layer's kept input; it rewrites the kept per-layer statistics with the same values, as llm.c does). qkv
// is kept in every mode, already rotated (rotary_forward in place), as the attention backward reads it. A
// recomputed buffer is written by the same op on the same inputs as in the forward, or (ln1 and ln2, which
// the forward writes with residual_norm_forward) by the op that this fused op must equal bit for bit
// (Backend::residual_layernorm_forward, residual_rmsnorm_forward), so results are bitwise those of
// --recompute 0 (block_backward, BlockRecompute).
constexpr int kMaxRecompute = 2;
constexpr int kKept = kMaxRecompute + 1;  // shared_from of a buffer every layer keeps for itself

// One table row: buffer `id` holds rows x cols elements of storage `store`. A per-layer row is one
// buffer per layer while recompute < shared_from, and one buffer shared by all layers (layer 0's)
// from recompute >= shared_from: the forward overwrites it layer by layer and the backward
// recomputes it before its one use. Only rows the backward (block_backward) recomputes may be
// shared: ln1, ln2 (norm_forward) and fch_act (the MLP activation). Global rows are one buffer anyway.
struct ActSpec {
  int id;
  const char* name;  // the memory report's name (train/memory_report.h)
  ActDim rows, cols;
  ActStore store;
  int shared_from = kKept;
  size_t count(const ActDims& d) const { return d[rows] * d[cols]; }
  bool shared(int recompute) const { return recompute >= shared_from; }
};

constexpr ActSpec kLayerActTable[] = {  // per layer l; last column: shared from --recompute
    {kLn1, "ln1", ActDim::N, ActDim::C, ActStore::act, 2},            // (B,T,C)    ln1(residual)
    {kLn1Mean, "ln1.mean", ActDim::one, ActDim::N, ActStore::fp32, kKept}, // (B,T)
    {kLn1Rstd, "ln1.rstd", ActDim::one, ActDim::N, ActStore::fp32, kKept}, // (B,T)
    {kQkv, "qkv", ActDim::N, ActDim::QKV, ActStore::act, kKept},      // (B,T,(NH+2*KVH)*HS)  qkv_layout.h
    {kAtty, "atty", ActDim::N, ActDim::A, ActStore::act, kKept},       // (B,T,NH*HS) attention output
    {kAtt, "att", ActDim::one, ActDim::att, ActStore::fp32, kKept},   // (att)      attention scratch, see ActDims
    {kRes2, "res2", ActDim::N, ActDim::C, ActStore::act, kKept},       // (B,T,C)    residual + attention branch
    {kLn2, "ln2", ActDim::N, ActDim::C, ActStore::act, 2},            // (B,T,C)    ln2(res2)
    {kLn2Mean, "ln2.mean", ActDim::one, ActDim::N, ActStore::fp32, kKept}, // (B,T)
    {kLn2Rstd, "ln2.rstd", ActDim::one, ActDim::N, ActStore::fp32, kKept}, // (B,T)
    {kFch, "fch", ActDim::N, ActDim::FC, ActStore::act, kKept},       // (B,T,FC)   fc output (the activation's input; SwiGLU: [gate | up])
    {kFchAct, "fch_act", ActDim::N, ActDim::F, ActStore::act, 1},         // (B,T,F)    act(fch): gelu(fch), or swiglu(fch)
    {kRes3, "res3", ActDim::N, ActDim::C, ActStore::act, kKept},       // (B,T,C)    res2 + MLP branch: the next layer's input
};
constexpr ActSpec kGlobalActTable[] = {  // once; the backward's buffers are reused by every layer
    {kEncoded, "encoded", ActDim::N, ActDim::C, ActStore::act},    // (B,T,C)    wte[tok] + wpe[t]
    {kLnf, "lnf", ActDim::N, ActDim::C, ActStore::act},        // (B,T,C)    final layernorm
    {kLnfMean, "lnf.mean", ActDim::one, ActDim::N, ActStore::fp32}, // (B,T)
    {kLnfRstd, "lnf.rstd", ActDim::one, ActDim::N, ActStore::fp32}, // (B,T)
    {kLogits, "logits", ActDim::R, ActDim::Vp, ActStore::act},    // (R,Vp)     one chunk's logits, then dlogits in place
    {kLosses, "losses", ActDim::one, ActDim::N, ActStore::fp32},  // (B,T)      per-position cross-entropy
    // (B,T,C) a block's projection output (attention's, then the MLP's), dropout applied in place, read only by
    // the residual add that follows it: no backward reads it, so every layer writes the same buffer
    {kBranch, "branch", ActDim::N, ActDim::C, ActStore::act},
    {kDRes, "dres", ActDim::N, ActDim::C, ActStore::act},       // (B,T,C)    gradient of the residual stream
    {kDTmpC, "dtmp_c", ActDim::N, ActDim::C, ActStore::act},      // (B,T,C)    scratch gradient
    {kDTmpC2, "dtmp_c2", ActDim::N, ActDim::C, ActStore::act},     // (B,T,C)    dropout-masked branch gradient
    {kDQkv, "dqkv", ActDim::N, ActDim::QKV, ActStore::act},     // (B,T,(NH+2*KVH)*HS)
    {kDAtty, "datty", ActDim::N, ActDim::A, ActStore::act},      // (B,T,NH*HS)
    {kDFch, "dfch", ActDim::N, ActDim::FC, ActStore::act},      // (B,T,FC)
    {kDFchAct, "dfch_act", ActDim::N, ActDim::F, ActStore::act},    // (B,T,F)
};

// The tables list every buffer once, in enum order (acts_ is indexed by the enums).
constexpr bool in_enum_order(const ActSpec* t, int n) {
  for (int i = 0; i < n; ++i)
    if (t[i].id != i) return false;
  return true;
}
static_assert(sizeof(kLayerActTable) / sizeof(ActSpec) == kPerLayerActs && in_enum_order(kLayerActTable, kPerLayerActs),
              "kLayerActTable: one row per LayerAct, in order");
static_assert(sizeof(kGlobalActTable) / sizeof(ActSpec) == kNumGlobalActs &&
                  in_enum_order(kGlobalActTable, kNumGlobalActs),
              "kGlobalActTable: one row per GlobalAct, in order");

// layer_act_owner: the layer whose buffer holds activation `which` of layer l under `recompute`
// (acts_ index owner * kPerLayerActs + which); 0 for a shared buffer.
inline int layer_act_owner(int l, int which, int recompute) {
  return kLayerActTable[which].shared(recompute) ? 0 : l;
}

}  // namespace xtrain
