// TokenStream: the training token stream as read-only views over stored ids (uint16 or uint32, e.g. a
// memory-mapped token cache, token_cache.h), joined end to end, so the ranks of a node read one
// page-cache copy instead of each holding an int32 vector. The sampler (data.h) copies windows out
// of it with copy(); nothing else needs to know how the ids are stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace xtrain {

// TokenView: `count` ids stored as little-endian unsigned integers of `id_bytes` (2 or 4) bytes at
// `ids`; does not own them.
struct TokenView {
  const void* ids = nullptr;
  size_t count = 0;
  int id_bytes = 4;
  // copy_to: ids [first, first + n) widened to int32 into dst (n). The caller keeps first + n <= count.
  void copy_to(size_t first, size_t n, int32_t* dst) const;
};

class TokenStream {
 public:
  TokenStream() = default;
  // From an id vector (owned, stored as 4-byte ids): a stream held in memory, e.g. tokens of a text
  // that has no cache, or a test corpus. Implicit, so `data.tokens = ids` reads as before.
  TokenStream(std::vector<int32_t> ids);  // NOLINT(google-explicit-constructor)

  // append: adds view to the end of the stream; owner keeps the ids alive as long as the stream (or
  // a copy of it) lives (a mapping, a vector). Ids must be non-negative (they are ids < 2^31).
  void append(TokenView view, std::shared_ptr<const void> owner);
  // append: adds the views of `more` (sharing their owners).
  void append(const TokenStream& more);

  size_t size() const { return size_; }
  // copy: ids [first, first + n) of the whole stream into dst (n), across view boundaries. Throws
  // Error when the range passes the end.
  void copy(size_t first, size_t n, int32_t* dst) const;
  int32_t at(size_t i) const;
  // to_vector: the whole stream as int32 ids (for tests and small streams).
  std::vector<int32_t> to_vector() const;
  // for_each_chunk: calls fn(ids, n) on consecutive int32 chunks (at most 64K ids each) covering the
  // whole stream in order: one pass for checks and hashes without widening the stream in memory.
  void for_each_chunk(const std::function<void(const int32_t*, size_t)>& fn) const;
  // parts: the views in order (id widths, for the start-up line).
  const std::vector<TokenView>& parts() const { return views_; }

 private:
  std::vector<TokenView> views_;
  std::vector<size_t> starts_;  // starts_[k]: stream index of views_[k]'s first id
  std::vector<std::shared_ptr<const void>> owners_;
  size_t size_ = 0;
};

}  // namespace xtrain
