// The memory report (see src/train/memory_report.h).
#include "train/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

#include <xtrain/core/error.h>

namespace xtrain {

size_t MemoryReport::category_bytes(MemoryCategory c) const {
  size_t s = 0;
  for (const MemoryEntry& e : entries) s += e.category == c ? e.bytes : 0;
  return s;
}

size_t MemoryReport::total() const {
  size_t s = 0;
  for (const MemoryEntry& e : entries) s += e.bytes;
  return s;
}

MemoryReport memory_report(const GPT& model, const std::vector<MemoryEntry>& optimizer, const Backend& be) {
  MemoryReport r;
  r.entries = model.memory_entries();
  for (const MemoryEntry& e : optimizer) r.entries.push_back(e);
  // The named buffers' blocks: each block once, its size against the bytes its entries requested.
  std::set<const void*> blocks;
  size_t requested = 0, held = 0;
  for (const MemoryEntry& e : r.entries) {
    requested += e.bytes;
    for (const void* p : e.blocks) {
      if (p == nullptr || !blocks.insert(p).second) continue;
      const size_t b = be.allocation_bytes(p);
      XT_CHECK(b > 0, "memory report: " << e.name << " lies in no block of the " << be.name() << " backend");
      held += b;
    }
  }
  XT_CHECK(held >= requested, "memory report: the named buffers request " << requested << " bytes, their blocks hold "
                                                                            << held);
  const BackendMemory m = be.memory_accounting();
  r.rounding_bytes = held - requested;
  r.unnamed_bytes = m.caller_bytes > held ? m.caller_bytes - held : 0;
  r.held_bytes = m.held_bytes, r.peak_bytes = m.peak_bytes, r.outside_bytes = m.outside_bytes;
  for (const MemoryEntry& e : m.own) r.entries.push_back(e);
  if (r.rounding_bytes > 0)
    r.entries.push_back({"allocator rounding", r.rounding_bytes, "bytes",
                         "the named buffers' blocks beyond their requests (allocator granularity)",
                         MemoryCategory::other, {}});
  if (r.unnamed_bytes > 0)
    r.entries.push_back({"unnamed", r.unnamed_bytes, "bytes", "Backend::alloc blocks held that no entry names",
                         MemoryCategory::other, {}});
  return r;
}

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
std::string line(const char* category, const std::string& name, size_t bytes, const std::string& dtype,
                 const std::string& why) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "memory  %-11s %-28s %10.1f %13zu  %-5s  ", category, name.c_str(), bytes / kMiB,
                bytes, dtype.c_str());
  return buf + why + "\n";
}
}  // namespace

std::string format_memory_report(const MemoryReport& r) {
  std::ostringstream os;
  char head[160];
  std::snprintf(head, sizeof head, "memory  %-11s %-28s %10s %13s  %-5s  why\n", "category", "name", "MiB", "bytes",
                "dtype");
  os << head;
  for (int c = 0; c < int(MemoryCategory::count); ++c) {
    const MemoryCategory cat = MemoryCategory(c);
    std::vector<const MemoryEntry*> rows;
    for (const MemoryEntry& e : r.entries)
      if (e.category == cat && e.bytes > 0) rows.push_back(&e);
    if (rows.empty()) continue;
    std::stable_sort(rows.begin(), rows.end(), [](const MemoryEntry* a, const MemoryEntry* b) { return a->bytes > b->bytes; });
    for (const MemoryEntry* e : rows) os << line(to_string(cat), e->name, e->bytes, e->dtype, e->why);
    os << line(to_string(cat), "= " + std::string(to_string(cat)), r.category_bytes(cat), "", "sum of the category");
  }
  const size_t total = r.total();
  os << line("total", "= sum of the categories", total, "", "what the allocator holds now: " +
                                                                  std::to_string(r.held_bytes) + " bytes");
  if (r.peak_bytes > 0) {
    const long long diff = static_cast<long long>(r.peak_bytes) - static_cast<long long>(total);
    os << line("peak", "allocator peak", r.peak_bytes, "",
               "peak - total = " + std::to_string(diff) + " bytes (blocks released since the peak)");
  }
  if (r.outside_bytes > 0)
    os << line("outside", "device, outside the allocator", r.outside_bytes, "",
               "CUDA context, cuBLAS/cuDNN/NCCL internals, other processes on the device (cudaMemGetInfo)");
  return os.str();
}

}  // namespace xtrain
