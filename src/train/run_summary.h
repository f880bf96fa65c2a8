// Run summary: what a run did, as the `final` record of the metrics file and as the lines rank 0
// prints at the end (short enough to paste into a report). One struct feeds both, so the record and
// the printed figures cannot disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain {

struct RunSummary {
  // Steps this run (segment) took: first_step..last_step; first_step > last_step when a resumed run
  // had no step left.
  int first_step = 1, last_step = 0;
  int world_size = 1;
  uint64_t params = 0;           // the model's parameters (GPT::num_params(): wte rows padded to Vp); 0 = not given
  uint64_t tokens_per_step = 0;  // global: batch sequences x seq tokens
  double wall_s = 0;             // seconds of train_rank: resume, steps, validation, checkpoints
  double tok_per_s = 0;          // global tokens per second, mean over the steps after the first
  std::optional<double> mfu;     // fraction (mfu.h); none on CPUs and on GPUs without a known peak
  std::optional<double> train_loss;  // global mean train loss at last_step (nats per token)
  std::optional<double> val_loss;    // the last validation loss, at val_step
  int val_step = 0;
  uint64_t peak_memory_bytes = 0;  // rank 0's Backend::peak_memory_bytes(); 0 = not tracked (CPU)
  double max_param_diff = 0;       // max |p_rank - p_rank0| at the end (train.h)
  std::string ckpt;                // the last checkpoint written, "" = none
  uint64_t ckpt_xxh3 = 0;           // its checksum: the XXH3-64 stored at its end (checkpoint.h)
  std::string timeline;            // the --timeline file written, "" = none
  int timeline_first = 0, timeline_last = 0;  // the steps it holds (first > last: none)

  // tokens_seen: tokens trained on from step 1 to last_step, earlier run segments included.
  uint64_t tokens_seen() const { return static_cast<uint64_t>(last_step) * tokens_per_step; }
};

// final_record: the metrics file's `final` record: type "final", step (= last_step), first_step,
// world_size, tokens_seen, wall_s, tok_per_s, max_param_diff; and where known mfu, loss, val_loss with
// val_step, params, peak_memory_bytes, ckpt with ckpt_xxh3 (16 lowercase hex digits, a string: JSON numbers
// lose 64-bit integers in most readers), timeline. Throws Error for inconsistent fields (negative times
// or rates, first_step < 1, a checksum without a checkpoint path).
nlohmann::json final_record(const RunSummary& s);

// summary_lines: the end-of-run lines, without newlines, e.g.
//   done   | steps 1-100 | world 2 | 204,800 tokens seen | wall 1m23s
//   loss   | train 5.0857 (step 100) | val 5.3538 (step 100)
//   speed  | 2,412 tok/s (mean after the first step) | MFU 34.4%
//   memory | peak device memory: 9768 MiB (rank 0, xtrain's allocator)
//   max parameter difference across 2 ranks: 0.000e+00
//   ckpt   | run.ckpt | xxh3 0123456789abcdef
//   trace  | run.trace.json | steps 2-4 (rank 0's --timeline, Chrome trace format)
// Parts and lines whose figure is unknown are left out. Same checks as final_record.
std::vector<std::string> summary_lines(const RunSummary& s);

}  // namespace xtrain
