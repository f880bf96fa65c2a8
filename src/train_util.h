// Pieces of the training loop kept out of train.cpp: metrics file, step line, validation,
// checkpoint save/restore, parameter hashing.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "xtrain/optim.h"
#include "xtrain/train.h"

namespace xtrain {

// MetricsWriter: JSON lines, one object per record, flushed per line (rank 0 only; "" = disabled).
// resume_step 0 starts a new file; a resumed run (resume_step = the checkpoint's step) first drops the
// records after resume_step (and broken lines) from the existing file, then appends, so every step is
// recorded once. Throws Error when the file cannot be opened, rewritten or written.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, int resume_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
};

// print_step: one human-readable line per step (rank 0).
void print_step(int step, int steps, double loss, float lr, double grad_norm, double ms, double tok_per_s,
                double eta_s);

// validation_loss: mean loss over min(val_seqs, held-out windows) consecutive windows of the held-out
// tail, split i % world == rank, in chunks of `micro_local`. Collective.
double validation_loss(const TrainConfig& cfg, const TrainData& data, GPT& model, Communicator& comm, int micro_local);

// params_hash: XXH3-64 of the parameter bytes (for the across-rank identity check).
uint64_t params_hash(GPT& model, Backend& be);

// write_checkpoint: rank 0 saves params, AdamW state and metadata after `step` (others return).
void write_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be, int rank,
                      int step);

// restore_checkpoint: every rank reads cfg.resume, checks that it matches the model, data and
// batch configuration (Error naming the field otherwise), loads params and AdamW state, and returns
// the step it was written after. Rank 0 prints the line "resumed from ...".
int restore_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be,
                       int rank);

}  // namespace xtrain
