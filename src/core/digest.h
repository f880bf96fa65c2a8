// The hashes, in one place: FNV-1a 64 for short keys and the formats that store it, XXH3-64 for bulk
// data (libxxhash), message digests as lowercase hex (OpenSSL libcrypto's EVP interface), and the hex
// form of xtrain's own 64-bit identities (tokenizer fingerprints, data hashes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace xtrain {

// fnv1a64: FNV-1a 64-bit hash of bytes (Fowler, Noll, Vo), chainable through `h`. Byte-serial
// (~0.4 GB/s): for short keys and formats that already store it (token cache, tokenizer fingerprint).
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull);

// xxh3_64: XXH3 64-bit hash of bytes, seed 0 (xxHash, Y. Collet; libxxhash), tens of GB/s: for
// checkpoints and parameter buffers.
uint64_t xxh3_64(const void* data, size_t bytes);

// Xxh3Stream: xxh3_64 of bytes given in pieces: digest() after update(a), update(b) equals
// xxh3_64 of a then b (XXH3 streaming API, seed 0).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t bytes);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t
};

std::string md5_hex(const std::string& bytes);     // RFC 1321; 32 hex digits (an identity, not security)
std::string sha256_hex(const std::string& bytes);  // FIPS 180-4; 64 hex digits
std::string hex64(uint64_t x);                     // 16 lowercase hex digits, leading zeros kept
// parse_hex64: exactly 16 hex digits (either case) -> the value; false for anything else.
bool parse_hex64(const std::string& s, uint64_t* out);

}  // namespace xtrain
