// What every backend shares (see backend/backend.h): the checks of op arguments that do not depend on
// the device, and the names of the memory categories.
#include <xtrain/backend/backend.h>

#include <cstdint>
#include <vector>

#include <xtrain/core/error.h>

namespace xtrain {

void check_adamw_args(const std::vector<ParamSpan>& spans, int t) {
  XT_CHECK(t >= 1, "AdamW step " << t << " must be >= 1");
  size_t end = 0;  // end of the previous span
  for (size_t i = 0; i < spans.size(); ++i) {
    XT_CHECK(spans[i].offset >= end, "AdamW span " << i << " starts at element " << spans[i].offset
                                                   << ", before the end of the span before it (element " << end
                                                   << "): spans must be in increasing order without overlap");
    XT_CHECK(spans[i].count <= SIZE_MAX - spans[i].offset,
             "AdamW span " << i << " (" << spans[i].count << " elements at " << spans[i].offset
                           << ") ends past the largest address");
    end = spans[i].offset + spans[i].count;
  }
}

void check_newton_schulz_args(int batch, int rows, int cols, int steps) {
  XT_CHECK(batch >= 0 && rows >= 1 && cols >= 1 && steps >= 0,
           "newton_schulz of " << batch << " matrices (" << rows << ", " << cols << "), " << steps
                               << " steps: needs batch >= 0, rows and cols >= 1, steps >= 0");
}

const char* to_string(MemoryCategory c) {
  static const char* const names[] = {"parameters", "gradients", "optimizer", "activations", "workspace", "other"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(MemoryCategory::count), "one name per MemoryCategory");
  return c < MemoryCategory::count ? names[size_t(c)] : "?";
}

}  // namespace xtrain
