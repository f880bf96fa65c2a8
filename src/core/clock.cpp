// The host clock (see core/clock.h).
#include <xtrain/core/clock.h>

#include <chrono>

#include <xtrain/core/error.h>

namespace xtrain {

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t HostClock::mark() {
  marks_.push_back(host_seconds());
  return marks_.size() - 1;
}

double HostClock::seconds(size_t id) {
  XT_CHECK(id < marks_.size(), "HostClock: mark " << id << " of " << marks_.size());
  return marks_[id];
}

}  // namespace xtrain
