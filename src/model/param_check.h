// The one impossible-value check of weights read from a file (an export, a model directory): every
// parameter finite. A checksum proves bytes are those written, not that the writer's values were sane;
// a NaN weight would otherwise surface later as an internal check in the sampler or a NaN loss.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <xtrain/model/model.h>

namespace xtrain {

// non_finite_param: "" when every value of params (param_layout(cfg) order, num_params floats) is
// finite, else which is not: "tensor <name> element <i> is <value>" (the first one, buffer order).
std::string non_finite_param(const GPTConfig& cfg, const std::vector<float>& params);
// the same over count floats at params (host memory, e.g. a backend's CPU parameter buffer)
std::string non_finite_param(const GPTConfig& cfg, const float* params, size_t count);
// non_finite_in: the same for one tensor t: its first n values at `values` (host memory)
std::string non_finite_in(const ParamTensor& t, const float* values, size_t n);

}  // namespace xtrain
