// Checkpoints: parameters, AdamW state, step, model config and the identity of the data and
// tokenizer, in one file with a header and an XXH3-64 checksum over everything before it.
// Batch sampling and dropout are counter-based (rng.h), keyed by (seed, step), so seed + step are
// the whole RNG and data-loader state. Written atomically (write_file_atomic, io.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/host_collectives.h"
#include "core/progress.h"
#include "model/model.h"
#include "train/batches.h"
#include "train/config.h"
#include "train/optim.h"

namespace xtrain {

struct CheckpointMeta {
  GPTConfig model;
  int32_t step = 0;           // optimizer steps completed
  int32_t batch = 0;          // global sequences per optimizer step
  int32_t grad_accum = 1;
  int32_t total_steps = 0;    // the LR schedule's length
  float dropout = 0.0f;
  float lr = 0, min_lr_frac = 0, weight_decay = 0, grad_clip = 0;  // the rest of the schedule (OptimConfig)
  int32_t warmup = 0;
  uint64_t seed = 0;
  uint64_t tokenizer_fingerprint = 0;
  uint64_t data_hash = 0;     // TrainData::hash: XXH3-64 of the token stream
  uint64_t n_train = 0;       // tokens in the training part (the rest is held out for validation)
  uint64_t num_params = 0;
};

struct CheckpointState {
  CheckpointMeta meta;
  std::vector<float> params, m, v;  // (num_params) each
};

// save_checkpoint: writes `path` atomically; a crash leaves either the old file or the new one.
// Returns the XXH3-64 checksum stored at the file's end. A file of kLongWorkBytes or more gets
// progress lines (progress.h). Throws Error naming the path and the OS error, or refusing a path that
// is not a regular file.
uint64_t save_checkpoint(const std::string& path, const CheckpointState& st);

// parse_checkpoint: the bytes of a checkpoint file -> state; `path` names it in errors. Throws Error
// "checkpoint <path>: <why>" for bad magic, another format version, a truncated file, a size that
// does not match the header's parameter count, a checksum mismatch, or a header field out of range
// (a dimension, step, batch, grad_accum or parameter count <= 0, step > total_steps, dropout outside
// [0, 1)). Never reads outside `bytes` (fuzzed: tests/fuzz).
CheckpointState parse_checkpoint(const std::string& bytes, const std::string& path);

// check_checkpoint_file: the checks of parse_checkpoint that need only the file's head and size (magic,
// version, header, header fields, the size the parameter count implies), in milliseconds however large
// the file: a damaged or truncated --resume is refused before the corpus is read. The checksum is
// checked when the file is read (load_checkpoint). Throws Error as parse_checkpoint and load_checkpoint.
void check_checkpoint_file(const std::string& path);

// load_checkpoint: reads `path` and parse_checkpoint()s it; also throws Error for a missing file and
// "checkpoint <path>: cannot read: not a regular file" for a FIFO, device or directory (never blocks).
// `rank`: the caller's rank; on rank 0 a file of kLongWorkBytes or more gets progress lines
// (progress.h; `progress` says where, e.g. stderr for a tool whose stdout is its output).
CheckpointState load_checkpoint(const std::string& path, int rank = 0,
                                const ProgressOptions& progress = long_work_options());

// ---- the training run's side: what goes into a checkpoint and what a resume must match ----

// write_checkpoint: called by every rank of `group` after `step`: rank 0 copies params, AdamW state and
// metadata to the host, then saves them (save_checkpoint) on a worker thread while every rank keeps
// meeting under the group's deadline (agree_while_working, agree.h), so a write that outlasts
// --comm-timeout does not end the job. Returns the file's XXH3-64 checksum on rank 0, 0 elsewhere. A
// failure (non-finite parameters, which never replace a good checkpoint; an I/O error) ends every
// rank with AgreedFailure, rank 0 printing "step N: <cause>".
uint64_t write_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be,
                          HostCollectives& group, int step);

// restore_checkpoint: called by every rank of `group`: each reads cfg.resume on a worker thread while the
// ranks keep meeting under the deadline (agree_while_working), checks that it matches the model
// (description and parameter count), data, batch and schedule configuration (--steps, --lr, --warmup,
// --min-lr-frac, --weight-decay, --grad-clip; Error naming the option otherwise) and holds possible
// values (finite, second moments >= 0), loads params and AdamW state, and returns the step it was
// written after. Rank 0 prints the line "resumed from ...". A failure ends every rank (AgreedFailure).
int restore_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be,
                       HostCollectives& group);

}  // namespace xtrain
