// CachingAllocator: device memory for the CUDA backend. Freed blocks go to a free list keyed by
// size and are handed out again, so after the first step of training (warm-up) no cudaMalloc or
// cudaFree runs; both are counted so a test can assert that. All users of a block are ordered on
// the backend's one compute stream, so a block freed on the host may be reused by the next op
// without a device sync (the same reasoning as PyTorch's stream-ordered caching allocator).
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/alloc_stats.h"

namespace xtrain::cuda {

// kBlockAlignment: every block of CachingAllocator::alloc starts at a multiple of this many bytes (the
// alignment cudaMalloc guarantees; blocks are whole cudaMalloc allocations).
constexpr size_t kBlockAlignment = 256;

class CachingAllocator {
 public:
  CachingAllocator() = default;
  ~CachingAllocator();  // cudaFree of every block it holds; never throws
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // alloc: a block of at least `bytes` bytes (kBlockAlignment-aligned). Reuses the smallest cached block
  // that fits and wastes at most half of it; else cudaMalloc. On out-of-memory, releases the cache
  // and retries once, then throws Error naming the request and the free/total device memory.
  // tag: what the block is for (a string literal, kept with the block until it is released, so a cached
  // block names the last op that used it; the memory report, blocks()).
  void* alloc(size_t bytes, const char* tag = kCallerTag);
  // free: returns ptr (from alloc, or null) to the cache. Throws nothing; an unknown pointer is a
  // programming error and is reported on stderr.
  void free(void* ptr) noexcept;
  // block_bytes: the size of the block `ptr` handed out by alloc and not yet freed (bytes); 0 for any
  // other pointer.
  size_t block_bytes(const void* ptr) const {
    const auto it = in_use_.find(const_cast<void*>(ptr));
    return it == in_use_.end() ? 0 : it->second;
  }
  // release_cached: cudaFree every cached (unused) block.
  void release_cached() noexcept;

  // A graph's scratch (CudaBackend::capture_graph). Between begin_pool() and end_pool() every freed block
  // goes to a pool that only allocations made before end_pool() reuse (so the recording reuses its own
  // scratch as an eager step would); an allocation that needs cudaMalloc and fails does not release the
  // cache meanwhile (cudaFree may synchronize, which a recording forbids): it throws. end_pool() hands the
  // pool's blocks to the caller: they stay reserved and count as in use (a launch of the graph writes them
  // again), not cached; release_pool() puts them back in the cache. A pool's blocks must be released before
  // the allocator goes.
  using Pool = std::vector<std::pair<void*, size_t>>;
  void begin_pool();
  Pool end_pool();
  void release_pool(const Pool& blocks) noexcept;

  const CudaAllocStats& stats() const { return stats_; }

  // kCallerTag: the tag of Backend::alloc's blocks (their owners name them in the memory report).
  static constexpr const char* kCallerTag = "Backend::alloc";
  // BlockState: a block handed out (in use), held by a recorded graph (end_pool), or cached (free).
  enum class BlockState { in_use, graph, cached };
  // TagBytes: the blocks of one (tag, state): their count and bytes.
  struct TagBytes {
    const char* tag;
    BlockState state;
    size_t blocks, bytes;
  };
  // blocks: every block held (bytes_reserved in all), grouped by (tag, state).
  std::vector<TagBytes> blocks() const;

 private:
  std::multimap<size_t, void*> free_;          // size -> cached block
  bool pooling_ = false;                       // between begin_pool() and end_pool()
  std::multimap<size_t, void*> pool_free_;     // size -> block freed while pooling
  std::unordered_map<void*, size_t> in_use_;   // block -> size
  std::unordered_map<void*, size_t> graph_;    // block -> size, held by a recorded graph (end_pool)
  std::unordered_map<void*, const char*> tags_;  // every block held -> the tag of its last alloc
  CudaAllocStats stats_;
};

// ScratchBuffer: a temporary device buffer for one op, from the allocator, back to it at scope end.
// Safe without a sync because every op runs on the same stream (see above).
template <typename T>
class ScratchBuffer {
 public:
  // tag: what it is for (CachingAllocator::alloc), named in the memory report's allocator cache rows.
  ScratchBuffer(CachingAllocator& a, size_t count, const char* tag = "op scratch")
      : a_(a), ptr_(static_cast<T*>(a.alloc(count ? count * sizeof(T) : 1, tag))) {}
  ~ScratchBuffer() { a_.free(ptr_); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  T* get() const { return ptr_; }

 private:
  CachingAllocator& a_;
  T* ptr_;
};

}  // namespace xtrain::cuda
