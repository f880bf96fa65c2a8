// non_finite_param (see model/param_check.h).
#include "model/param_check.h"

#include <cmath>
#include <sstream>

namespace xtrain {

std::string non_finite_param(const GPTConfig& cfg, const std::vector<float>& params) {
  return non_finite_param(cfg, params.data(), params.size());
}

std::string non_finite_param(const GPTConfig& cfg, const float* params, size_t count) {
  for (const ParamTensor& t : param_layout(cfg))
    for (size_t i = 0; i < t.count && t.offset + i < count; ++i)
      if (!std::isfinite(params[t.offset + i])) {
        std::ostringstream os;
        os << "tensor " << t.name << " element " << i << " is " << params[t.offset + i];
        return os.str();
      }
  return "";
}

}  // namespace xtrain
