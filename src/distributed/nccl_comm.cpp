// NcclCommunicator: the Communicator on CUDA device memory through NCCL. Collectives run on a side
// stream ordered against the backend's compute stream by events (llm.c style; never a device-wide
// sync). The communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call can hang the
// host: every wait polls ncclCommGetAsyncError against a deadline, and a collective that does not
// finish within comm_timeout_s aborts the communicator (ncclCommAbort) and throws Error naming the
// rank and the operation, so main can end the whole job instead of leaving ranks waiting. The
// host-side collectives (the loss sums included) go through the HostCollectives the launcher gives
// (the MPI communicator under xtrain_mpi, the in-process one under xtrain_threads), bounded by the
// same deadline. The ncclUniqueId travels over the start-up collectives: the same code serves one
// process per GPU and one thread per GPU (ncclCommInitRank on each thread).
#include "distributed/nccl_comm.h"

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "comm/mpi/comm_mpi.h"
#include <xtrain/comm/mpi/mpi_context.h>
#include "comm/placement.h"

namespace xtrain {

namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(HostCollectives& startup, std::unique_ptr<HostCollectives> host, cuda::CudaBackend& be,
                   double comm_timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  std::string host() const override { return host_->host(); }
  int node_id() const override { return host_->node_id(); }
  double deadline_s() const override { return comm_timeout_s; }

  // all_reduce: NCCL counts are elements (ncclFloat), never bytes; avg is ncclAvg (NCCL >= 2.10).
  void all_reduce(float* buf, size_t count, ReduceOp op) override {
    if (count == 0) return;
    begin("all_reduce", count);
    XT_NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, op == ReduceOp::avg ? ncclAvg : ncclSum, comm_,
                                stream_));
    finish();
  }

  // Bucketed all-reduce: each bucket's ncclAllReduce is enqueued on the side stream after an event
  // recorded on the compute stream when the bucket starts (after the kernels that wrote it), so it
  // runs while the rest of backward computes; an event per bucket lets bucketed_wait name the bucket
  // that does not complete; bucketed_join makes the compute stream wait for the side stream.
  // Recorded into a CUDA graph (the compute stream capturing: Backend::capture_graph), the side stream
  // joins the capture through those events, the collectives become graph nodes (NCCL supports stream
  // capture), and the per-bucket events are recorded as external event nodes (cudaEventRecordExternal),
  // recorded again by each launch, which bucketed_wait then polls.
  bool records_collectives() const override { return true; }
  bool failed() const override { return aborted_; }
  void bucketed_begin(float* buf, size_t count, ReduceOp op) override {
    if (aborted_) XT_FAIL("NCCL bucketed all-reduce on rank " << rank() << ": the communicator was aborted earlier");
    Communicator::bucketed_begin(buf, count, op);
    started_.clear();
    recorded_ = capturing();
  }
  void bucketed_start(size_t offset, size_t count, const std::string& what) override {
    XT_CHECK(offset + count <= bucket_count_, "bucket [" << offset << ", " << offset + count << ") outside "
                                                         << bucket_count_ << " gradients");
    if (count == 0) return;
    begin("all_reduce", count);
    op_ = what;
    // --timeline: marks on the side stream, after its wait for the compute stream and after the collective
    const size_t start = tracing() ? trace_clock().mark() : 0;
    XT_NCCL_CHECK(ncclAllReduce(bucket_buf_ + offset, bucket_buf_ + offset, count, ncclFloat,
                                bucket_op_ == ReduceOp::avg ? ncclAvg : ncclSum, comm_, stream_));
    wait_nccl();  // enqueued
    if (tracing()) trace_->collective(what, trace_clock(), start, trace_clock().mark());
    if (bucket_done_.size() <= started_.size()) {
      cudaEvent_t ev = nullptr;
      XT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      bucket_done_.push_back(ev);
    }
    XT_CUDA_CHECK(cudaEventRecordWithFlags(bucket_done_[started_.size()], stream_,
                                           recorded_ ? cudaEventRecordExternal : cudaEventRecordDefault));
    started_.push_back({what, count});
  }
  void bucketed_join() override {
    XT_CUDA_CHECK(cudaEventRecord(done_, stream_));
    XT_CUDA_CHECK(cudaStreamWaitEvent(be_.stream(), done_, 0));
  }
  // bucketed_wait: polls each started bucket's event under one deadline, naming the bucket that does not
  // complete. After a launch of a recorded step it also polls an event recorded on the compute stream
  // now, behind the whole launch (which ends joined to every bucket): the host returns only once every
  // bucket of this launch has completed, whatever an event node's state between launches.
  void bucketed_wait() override {
    XT_CHECK(!capturing(), "NCCL bucketed_wait inside a CUDA graph recording (wait after its launch)");
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(comm_timeout_s));
    for (size_t i = 0; i < started_.size(); ++i) {
      op_ = started_[i].first;
      count_ = started_[i].second;
      wait_event(bucket_done_[i]);
    }
    if (recorded_ && !started_.empty()) {
      XT_CUDA_CHECK(cudaEventRecord(done_, be_.stream()));
      wait_event(done_);  // op_ still names the last bucket
    }
  }
  void bucketed_finish() override {
    bucketed_join();
    bucketed_wait();
  }

  void broadcast(float* buf, size_t count, int root) override {
    if (count == 0) return;
    begin("broadcast", count);
    XT_NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, root, comm_, stream_));
    finish();
  }

  // all_reduce_sum_host: host values (the loss sums, the stop flag, counts) go through the host
  // collectives (MPI under mpirun/srun, under the same --comm-timeout deadline), not NCCL: a device round
  // trip would cost three stream synchronizations per step and wait behind the queued GPU work.
  void all_reduce_sum_host(double* x, int count) override { host_->all_reduce_sum_host(x, count); }
  void all_reduce_max_host(double* x, int count) override { host_->all_reduce_max_host(x, count); }
  uint64_t all_reduce_min_host(uint64_t x) override { return host_->all_reduce_min_host(x); }
  uint64_t all_reduce_max_host(uint64_t x) override { return host_->all_reduce_max_host(x); }
  void broadcast_host(void* data, size_t bytes, int root) override { host_->broadcast_host(data, bytes, root); }

  // barrier: this rank's queued GPU work is done, then every rank meets (host side, under the deadline).
  void barrier() override {
    be_.synchronize();
    host_->barrier();
  }

  double comm_timeout_s = 300.0;  // seconds a collective (or init) may take before the abort

 private:
  using Clock = std::chrono::steady_clock;

  // begin: checks the communicator is alive, starts the deadline, orders the side stream after the
  // work queued so far on the compute stream.
  void begin(const char* op, size_t count);
  // finish: waits (polling, with the deadline) for the enqueued collective, then orders the compute
  // stream after it.
  void finish();
  // wait_event: polls ev (recorded on the side stream) until it completes, with poll_nccl's deadline.
  void wait_event(cudaEvent_t ev);
  // poll_nccl: true once NCCL no longer reports ncclInProgress; throws on an NCCL error or timeout.
  bool poll_nccl();
  // wait_nccl: polls until the last NCCL call (init, enqueue) has completed on the host side.
  void wait_nccl();
  [[noreturn]] void abort_and_throw(const std::string& why);
  // capturing: the compute stream is recording a CUDA graph (Backend::capture_graph).
  bool capturing() const {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    XT_CUDA_CHECK(cudaStreamIsCapturing(be_.stream(), &st));
    return st == cudaStreamCaptureStatusActive;
  }
  // trace_clock: CUDA events on the side stream, on the compute clock's base (--timeline).
  TimelineClock& trace_clock() override {
    if (!clock_) clock_ = be_.make_stream_clock(stream_);
    return *clock_;
  }

  std::unique_ptr<HostCollectives> host_;
  cuda::CudaBackend& be_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  std::string op_ = "init";
  size_t count_ = 0;
  Clock::time_point deadline_;
  bool aborted_ = false;
  std::vector<cudaEvent_t> bucket_done_;  // per started bucket, recorded after its all-reduce (reused)
  std::vector<std::pair<std::string, size_t>> started_;  // this step's buckets: name, elements
  bool recorded_ = false;  // the buckets since bucketed_begin were recorded into a CUDA graph
  std::unique_ptr<TimelineClock> clock_;  // made on the first traced collective
};

