// Step timeline (--timeline, issue #13): when each layer's backward ends and when each gradient
// all-reduce starts and completes, for a few steady-state steps, written as a Chrome trace
// (chrome://tracing, ui.perfetto.dev) so the overlap of communication with the backward pass can be
// seen without nsys. Times come from marks on the stream that runs the work (TimelineClock): the host
// clock where work runs when called (the CPU backend, MPI), CUDA events on the compute and NCCL
// streams (read after the step).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace xtrain {

struct ParamTensor;

// host_seconds: the monotonic host clock (std::chrono::steady_clock), seconds.
double host_seconds();

// TimelineClock: marks points in one ordered stream of work; their times are read once that work has
// run. The clocks of one backend share one time base, so marks of its different streams compare.
class TimelineClock {
 public:
  virtual ~TimelineClock() = default;
  // mark: a point after the work queued so far; returns its id (0, 1, ... since the last clear).
  virtual size_t mark() = 0;
  // seconds: the time of mark `id`, seconds on the shared base; waits for the work before the mark.
  // Throws Error for an id not marked since the last clear.
  virtual double seconds(size_t id) = 0;
  // clear: forgets every mark; a backend's compute clock also restarts the shared base here.
  virtual void clear() = 0;
};

// HostClock: marks are host_seconds() at the call (work that runs when called).
class HostClock final : public TimelineClock {
 public:
  size_t mark() override;
  double seconds(size_t id) override;
  void clear() override { marks_.clear(); }

 private:
  std::vector<double> marks_;
};

// TraceEvent: one span on one track of one step; seconds on the clocks' base.
struct TraceEvent {
  std::string name;   // e.g. "backward h3", "all-reduce of gradient bucket 1 of 4 (elements [a, b))"
  std::string track;  // "compute" or "communication"
  double start_s = 0, end_s = 0;
  int step = 0;
};

// CollectiveTrace: told by a Communicator that one of its gradient collectives started at mark `start`
// and completed at mark `end` of `clock` (its stream's clock; Communicator::set_trace). The marks must
// stay readable until the step's end (the communicator clears its clock at the next bucketed_begin).
class CollectiveTrace {
 public:
  virtual ~CollectiveTrace() = default;
  virtual bool recording() const = 0;  // false: nothing is kept, the communicator need not mark
  virtual void collective(const std::string& what, TimelineClock& clock, size_t start, size_t end) = 0;
};

// StepTimeline: the recorder train_rank drives on rank 0, with the backend's compute clock. Between
// begin(step) and end() (called after the step's work has run: Backend::synchronize), phase(name)
// closes a compute span [last mark, now] and grads_ready(offset) (from GPT's GradReadyHook) names it
// after the block whose gradients just became final ("backward h3", "backward lm_head + lnf",
// "backward embeddings"); collectives arrive through CollectiveTrace. end() reads the marks' times.
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
