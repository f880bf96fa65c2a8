// EventClock: the CUDA TimelineClock (--timeline, src/core/clock.h): a timing event recorded
// on one stream per mark, read as the time elapsed since a base event that every clock of the backend
// shares (cudaEventElapsedTime compares events of different streams of one device).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include <xtrain/core/clock.h>

namespace xtrain::cuda {

class EventClock final : public TimelineClock {
 public:
  // stream: where marks are recorded; base: the shared base event (owned by the backend);
  // records_base: this clock's clear() records the base on its stream (the compute stream's clock).
  EventClock(cudaStream_t stream, cudaEvent_t base, bool records_base)
      : stream_(stream), base_(base), records_base_(records_base) {}
  ~EventClock() override;  // never throws
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;
  size_t mark() override;
  double seconds(size_t id) override;  // waits for the mark's event; Error on a bad id or CUDA error
  void clear() override;

 private:
  cudaStream_t stream_;
  cudaEvent_t base_;
  bool records_base_;
  std::vector<cudaEvent_t> events_;  // reused across clears
  size_t used_ = 0;                  // marks since the last clear
};

}  // namespace xtrain::cuda