// Refuse two ranks bound to one GPU before NCCL would (it fails with "Duplicate GPU detected" only
// after a collective init, and not with a message naming the placement). A GPU is (node, PCI bus id),
// the node from HostCollectives::node_id (the shared-memory split under mpirun), as hostnames may repeat
// across nodes. The gathered table is the same on every rank, so every rank throws alike and none is
// left waiting.
void check_one_rank_per_gpu(HostCollectives& group, const cuda::CudaBackend& be) {
  const std::vector<std::string> all =
      gather_strings(group, std::to_string(group.node_id()) + " " + be.pci_bus_id() + " " + group.host());
  std::map<std::string, int> first;  // (node id, bus id) -> first rank
  for (int r = 0; r < int(all.size()); ++r) {
    const size_t node_end = all[r].find(' '), bus_end = all[r].find(' ', node_end + 1);
    const std::string gpu = all[r].substr(0, bus_end);  // without the host: a message, not identity
    auto [it, inserted] = first.emplace(gpu, r);
    if (!inserted)
      XT_FAIL("ranks " << it->second << " and " << r << " are both bound to the GPU at PCI bus id "
                       << all[r].substr(node_end + 1, bus_end - node_end - 1) << " on " << all[r].substr(bus_end + 1)
                       << "; start one rank per GPU (check CUDA_VISIBLE_DEVICES and the launcher's GPU binding)");
  }
}

