// echo_value (see core/echo.h).
#include "core/echo.h"

#include <cstdio>

namespace xtrain {

std::string echo_value(std::string_view value, size_t max_bytes) {
  size_t keep = value.size();
  if (keep > max_bytes) {
    keep = max_bytes;  // back off over UTF-8 continuation bytes (10xxxxxx) so no character is split
    while (keep > 0 && (static_cast<unsigned char>(value[keep]) & 0xC0) == 0x80) --keep;
  }
  std::string out;
  out.reserve(keep + 24);
  for (size_t i = 0; i < keep; ++i) {
    const unsigned char ch = static_cast<unsigned char>(value[i]);
    if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (ch == '\r') out += "\\r";
    else if (ch < 0x20 || ch == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", ch);
      out += hex;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (keep < value.size()) out += "... (" + std::to_string(value.size()) + " bytes)";
  return out;
}

}  // namespace xtrain
