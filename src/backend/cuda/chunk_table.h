// ChunkTable: the chunk table of the optimizers' one-launch elementwise kernels (as PyTorch's
// multi_tensor_apply: every span of the flat buffers cut into chunks, a block per chunk): AdamWTable for
// adamw_update (adamw.cu), MuonTable for muon_momentum and muon_apply (muon_momentum.cu, muon_apply.cu).
// One class for both: only the span and chunk types differ (chunk_table.cpp says how each is cut).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtrain/backend/backend.h>

namespace xtrain::cuda {

class CachingAllocator;
struct OpContext;

// kChunkThreads: threads per block of the chunked kernels. kChunkElems: elements per chunk at most, 64 per
// thread, so a 124M-parameter model is ~7.6K blocks, ~7 waves of resident blocks on an H200's 132 SMs (a
// part-filled last wave costs little), and AdamW's table ~120 KiB; a tensor smaller than this is one chunk.
constexpr int kChunkThreads = 256;
constexpr size_t kChunkElems = size_t(kChunkThreads) * 64;

// AdamWChunk: one block's slice of adamw_update: elements [begin, begin + count) of the flat buffers, with
// weight decay when decay is 1 (the span's ParamSpan::decay).
struct AdamWChunk {
  size_t begin;
  uint32_t count;
  uint32_t decay;
};
// MuonChunk: one block's slice of muon_momentum / muon_apply: count elements of one span, starting at
// param_at, state_at and update_at of its buffers, with the span's lr_ratio.
struct MuonChunk {
  size_t param_at, state_at, update_at;
  uint32_t count;
  double lr_ratio;
};

// ChunkTable<Span, Chunk>: the spans cut into Chunks of at most kChunkElems elements, in device memory; built
// on the first call and again only when the spans change (a model's layout never does during training), so
// a step uploads nothing. Owned by the backend; frees its block.
template <typename Span, typename Chunk>
class ChunkTable {
 public:
  ChunkTable() = default;
  ~ChunkTable();
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;
  // chunks_for: the number of chunks of `spans` (checked by the caller: check_adamw_args, check_muon_spans),
  // the table rebuilt (and uploaded on ctx.stream, then synchronized) first when they differ from the last
  // call's. Throws Error past INT32_MAX chunks (a launch's limit) or when the allocation fails, leaving no table.
  int chunks_for(const OpContext& ctx, const std::vector<Span>& spans);
  const Chunk* device() const { return table_; }

 private:
  CachingAllocator* alloc_ = nullptr;
  Chunk* table_ = nullptr;
  int num_chunks_ = 0;
  std::vector<Span> spans_;  // what the table was built from
};

// the two tables (instantiated in chunk_table.cpp) and the allocator tags of their blocks (the memory report
// names them)
using AdamWTable = ChunkTable<ParamSpan, AdamWChunk>;
using MuonTable = ChunkTable<MuonSpan, MuonChunk>;
extern template class ChunkTable<ParamSpan, AdamWChunk>;
extern template class ChunkTable<MuonSpan, MuonChunk>;
constexpr const char* kAdamWTableTag = "AdamW chunk table";
constexpr const char* kMuonTableTag = "Muon chunk table";

}  // namespace xtrain::cuda
