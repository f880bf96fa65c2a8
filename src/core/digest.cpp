// The hashes of src/core/digest.h: FNV-1a, XXH3-64 (libxxhash), md5 / sha256 (OpenSSL's EVP_Digest).
#include "core/digest.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <xtrain/core/error.h>

namespace xtrain {

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  // FNV-1a: xor the byte in, then multiply by the 64-bit FNV prime 2^40 + 2^8 + 0xb3.
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  XT_CHECK(state_ != nullptr, "XXH3_createState: out of memory");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(const void* data, size_t bytes) { XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes); }
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

namespace {
std::string digest_hex(const EVP_MD* md, const std::string& bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  XT_CHECK(md != nullptr && EVP_Digest(bytes.data(), bytes.size(), out, &n, md, nullptr) == 1, "OpenSSL EVP_Digest failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned int i = 0; i < n; ++i) s += {hex[out[i] >> 4], hex[out[i] & 15]};
  return s;
}
}  // namespace

std::string md5_hex(const std::string& bytes) { return digest_hex(EVP_md5(), bytes); }
std::string sha256_hex(const std::string& bytes) { return digest_hex(EVP_sha256(), bytes); }

std::string hex64(uint64_t x) {
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, x >>= 4) s[size_t(i)] = hex[x & 15];
  return s;
}

bool parse_hex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | uint64_t(d);
  }
  *out = v;
  return true;
}

}  // namespace xtrain
