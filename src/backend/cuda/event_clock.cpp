// CUDA timeline clock (see event_clock.h).
#include "backend/cuda/event_clock.h"

#include "backend/cuda/cuda_check.h"
#include <xtrain/core/error.h>

namespace xtrain::cuda {

EventClock::~EventClock() {
  for (cudaEvent_t ev : events_) cudaEventDestroy(ev);
}

size_t EventClock::mark() {
  if (used_ == events_.size()) {
    cudaEvent_t ev = nullptr;
    XT_CUDA_CHECK(cudaEventCreate(&ev));  // with timing, unlike the synchronisation events
    events_.push_back(ev);
  }
  XT_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
  return used_++;
}

double EventClock::seconds(size_t id) {
  XT_CHECK(id < used_, "EventClock: mark " << id << " of " << used_);
  XT_CUDA_CHECK(cudaEventSynchronize(events_[id]));
  float ms = 0;
  XT_CUDA_CHECK(cudaEventElapsedTime(&ms, base_, events_[id]));  // resolution about 0.5 us
  return ms / 1e3;
}

void EventClock::clear() {
  used_ = 0;
  if (records_base_) XT_CUDA_CHECK(cudaEventRecord(base_, stream_));
}

}  // namespace xtrain::cuda
