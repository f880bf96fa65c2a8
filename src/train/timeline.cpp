// Step timeline recorder and the Chrome trace writer (see src/train/timeline.h).
#include "train/timeline.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <xtrain/core/error.h>
#include <xtrain/model/model.h>

namespace xtrain {

StepTimeline::StepTimeline(const std::vector<ParamTensor>& layout, TimelineClock& compute) : compute_(compute) {
  for (const ParamTensor& p : layout) {
    // a tensor absent from this model (llama's wpe and biases: zero elements) shares the next one's offset:
    // it names no block
    if (p.count == 0) continue;
    const std::string block = p.name.substr(0, p.name.find('.'));  // "h3.ln1.w" -> "h3"
    // "lnf": the head's backward runs in the forward (head and loss in chunks of rows), lnf's after the loss
    blocks_.emplace_back(p.offset, block == "wte" ? "embeddings" : block);
  }
}

void StepTimeline::begin(int step) {
  XT_CHECK(step > 0, "StepTimeline::begin: step " << step << " (steps are 1-based)");
  step_ = step;
  spans_.clear();
  compute_.clear();
  mark_ = compute_.mark();
}

void StepTimeline::phase(const std::string& name) {
  if (!recording()) return;
  const size_t now = compute_.mark();
  spans_.push_back({name, "compute", &compute_, mark_, now});
  mark_ = now;
}

void StepTimeline::grads_ready(size_t offset) {
  if (!recording()) return;
  // the hook's offset is where a block's first tensor starts (model_step.cpp): name the block
  auto b = std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& x) { return x.first == offset; });
  XT_CHECK(b != blocks_.end(), "StepTimeline: gradient offset " << offset << " starts no parameter tensor");
  phase("backward " + b->second);
}

void StepTimeline::collective(const std::string& what, TimelineClock& clock, size_t start, size_t end) {
  if (recording()) spans_.push_back({what, "communication", &clock, start, end});
}

void StepTimeline::end() {
  if (!recording()) return;
  for (const Span& s : spans_)
    events_.push_back({s.name, s.track, s.clock->seconds(s.start), s.clock->seconds(s.end), step_});
  spans_.clear();
  step_ = 0;
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, int rank) {
  const std::vector<std::string> tracks = {"compute", "communication"};
  double t0 = events.empty() ? 0 : events.front().start_s;
  for (const TraceEvent& e : events) t0 = std::min(t0, e.start_s);
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < tracks.size(); ++i)
    out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", i}, {"args", {{"name", tracks[i]}}}});
  for (const TraceEvent& e : events) {
    const auto tid = std::find(tracks.begin(), tracks.end(), e.track) - tracks.begin();
    XT_CHECK(tid < static_cast<long>(tracks.size()), "chrome_trace_json: unknown track " << e.track);
    out.push_back({{"ph", "X"}, {"name", e.name}, {"cat", e.track}, {"pid", rank}, {"tid", tid},
                   {"ts", (e.start_s - t0) * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}, {"args", {{"step", e.step}}}});
  }
  return nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

}  // namespace xtrain
