// The data-parallel training step, identical on every rank (train_rank), and the data it reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xtrain/backend.h"
#include "xtrain/comm.h"
#include "xtrain/model.h"
#include "xtrain/mpi_context.h"
#include "xtrain/optim.h"

namespace xtrain {

struct TrainConfig {
  GPTConfig model;
  OptimConfig optim;
  int batch = 16;          // GLOBAL sequences per optimizer step (all ranks, all micro-steps)
  int seq = 128;           // T, tokens per sequence
  int steps = 100;         // optimizer steps to reach (a resumed run continues up to this step)
  int stop_after = 0;      // end this run after N steps (checkpoint written); schedule still spans `steps`
  int grad_accum = 1;      // micro-steps per optimizer step
  float dropout = 0.0f;    // GPT-2 embd/resid dropout probability
  uint64_t seed = 1337;    // init, batch sampling and dropout streams
  double val_fraction = 0.1;  // tail of the token stream held out for validation
  int val_every = 25;      // validation every N steps (and at the last step); 0 = never
  int val_seqs = 64;       // validation sequences (global) per evaluation
  int log_every = 1;       // print a step line every N steps (metrics file gets every step)
  std::string ckpt;        // checkpoint path ("" = none)
  int ckpt_every = 0;      // also write the checkpoint every N steps (0 = only at the end)
  std::string resume;      // checkpoint to resume from ("" = fresh start)
  std::string metrics;     // JSON-lines metrics file (rank 0 writes; "" = none)
};

// TrainData: the token stream, identical on every rank; split [0, n_train) train, rest validation.
struct TrainData {
  std::vector<int32_t> tokens;
  size_t n_train = 0;
  uint64_t hash = 0;                   // fnv1a64 of the whole token stream
  uint64_t tokenizer_fingerprint = 0;
};

// make_train_data: splits tokens by val_fraction and checks that both parts are long enough for
// the configuration; throws Error with the numbers when the corpus is too short.
TrainData make_train_data(std::vector<int32_t> tokens, uint64_t tokenizer_fingerprint, const TrainConfig& cfg);

struct TrainResult {
  int first_step = 0, last_step = 0;
  std::vector<double> losses;  // global mean train loss per step run
  double max_param_diff = 0;   // max |p_rank_i - p_rank_0| over all parameters at the end
  double tok_per_s = 0;        // global tokens per second over the steps after the first
};

// train_rank: the training loop every rank runs. Each step one counter-based RNG keyed by
// (seed, step) draws the whole global batch of B sequence offsets; rank r computes sequences
// i % world == r, in grad_accum micro-steps; loss is the mean over the global batch; gradients are
// averaged with ONE all-reduce over the flat buffer; then clipping and AdamW. Rank 0 prints and
// writes metrics and checkpoints. Throws AgreedFailure (after printing) on a non-finite loss.
TrainResult train_rank(const TrainConfig& cfg, const TrainData& data, GPT& model, Backend& be, Communicator& comm,
                       MpiContext& mpi);

// max_param_diff: max over all parameters and ranks of |p_rank - p_rank0| (broadcast + one max).
double max_param_diff(GPT& model, Backend& be, MpiContext& mpi);

// check_same_on_all_ranks: throws Error naming `what` when the 64-bit value differs across ranks.
void check_same_on_all_ranks(const MpiContext& mpi, uint64_t value, const std::string& what);

}  // namespace xtrain
