// Gradient bucket planning and the per-step driver of the bucketed all-reduce (grad_buckets.h).
#include "train/grad_buckets.h"

#include <sstream>

#include <xtrain/core/error.h>

namespace xtrain {

std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamTensor>& layout, size_t bucket_bytes) {
  XT_CHECK(!layout.empty(), "plan_grad_buckets: empty parameter layout");
  const size_t total = layout.back().offset + layout.back().count;
  if (bucket_bytes == 0) return {GradBucket{0, total}};
  std::vector<GradBucket> out;
  size_t end = total;  // the current bucket is [layout[i].offset, end)
  for (size_t i = layout.size(); i-- > 0;) {
    XT_CHECK(layout[i].offset + layout[i].count == (i + 1 < layout.size() ? layout[i + 1].offset : total),
             "plan_grad_buckets: tensor " << layout[i].name << " does not end where the next begins");
    const size_t begin = layout[i].offset;
    if ((end - begin) * sizeof(float) >= bucket_bytes || i == 0) {
      out.push_back({begin, end - begin});
      end = begin;
    }
  }
  return out;
}

BucketedAllReduce::BucketedAllReduce(Communicator& comm, std::vector<GradBucket> buckets)
    : comm_(comm), buckets_(std::move(buckets)) {
  XT_CHECK(!buckets_.empty(), "BucketedAllReduce: no buckets");
}

std::string BucketedAllReduce::name(size_t i) const {
  std::ostringstream os;
  os << "all-reduce of gradient bucket " << i + 1 << " of " << buckets_.size() << " (elements ["
     << buckets_[i].offset << ", " << buckets_[i].offset + buckets_[i].count << "))";
  return os.str();
}

void BucketedAllReduce::begin(float* grads, size_t count, ReduceOp op) {
  XT_CHECK(!active_, "BucketedAllReduce::begin: the previous step's all-reduce was not finished");
  XT_CHECK(count == buckets_.front().offset + buckets_.front().count && buckets_.back().offset == 0,
           "BucketedAllReduce::begin: " << count << " gradients, the buckets cover a different buffer");
  comm_.bucketed_begin(grads, count, op);
  next_ = 0;
  active_ = true;
}

void BucketedAllReduce::ready(size_t offset) {
  XT_CHECK(active_, "BucketedAllReduce::ready before begin");
  for (; next_ < buckets_.size() && buckets_[next_].offset >= offset; ++next_)
    comm_.bucketed_start(buckets_[next_].offset, buckets_[next_].count, name(next_));
  comm_.bucketed_progress();
}

void BucketedAllReduce::finish() {
  ready(0);
  active_ = false;
  comm_.bucketed_finish();
}

void BucketedAllReduce::join() {
  XT_CHECK(comm_.records_collectives(), "BucketedAllReduce::join: the " << comm_.name()
                                            << " communicator's collectives cannot be recorded; use finish()");
  ready(0);
  active_ = false;
  comm_.bucketed_join();
}

void BucketedAllReduce::cancel() noexcept {
  if (!active_) return;
  active_ = false;
  // nothing started: the communicator's stream never joined the recording, so there is nothing to join
  if (!comm_.records_collectives() || next_ == 0) return;
  try {
    comm_.bucketed_join();
  } catch (...) {  // the recording is dropped anyway; its error is the one that propagates
  }
}

void BucketedAllReduce::wait() {
  XT_CHECK(!active_, "BucketedAllReduce::wait before join");
  comm_.bucketed_wait();
}

}  // namespace xtrain
