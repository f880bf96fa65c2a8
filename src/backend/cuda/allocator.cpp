// CachingAllocator implementation (see allocator.h).
#include "backend/cuda/allocator.h"

#include <cstdio>
#include <string_view>

#include "backend/cuda/cuda_check.h"

namespace xtrain::cuda {

namespace {
constexpr size_t kGranularity = 512;  // bytes; rounding keeps near-equal requests in one size class
size_t round_up(size_t bytes) { return (bytes + kGranularity - 1) / kGranularity * kGranularity; }
}  // namespace

CachingAllocator::~CachingAllocator() {
  release_cached();
  for (auto& [ptr, size] : in_use_) cudaFree(ptr);  // leaked by a caller; free anyway, no throw
}

void* CachingAllocator::alloc(size_t bytes, const char* tag) {
  const size_t size = round_up(bytes == 0 ? 1 : bytes);
  for (auto* list : {&pool_free_, &free_}) {  // the pool is empty unless pooling
    auto it = list->lower_bound(size);
    if (it != list->end() && it->first <= 2 * size) {
      void* ptr = it->second;
      in_use_.emplace(ptr, it->first);
      stats_.bytes_in_use += it->first;
      list->erase(it);
      tags_[ptr] = tag;
      return ptr;
    }
  }
  void* ptr = nullptr;
  cudaError_t rc = cudaMalloc(&ptr, size);
  ++stats_.cuda_malloc_calls;
  if (rc == cudaErrorMemoryAllocation && !pooling_) {  // not while a graph is recorded: cudaFree may synchronize
    cudaGetLastError();  // clear the sticky-free error state before retrying
    release_cached();
    rc = cudaMalloc(&ptr, size);
    ++stats_.cuda_malloc_calls;
  }
  if (rc != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    XT_FAIL("CUDA out of memory: cannot allocate " << size << " bytes (" << stats_.bytes_in_use
                                                    << " bytes in use by xtrain, " << free_b << " of "
                                                    << total_b << " bytes free on the device): "
                                                    << cudaGetErrorString(rc));
  }
  in_use_.emplace(ptr, size);
  tags_[ptr] = tag;
  stats_.bytes_in_use += size;
  stats_.bytes_reserved += size;
  if (stats_.bytes_reserved > stats_.peak_bytes_reserved) stats_.peak_bytes_reserved = stats_.bytes_reserved;
  return ptr;
}

void CachingAllocator::free(void* ptr) noexcept {
  if (!ptr) return;
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    std::fprintf(stderr, "xtrain: CachingAllocator::free of unknown pointer %p ignored\n", ptr);
    return;
  }
  (pooling_ ? pool_free_ : free_).emplace(it->second, ptr);
  stats_.bytes_in_use -= it->second;
  in_use_.erase(it);
}

void CachingAllocator::begin_pool() {
  XT_CHECK(!pooling_, "CachingAllocator::begin_pool: already pooling");
  pooling_ = true;
}

CachingAllocator::Pool CachingAllocator::end_pool() {
  Pool blocks;
  for (auto& [size, ptr] : pool_free_) {
    blocks.emplace_back(ptr, size);
    graph_.emplace(ptr, size);
    stats_.bytes_in_use += size;  // held by the graph, written by each launch: in use until released
  }
  pool_free_.clear();
  pooling_ = false;
  return blocks;
}

void CachingAllocator::release_pool(const Pool& blocks) noexcept {
  for (const auto& [ptr, size] : blocks) {
    free_.emplace(size, ptr);
    graph_.erase(ptr);
    stats_.bytes_in_use -= size;
  }
}

void CachingAllocator::release_cached() noexcept {
  for (auto& [size, ptr] : free_) {
    cudaFree(ptr);
    tags_.erase(ptr);
    ++stats_.cuda_free_calls;
    stats_.bytes_reserved -= size;
  }
  free_.clear();
}

std::vector<CachingAllocator::TagBytes> CachingAllocator::blocks() const {
  std::vector<TagBytes> out;
  auto add = [&](void* ptr, size_t size, BlockState state) {
    const auto t = tags_.find(ptr);
    const char* tag = t == tags_.end() ? "untagged" : t->second;
    for (TagBytes& g : out)
      if (g.state == state && std::string_view(g.tag) == tag) {
        ++g.blocks, g.bytes += size;
        return;
      }
    out.push_back({tag, state, 1, size});
  };
  for (const auto& [ptr, size] : in_use_) add(ptr, size, BlockState::in_use);
  for (const auto& [ptr, size] : graph_) add(ptr, size, BlockState::graph);
  for (const auto* list : {&free_, &pool_free_})
    for (const auto& [size, ptr] : *list) add(ptr, size, BlockState::cached);
  return out;
}

}  // namespace xtrain::cuda
