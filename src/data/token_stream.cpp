// TokenStream: joined read-only views over stored token ids (see src/data/token_stream.h).
#include <xtrain/data/token_stream.h>

#include <algorithm>
#include <cstring>

#include <xtrain/core/error.h>

namespace xtrain {

namespace {
// ids are stored little-endian (token_cache.h); every platform xtrain builds for is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token ids are stored little-endian");
}  // namespace

void TokenView::copy_to(size_t first, size_t n, int32_t* dst) const {
  if (id_bytes == 2) {
    const uint16_t* p = static_cast<const uint16_t*>(ids) + first;
    std::copy_n(p, n, dst);
  } else {
    std::memcpy(dst, static_cast<const uint32_t*>(ids) + first, n * sizeof(int32_t));
  }
}

TokenStream::TokenStream(std::vector<int32_t> ids) {
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  append(TokenView{owned->data(), owned->size(), 4}, owned);
}

void TokenStream::append(TokenView view, std::shared_ptr<const void> owner) {
  XT_CHECK(view.id_bytes == 2 || view.id_bytes == 4, "token ids of " << view.id_bytes << " bytes");
  if (view.count == 0) return;
  views_.push_back(view);
  starts_.push_back(size_);
  owners_.push_back(std::move(owner));
  size_ += view.count;
}

void TokenStream::append(const TokenStream& more) {
  for (size_t k = 0; k < more.views_.size(); ++k) append(more.views_[k], more.owners_[k]);
}

std::vector<int32_t> TokenStream::to_vector() const {
  std::vector<int32_t> ids(size_);
  copy(0, size_, ids.data());
  return ids;
}

void TokenStream::copy(size_t first, size_t n, int32_t* dst) const {
  XT_CHECK(first <= size_ && n <= size_ - first,
           "token range [" << first << ", " << first + n << ") outside the stream of " << size_ << " tokens");
  // the last view starting at or before `first`
  size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
  while (n > 0) {
    const size_t in_view = first - starts_[k];
    const size_t take = std::min(n, views_[k].count - in_view);
    views_[k].copy_to(in_view, take, dst);
    dst += take, first += take, n -= take, ++k;
  }
}

int32_t TokenStream::at(size_t i) const {
  int32_t id = 0;
  copy(i, 1, &id);
  return id;
}

void TokenStream::for_each_chunk(const std::function<void(const int32_t*, size_t)>& fn) const {
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<int32_t> buf(std::min(kChunk, size_));
  for (size_t at = 0; at < size_; at += kChunk) {
    const size_t n = std::min(kChunk, size_ - at);
    copy(at, n, buf.data());
    fn(buf.data(), n);
  }
}

}  // namespace xtrain
