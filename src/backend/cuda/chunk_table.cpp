// ChunkTable (chunk_table.h): what a span of each optimizer is cut into and when two spans are the same,
// then one build-and-upload for both tables.
#include "backend/cuda/chunk_table.h"

#include <algorithm>
#include <cstdint>

#include <xtrain/core/error.h>
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace xtrain::cuda {

namespace {
// Chunking<Span>: the table's name in its errors, its allocator tag, whether two spans give the same chunks
// (every field a chunk is made of) and the chunk of `count` elements `done` elements into a span
template <typename Span>
struct Chunking;

template <>
struct Chunking<ParamSpan> {
  static constexpr const char* name = "AdamW";
  static constexpr const char* tag = kAdamWTableTag;
  static bool same(const ParamSpan& a, const ParamSpan& b) {
    return a.offset == b.offset && a.count == b.count && a.decay == b.decay;
  }
  static AdamWChunk chunk(const ParamSpan& s, size_t done, uint32_t count) {
    return {s.offset + done, count, s.decay ? 1u : 0u};
  }
};

template <>
struct Chunking<MuonSpan> {
  static constexpr const char* name = "Muon";
  static constexpr const char* tag = kMuonTableTag;
  static bool same(const MuonSpan& x, const MuonSpan& y) {
    return x.param_at == y.param_at && x.state_at == y.state_at && x.update_at == y.update_at && x.count == y.count &&
           x.lr_ratio == y.lr_ratio;
  }
  static MuonChunk chunk(const MuonSpan& s, size_t done, uint32_t count) {
    return {s.param_at + done, s.state_at + done, s.update_at + done, count, s.lr_ratio};
  }
};
}  // namespace

template <typename Span, typename Chunk>
ChunkTable<Span, Chunk>::~ChunkTable() {
  if (alloc_) alloc_->free(table_);
}

template <typename Span, typename Chunk>
int ChunkTable<Span, Chunk>::chunks_for(const OpContext& ctx, const std::vector<Span>& spans) {
  using C = Chunking<Span>;
  if (table_ && spans.size() == spans_.size() && std::equal(spans.begin(), spans.end(), spans_.begin(), C::same))
    return num_chunks_;
  std::vector<Chunk> chunks;
  for (const Span& s : spans)
    for (size_t done = 0; done < s.count; done += kChunkElems)
      chunks.push_back(C::chunk(s, done, uint32_t(std::min(kChunkElems, s.count - done))));
  XT_CHECK(chunks.size() <= size_t(INT32_MAX), C::name << ": " << chunks.size() << " chunks exceed the launch limit");
  // Drop the old table first: a failed allocation below then leaves no table, never a stale one.
  spans_.clear();
  num_chunks_ = 0;
  alloc_ = ctx.alloc;
  alloc_->free(table_);  // stream-ordered reuse: kernels queued before still read it first (allocator.h)
  table_ = nullptr;
  if (!chunks.empty()) {
    table_ = static_cast<Chunk*>(alloc_->alloc(chunks.size() * sizeof(Chunk), C::tag));
    XT_CUDA_CHECK(
        cudaMemcpyAsync(table_, chunks.data(), chunks.size() * sizeof(Chunk), cudaMemcpyHostToDevice, ctx.stream));
    XT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // once per layout; `chunks` goes out of scope
  }
  spans_ = spans;
  num_chunks_ = int(chunks.size());
  return num_chunks_;
}

template class ChunkTable<ParamSpan, AdamWChunk>;
template class ChunkTable<MuonSpan, MuonChunk>;

}  // namespace xtrain::cuda
