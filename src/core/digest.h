// Message digests of byte strings, as lowercase hex (OpenSSL libcrypto's EVP interface).
#pragma once

#include <string>

namespace xtrain {

std::string md5_hex(const std::string& bytes);     // RFC 1321; 32 hex digits (an identity, not security)
std::string sha256_hex(const std::string& bytes);  // FIPS 180-4; 64 hex digits

}  // namespace xtrain
