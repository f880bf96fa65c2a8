// Step timeline recorder and its Chrome trace writer (see include/xtrain/timeline.h).
#include "xtrain/timeline.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "xtrain/error.h"
#include "xtrain/model.h"

namespace xtrain {

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

StepTimeline::StepTimeline(const std::vector<ParamTensor>& layout) {
  for (const ParamTensor& p : layout) {
    const std::string block = p.name.substr(0, p.name.find('.'));  // "h3.ln1.w" -> "h3"
    blocks_.emplace_back(p.offset, block == "wte" ? "embeddings" : block == "lnf" ? "lm_head + lnf" : block);
  }
}

void StepTimeline::begin(int step) {
  XT_CHECK(step > 0, "StepTimeline::begin: step " << step << " (steps are 1-based)");
  step_ = step;
  mark_s_ = host_seconds();
}

void StepTimeline::phase(const std::string& name) {
  if (!recording()) return;
  const double now = host_seconds();
  events_.push_back({name, "compute", mark_s_, now, step_});
  mark_s_ = now;
}

void StepTimeline::grads_ready(size_t offset) {
  if (!recording()) return;
  // the hook's offset is where a block's first tensor starts (model_step.cpp): name the block
  auto b = std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& x) { return x.first == offset; });
  XT_CHECK(b != blocks_.end(), "StepTimeline: gradient offset " << offset << " starts no parameter tensor");
  phase("backward " + b->second);
}

void StepTimeline::collective(const std::string& what, double start_s, double end_s) {
  if (recording()) events_.push_back({what, "communication", start_s, end_s, step_});
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
