// Clocks of ordered work: the monotonic host clock, TimelineClock (marks on one stream of work whose
// times are read once that work has run; the host clock, or CUDA events: backend/cuda/event_clock.h)
// and CollectiveTrace, through which a Communicator reports its collectives' marks. The step
// timeline of --timeline (train/timeline.h) is built on these; the backends and communicators that
// provide the clocks sit below it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xtrain {

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

// CollectiveTrace: told by a Communicator that one of its gradient collectives started at mark `start`
// and completed at mark `end` of `clock` (its stream's clock; Communicator::set_trace). The marks must
// stay readable until the step's end (the communicator clears its clock at the next bucketed_begin).
class CollectiveTrace {
 public:
  virtual ~CollectiveTrace() = default;
  virtual bool recording() const = 0;  // false: nothing is kept, the communicator need not mark
  virtual void collective(const std::string& what, TimelineClock& clock, size_t start, size_t end) = 0;
};

}  // namespace xtrain
