// Step timeline (--timeline): when each layer's backward ends and when each gradient all-reduce
// starts and completes, for a few steady-state steps, written as a Chrome trace (chrome://tracing,
// ui.perfetto.dev) so the overlap of communication with the backward pass can be seen without nsys.
// Times come from marks on the stream that runs the work (TimelineClock, core/clock.h): the host
// clock where work runs when called (the CPU backend, MPI), CUDA events on the compute and NCCL
// streams (read after the step).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <xtrain/core/clock.h>

namespace xtrain {

struct ParamTensor;

// TraceEvent: one span on one track of one step; seconds on the clocks' base.
struct TraceEvent {
  std::string name;   // e.g. "backward h3", "all-reduce of gradient bucket 1 of 4 (elements [a, b))"
  std::string track;  // "compute" or "communication"
  double start_s = 0, end_s = 0;
  int step = 0;
};

// StepTimeline: the recorder train_rank drives on rank 0, with the backend's compute clock. Between
// begin(step) and end() (called after the step's work has run: Backend::synchronize), phase(name)
// closes a compute span [last mark, now] and grads_ready(offset) (from GPT's GradReadyHook) names it
// after the block whose gradients just became final ("backward lnf", "backward h3", "backward embeddings";
// the head's backward runs in the forward); collectives arrive through CollectiveTrace. end() reads the marks' times.
class StepTimeline final : public CollectiveTrace {
 public:
  StepTimeline(const std::vector<ParamTensor>& layout, TimelineClock& compute);
  void begin(int step);
  void phase(const std::string& name);
  void grads_ready(size_t offset);
  // mark: a compute-clock mark now (0, unused, when not recording); clock: that clock. For a
  // collective the step itself brackets (the single gradient all-reduce).
  size_t mark() { return recording() ? compute_.mark() : 0; }
  TimelineClock& clock() { return compute_; }
  bool recording() const override { return step_ > 0; }
  void collective(const std::string& what, TimelineClock& clock, size_t start, size_t end) override;
  void end();
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  struct Span {
    std::string name, track;
    TimelineClock* clock;
    size_t start, end;
  };
  std::vector<std::pair<size_t, std::string>> blocks_;  // (offset of a tensor, its block's name)
  TimelineClock& compute_;
  std::vector<Span> spans_;  // this step's, read at end()
  std::vector<TraceEvent> events_;
  int step_ = 0;  // the step being recorded; 0 = none
  size_t mark_ = 0;
};

// chrome_trace_json: the Trace Event Format (Google's "Trace Event Format" document): one complete
// event ("ph": "X", "ts" and "dur" in microseconds from the earliest event) per TraceEvent, pid = rank,
// one tid per track, named by thread_name metadata events; args carry the step.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, int rank);

}  // namespace xtrain