NcclCommunicator::NcclCommunicator(HostCollectives& startup, std::unique_ptr<HostCollectives> host,
                                   cuda::CudaBackend& be, double timeout_s)
    : comm_timeout_s(timeout_s), host_(std::move(host)), be_(be) {
  XT_CHECK(timeout_s > 0, "comm_timeout_s " << timeout_s << " must be positive");
  XT_CHECK(host_ && host_->rank() == startup.rank() && host_->world_size() == startup.world_size(),
           "the NCCL communicator's host collectives must be this rank's, in the same world");
  check_one_rank_per_gpu(startup, be);
  ncclUniqueId id{};
  if (startup.rank() == 0) XT_NCCL_CHECK(ncclGetUniqueId(&id));
  startup.broadcast_host(&id, sizeof(id), 0);
  startup.barrier();
  XT_CUDA_CHECK(cudaSetDevice(be.device()));
  XT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  XT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  XT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  op_ = "init";
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  XT_NCCL_CHECK(ncclCommInitRankConfig(&comm_, startup.world_size(), id, startup.rank(), &config));
  wait_nccl();
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ && !aborted_) {
    // Finalize flushes outstanding work; bounded like every other wait, then destroy (or abort).
    ncclResult_t st = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (st == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) break;
    }
    if (st == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  for (cudaEvent_t ev : bucket_done_) cudaEventDestroy(ev);
  if (done_) cudaEventDestroy(done_);
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::begin(const char* op, size_t count) {
  op_ = op;
  count_ = count;
  if (aborted_) XT_FAIL("NCCL " << op << " on rank " << rank() << ": the communicator was aborted earlier");
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(comm_timeout_s));
  XT_CUDA_CHECK(cudaEventRecord(ready_, be_.stream()));
  XT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
}

void NcclCommunicator::finish() {
  wait_nccl();  // the collective is enqueued
  XT_CUDA_CHECK(cudaEventRecord(done_, stream_));
  XT_CUDA_CHECK(cudaStreamWaitEvent(be_.stream(), done_, 0));
  // Wait for completion on the host too: a peer that died leaves the kernel spinning, and only this
  // poll can notice and abort.
  wait_event(done_);
}

void NcclCommunicator::wait_event(cudaEvent_t ev) {
  for (int spins = 0;; ++spins) {
    const cudaError_t rc = cudaEventQuery(ev);
    if (rc == cudaSuccess) break;
    if (rc != cudaErrorNotReady) XT_CUDA_CHECK(rc);
    poll_nccl();
    if (spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool NcclCommunicator::poll_nccl() {
  ncclResult_t st = ncclSuccess;
  XT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &st));
  if (st != ncclSuccess && st != ncclInProgress)
    abort_and_throw(std::string(ncclGetErrorString(st)) + ": " + ncclGetLastError(comm_));
  if (Clock::now() > deadline_) {
    std::ostringstream os;
    os << "did not finish within " << comm_timeout_s << " s (a peer rank may have failed or be stuck)";
    abort_and_throw(os.str());
  }
  return st == ncclSuccess;
}

void NcclCommunicator::wait_nccl() {
  for (int spins = 0; !poll_nccl(); ++spins) {
    if (spins < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Since NCCL 2.26 ncclCommAbort waits, in the calling thread, until every CUDA graph holding one of the
// communicator's captured collectives is destroyed; a recorded step (--cuda-graph on) still holds them
// here, so aborting would hang this rank instead of ending the job. Then the communicator is left as it
// is (never used again: aborted_) and the error goes up to main, which ends every rank (MPI_Abort; the
// process exit releases NCCL's resources).
void NcclCommunicator::abort_and_throw(const std::string& why) {
  aborted_ = true;
  const bool graph_may_hold = recorded_;
  if (!graph_may_hold) ncclCommAbort(comm_);
  comm_ = nullptr;
  std::ostringstream os;
  os << "NCCL " << op_;
  if (op_ != "init") os << " of " << count_ << " elements";
  os << " on rank " << rank() << ": " << why
     << (graph_may_hold ? "; communicator left for the job's end (a recorded CUDA graph holds it)"
                        : "; communicator aborted");
  throw Error(os.str());
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(HostCollectives& startup, std::unique_ptr<HostCollectives> host,
                                                     Backend& backend, double comm_timeout_s) {
  XT_CHECK(backend.kind() == Device::cuda, "the NCCL communicator needs the CUDA backend, got '" << backend.name() << "'");
  return std::make_unique<NcclCommunicator>(startup, std::move(host), static_cast<cuda::CudaBackend&>(backend),
                                            comm_timeout_s);
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiContext& mpi, Backend& backend, double comm_timeout_s) {
  return make_nccl_communicator(mpi, make_mpi_communicator(mpi, comm_timeout_s), backend, comm_timeout_s);
}

}  // namespace xtrain
