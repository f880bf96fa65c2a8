// Step timeline (--timeline, issue #13): when each layer's backward ends and when each gradient
// all-reduce starts and completes, for a few steady-state steps, written as a Chrome trace
// (chrome://tracing, ui.perfetto.dev) so the overlap of communication with the backward pass can be
// seen without nsys. Host clock: exact for the CPU backend, whose ops run when called.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace xtrain {

struct ParamTensor;

// host_seconds: the monotonic host clock (std::chrono::steady_clock), seconds.
double host_seconds();

// TraceEvent: one span on one track of one step; times in seconds of host_seconds().
struct TraceEvent {
  std::string name;   // e.g. "backward h3", "all-reduce of gradient bucket 1 of 4 (elements [a, b))"
  std::string track;  // "compute" or "communication"
  double start_s = 0, end_s = 0;
  int step = 0;
};

// CollectiveTrace: told by a Communicator when one of its gradient collectives started and completed
// (host_seconds(); Communicator::set_trace).
class CollectiveTrace {
 public:
  virtual ~CollectiveTrace() = default;
  virtual void collective(const std::string& what, double start_s, double end_s) = 0;
};

// StepTimeline: the recorder train_rank drives. Between begin(step) and end(), phase(name) closes a
// compute span [last mark, now] and grads_ready(offset) (from GPT's GradReadyHook) names it after the
// block whose gradients just became final ("backward h3", "backward lm_head + lnf", "backward
// embeddings"); collectives arrive through CollectiveTrace. Outside begin/end nothing is recorded.
class StepTimeline : public CollectiveTrace {
 public:
  explicit StepTimeline(const std::vector<ParamTensor>& layout);
  void begin(int step);
  void phase(const std::string& name);
  void grads_ready(size_t offset);
  void collective(const std::string& what, double start_s, double end_s) override;
  void end() { step_ = 0; }
  bool recording() const { return step_ > 0; }
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  std::vector<std::pair<size_t, std::string>> blocks_;  // (offset of a tensor, its block's name)
  std::vector<TraceEvent> events_;
  int step_ = 0;  // the step being recorded; 0 = none
  double mark_s_ = 0;
};

// chrome_trace_json: the Trace Event Format (Google's "Trace Event Format" document): one complete
// event ("ph": "X", "ts" and "dur" in microseconds from the earliest event) per TraceEvent, pid = rank,
// one tid per track, named by thread_name metadata events; args carry the step.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, int rank);

}  // namespace xtrain
