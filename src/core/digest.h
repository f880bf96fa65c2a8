// Message digests of byte strings, as lowercase hex (OpenSSL libcrypto's EVP interface), and the hex
// form of xtrain's own 64-bit identities (tokenizer fingerprints, data hashes).
#pragma once

#include <cstdint>
#include <string>

namespace xtrain {

std::string md5_hex(const std::string& bytes);     // RFC 1321; 32 hex digits (an identity, not security)
std::string sha256_hex(const std::string& bytes);  // FIPS 180-4; 64 hex digits
std::string hex64(uint64_t x);                     // 16 lowercase hex digits, leading zeros kept
// parse_hex64: exactly 16 hex digits (either case) -> the value; false for anything else.
bool parse_hex64(const std::string& s, uint64_t* out);

}  // namespace xtrain
