// non_finite_param (see model/param_check.h).
#include "model/param_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace xtrain {

std::string non_finite_param(const GPTConfig& cfg, const std::vector<float>& params) {
  return non_finite_param(cfg, params.data(), params.size());
}

std::string non_finite_param(const GPTConfig& cfg, const float* params, size_t count) {
  for (const ParamTensor& t : param_layout(cfg)) {
    if (t.offset >= count) break;
    if (std::string bad = non_finite_in(t, params + t.offset, std::min(t.count, count - t.offset)); !bad.empty()) return bad;
  }
  return "";
}

std::string non_finite_in(const ParamTensor& t, const float* values, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) {
      std::ostringstream os;
      os << "tensor " << t.name << " element " << i << " is " << values[i];
      return os.str();
    }
  return "";
}

}  // namespace xtrain
