// Token cache files (format in include/xtrain/token_cache.h).
#include "xtrain/token_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "xtrain/error.h"
#include "xtrain/io.h"

namespace xtrain {

namespace {

constexpr char kMagic[8] = {'X', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 8;  // magic, version, reserved, 4 x u64
constexpr size_t kChecksumBytes = 8;

void put_le(std::string* buf, uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) buf->push_back(char((v >> (8 * k)) & 0xFF));
}
uint64_t get_le(const std::string& buf, size_t at, int bytes) {
  uint64_t v = 0;
  for (int k = 0; k < bytes; ++k) v |= uint64_t(uint8_t(buf[at + size_t(k)])) << (8 * k);
  return v;
}

}  // namespace

void write_token_cache(const std::string& path, const std::vector<int32_t>& ids, uint64_t tok_fingerprint,
                       uint64_t source_bytes, uint64_t source_hash) {
  std::string buf(kMagic, sizeof(kMagic));
  buf.reserve(kHeaderBytes + 4 * ids.size() + kChecksumBytes);
  put_le(&buf, kVersion, 4);
  put_le(&buf, 0, 4);  // reserved
  put_le(&buf, tok_fingerprint, 8);
  put_le(&buf, source_bytes, 8);
  put_le(&buf, source_hash, 8);
  put_le(&buf, ids.size(), 8);
  for (int32_t id : ids) put_le(&buf, uint32_t(id), 4);
  put_le(&buf, fnv1a64(buf.data() + kHeaderBytes, 4 * ids.size()), 8);

  // Atomic replace (several ranks may write the same cache at once): readers see the old file or
  // the complete new one.
  write_file_atomic(path, buf, "cannot write token cache");
}

bool read_token_cache(const std::string& path, uint64_t tok_fingerprint, uint64_t source_bytes,
                      uint64_t source_hash, std::vector<int32_t>* ids) {
  const std::string buf = read_file(path);
  if (buf.size() < kHeaderBytes + kChecksumBytes)
    XT_FAIL("token cache " << path << " is truncated: " << buf.size() << " bytes, less than the header");
  if (std::memcmp(buf.data(), kMagic, sizeof(kMagic)) != 0)
    XT_FAIL("token cache " << path << " is not a token cache (bad magic)");
  const uint64_t version = get_le(buf, 8, 4);
  if (version != kVersion) XT_FAIL("token cache " << path << " has version " << version << ", expected " << kVersion);
  if (get_le(buf, 12, 4) != 0) XT_FAIL("token cache " << path << " is corrupt (reserved field is not 0)");
  const uint64_t count = get_le(buf, 40, 8);
  // Compare in a form that cannot overflow for a corrupt count.
  if ((buf.size() - kHeaderBytes - kChecksumBytes) % 4 != 0 ||
      (buf.size() - kHeaderBytes - kChecksumBytes) / 4 != count)
    XT_FAIL("token cache " << path << " is truncated or corrupt: header says " << count << " tokens, file has "
                           << buf.size() << " bytes");
  const uint64_t checksum = get_le(buf, kHeaderBytes + 4 * count, 8);
  if (fnv1a64(buf.data() + kHeaderBytes, 4 * count) != checksum)
    XT_FAIL("token cache " << path << " is corrupt (checksum mismatch)");
  if (get_le(buf, 16, 8) != tok_fingerprint || get_le(buf, 24, 8) != source_bytes ||
      get_le(buf, 32, 8) != source_hash)
    return false;
  ids->resize(count);
  for (size_t i = 0; i < count; ++i) (*ids)[i] = int32_t(uint32_t(get_le(buf, kHeaderBytes + 4 * i, 4)));
  return true;
}

// looks_like_token_cache: the file starts with the cache magic (damaged caches may be rebuilt).
static bool looks_like_token_cache(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[sizeof(kMagic)] = {};
  return f.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof magic) == 0;
}

std::vector<int32_t> encode_with_progress(const Tokenizer& tok, std::string_view text, const std::string& name,
                                          int rank, const ProgressOptions& opt) {
  Progress progress("tokenize " + name, text.size(), rank, opt);
  std::vector<int32_t> ids = tok.encode(text, [&](size_t done) { progress.update(done); });
  progress.finish();
  return ids;
}

std::vector<int32_t> load_tokens(const std::string& text_path, const Tokenizer& tok, std::string cache_path,
                                 bool write_cache, const std::string& log_prefix, int rank) {
  const std::string text = read_file(text_path);
  const auto encode = [&] { return encode_with_progress(tok, text, text_path, rank); };
  const uint64_t hash = fnv1a64(text.data(), text.size());
  // A text that is not a regular file (e.g. /dev/null) has no cache: <text>.tokcache would be created
  // next to a device node.
  if (cache_path.empty() && is_non_regular(text_path)) return encode();
  if (cache_path.empty()) cache_path = text_path + ".tokcache";
  std::vector<int32_t> ids;
  if (is_non_regular(cache_path)) {  // a FIFO or device: reading could hang, writing would destroy it
    std::cerr << log_prefix << "warning: token cache " << cache_path
              << " exists and is not a regular file; neither reading nor writing it\n";
    return encode();
  }
  if (::access(cache_path.c_str(), F_OK) == 0) {
    try {
      if (read_token_cache(cache_path, tok.fingerprint(), text.size(), hash, &ids)) return ids;
    } catch (const Error& e) {
      // A damaged cache is only a lost shortcut: say so and rebuild it from the text.
      std::cerr << log_prefix << "warning: " << e.what() << "; re-tokenizing " << text_path << "\n";
    }
  }
  ids = encode();
  if (write_cache && ::access(cache_path.c_str(), F_OK) == 0 && !looks_like_token_cache(cache_path)) {
    // Never replace a file that is not a token cache (e.g. --tokens-cache pointing at a corpus).
    std::cerr << log_prefix << "warning: " << cache_path << " exists and is not a token cache; not overwriting it\n";
  } else if (write_cache) {
    try {
      write_token_cache(cache_path, ids, tok.fingerprint(), text.size(), hash);
    } catch (const Error& e) {  // e.g. a read-only data directory: training can go on without it
      std::cerr << log_prefix << "warning: " << e.what() << "\n";
    }
  }
  return ids;
}

}  // namespace xtrain
