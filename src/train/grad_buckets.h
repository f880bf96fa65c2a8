// Gradient buckets for the all-reduce that overlaps the backward pass (PyTorch DDP's
// 25 MiB buckets, Horovod's tensor fusion). The flat gradient buffer is in param_layout order
// (embeddings, layers 0..L-1, lnf) and backward finishes it from the end, so buckets are contiguous
// ranges of that buffer cut at tensor boundaries, planned and started from the end.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <xtrain/comm/comm.h>
#include <xtrain/model/model.h>

namespace xtrain {

struct GradBucket {
  size_t offset = 0, count = 0;  // elements into the flat gradient buffer
};

// plan_grad_buckets: walks `layout` from its last tensor to its first, closing a bucket once it holds
// at least bucket_bytes (fp32 gradients: 4 bytes an element); the first tensors left over form the
// last bucket. bucket_bytes 0: one bucket of the whole buffer. Returned in start order (highest
// offset first); together they cover [0, num_params) exactly once. Throws Error on an empty layout.
std::vector<GradBucket> plan_grad_buckets(const std::vector<ParamTensor>& layout, size_t bucket_bytes);

// BucketedAllReduce: drives Communicator's bucketed all-reduce from GPT's GradReadyHook.
// begin() once per step before the last micro-step's backward, ready(offset) from the hook, finish()
// before the gradients are read (clipping, AdamW). The result equals comm.all_reduce(grads, count,
// op) under the conditions src/comm/comm.h states.
class BucketedAllReduce {
 public:
  BucketedAllReduce(Communicator& comm, std::vector<GradBucket> buckets);
  size_t num_buckets() const { return buckets_.size(); }
  // begin: grads (count) in backend memory; count must equal the buckets' total.
  void begin(float* grads, size_t count, ReduceOp op);
  // ready: every gradient at element `offset` and above is final: starts each bucket lying wholly
  // there that has not started, then lets started collectives progress.
  void ready(size_t offset);
  // finish: starts the buckets left, waits for all (throws Error naming the bucket that timed out).
  void finish();
  // A step recorded as a CUDA graph (needs Communicator::records_collectives): begin and ready inside
  // the recording as above, then join() in place of finish() (starts the buckets left and orders the
  // backend's stream after them, device side only); after each launch of the graph, wait() waits on the
  // host for that launch's buckets (Error naming the bucket that timed out). cancel(): a recording
  // abandoned part-way (called while unwinding, so it never throws): joins the buckets started so far
  // into the backend's stream, as join() would, so that the abandoned recording ends without unjoined
  // work on the communicator's stream; the next begin starts afresh.
  void join();
  void wait();
  void cancel() noexcept;

 private:
  std::string name(size_t i) const;  // "gradient bucket 2 of 5 (elements [a, b))"

  Communicator& comm_;
  std::vector<GradBucket> buckets_;
  size_t next_ = 0;  // the first bucket not started this step
  bool active_ = false;
};

}  // namespace xtrain
