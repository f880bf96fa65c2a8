// Command-line pieces shared by every front end (see core/cli.h).
#include "core/cli.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace xtrain {

uint64_t parse_seed(const std::string& text) {
  errno = 0;  // strtoull alone would take "-1" as 2^64-1: digits only
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE)
    throw UsageError("--seed must be an integer in [0, 2^64-1], got '" + text + "'");
  return v;
}

}  // namespace xtrain
