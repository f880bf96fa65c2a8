// The memory report (--memory-report): every byte the backend's allocator holds, by what holds it,
// assembled from the model's parameter and activation tables (GPT::memory_entries), the optimizer state
// (AdamW::memory_entries) and the backend's own blocks (Backend::memory_accounting), with the allocator's
// measured peak beside the sum. How to read it: docs/cuda.md, "Memory".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/model/model.h>
#include <xtrain/train/optim.h>

namespace xtrain {

struct MemoryReport {
  std::vector<MemoryEntry> entries;  // named buffers, then "allocator rounding" and "unnamed" where not 0
  size_t rounding_bytes = 0;   // blocks of the named buffers beyond the bytes requested (allocator granularity)
  size_t unnamed_bytes = 0;    // blocks from Backend::alloc held now that no entry names (0 when all are named)
  size_t held_bytes = 0;       // what the allocator holds now (BackendMemory::held_bytes)
  size_t peak_bytes = 0;       // the most it has held (BackendMemory::peak_bytes)
  size_t outside_bytes = 0;    // device memory in use outside the allocator (BackendMemory::outside_bytes)
  // category_bytes: the entries of category c summed (bytes); total: all entries (= held_bytes).
  size_t category_bytes(MemoryCategory c) const;
  size_t total() const;
};

// memory_report: the report of what `be` holds now for `model` and `opt` (call it after a step, when the
// activations exist and the step's scratch has been taken). Throws Error when an entry names a block the
// backend does not know (a buffer of another backend).
MemoryReport memory_report(const GPT& model, const std::vector<MemoryEntry>& optimizer, const Backend& be);
inline MemoryReport memory_report(const GPT& model, const AdamW& opt, const Backend& be) {
  return memory_report(model, opt.memory_entries(), be);
}
inline MemoryReport memory_report(const GPT& model, const Optimizer& opt, const Backend& be) {
  return memory_report(model, opt.memory_entries(), be);
}

// format_memory_report: the printed table: one line per entry (name, MiB, bytes, dtype, category, why),
// sorted by category then size, each category's sum, the total beside the allocator's peak and their
// difference, and the device memory outside the allocator where known. Lines start with "memory".
std::string format_memory_report(const MemoryReport& r);

}  // namespace xtrain
