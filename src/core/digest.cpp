// md5 / sha256 through OpenSSL's EVP_Digest (src/core/digest.h).
#include "core/digest.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace xtrain {

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

}  // namespace xtrain
