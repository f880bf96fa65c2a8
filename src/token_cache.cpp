// Token cache files (format in include/xtrain/token_cache.h) and whole-file reading.
#include "xtrain/token_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

#include "xtrain/error.h"

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

std::string errno_text() { return std::strerror(errno); }

// Writes all of buf to fd or throws naming path.
void write_all(int fd, const std::string& buf, const std::string& path) {
  for (size_t done = 0; done < buf.size();) {
    const ssize_t n = ::write(fd, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) XT_FAIL("cannot write " << path << ": " << errno_text());
    done += size_t(n);
  }
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  // FNV-1a: xor the byte in, then multiply by the 64-bit FNV prime 2^40 + 2^8 + 0xb3.
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) XT_FAIL("cannot read " << path << ": " << errno_text());
  std::string out;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int saved = errno;
  std::fclose(f);
  if (failed) XT_FAIL("cannot read " << path << ": " << std::strerror(saved));
  return out;
}

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

  // Atomic replace: a unique tmp name in the same directory (several ranks may write the same cache
  // at once), fsync, then rename over path; readers see the old file or the complete new one.
  static std::atomic<int> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) XT_FAIL("cannot write token cache " << tmp << ": " << errno_text());
  try {
    write_all(fd, buf, tmp);
    if (::fsync(fd) != 0) XT_FAIL("cannot fsync " << tmp << ": " << errno_text());
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    XT_FAIL("cannot write token cache " << path << ": " << why);
  }
  // Make the rename itself durable (best effort: some file systems refuse fsync on directories).
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

bool read_token_cache(const std::string& path, uint64_t tok_fingerprint, uint64_t source_bytes,
                      uint64_t source_hash, std::vector<int32_t>* ids) {
  const std::string buf = read_text_file(path);
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

std::vector<int32_t> load_tokens(const std::string& text_path, const Tokenizer& tok, std::string cache_path,
                                 bool write_cache, const std::string& log_prefix) {
  const std::string text = read_text_file(text_path);
  const uint64_t hash = fnv1a64(text.data(), text.size());
  if (cache_path.empty()) cache_path = text_path + ".tokcache";
  std::vector<int32_t> ids;
  if (::access(cache_path.c_str(), F_OK) == 0) {
    try {
      if (read_token_cache(cache_path, tok.fingerprint(), text.size(), hash, &ids)) return ids;
    } catch (const Error& e) {
      // A damaged cache is only a lost shortcut: say so and rebuild it from the text.
      std::cerr << log_prefix << "warning: " << e.what() << "; re-tokenizing " << text_path << "\n";
    }
  }
  ids = tok.encode(text);
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
