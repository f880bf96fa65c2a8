// What every backend shares (see backend/backend.h): the checks of op arguments that do not depend on
// the device, and the names of the memory categories.
#include <xtrain/backend/backend.h>

#include <algorithm>
#include <cstdint>
#include <utility>
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

void check_muon_spans(const std::vector<MuonSpan>& spans) {
  const std::pair<const char*, size_t MuonSpan::*> layouts[] = {
      {"parameter", &MuonSpan::param_at}, {"momentum", &MuonSpan::state_at}, {"update", &MuonSpan::update_at}};
  for (const auto& [name, at] : layouts) {
    std::vector<std::pair<size_t, size_t>> ranges;  // (start, span index), by start
    for (size_t i = 0; i < spans.size(); ++i) {
      const MuonSpan& s = spans[i];
      XT_CHECK(s.count <= SIZE_MAX - s.*at, "Muon span " << i << " (" << s.count << " elements at " << s.*at << " of the "
                                                         << name << " buffer) ends past the largest address");
      if (s.count > 0) ranges.emplace_back(s.*at, i);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t k = 1; k < ranges.size(); ++k) {
      const MuonSpan& prev = spans[ranges[k - 1].second];
      XT_CHECK(prev.*at + prev.count <= ranges[k].first,
               "Muon spans " << ranges[k - 1].second << " and " << ranges[k].second << " overlap in the " << name
                             << " buffer (elements " << prev.*at << " + " << prev.count << " and "
                             << ranges[k].first << ")");
    }
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
