// The data seam (llm.c's dataloader.h in spirit): the token stream split into a training part and a
// held-out tail, the sampler of each micro-step's training windows, and the validation windows. The
// training loop only asks for the next batch; tests call the same sampler. Also the validation loss
// over those windows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/comm/comm.h>
#include <xtrain/data/token_stream.h>
#include <xtrain/model/model.h>
#include <xtrain/score/multiple_choice.h>
#include <xtrain/train/config.h>

namespace xtrain {

// EvalSets: the held-out sets scored at every --val-every besides the validation loss, identical on every
// rank: --eval NAME=FILES (a loss over their windows, held_out_loss) and --eval-mc NAME=FILE (multiple
// choice, score_mc), in command-line order.
struct EvalSets {
  struct Loss {
    std::string name;
    TokenStream tokens;
  };
  struct Mc {
    std::string name;
    McTokens items;
  };
  std::vector<Loss> loss;
  std::vector<Mc> mc;
  bool empty() const { return loss.empty() && mc.empty(); }
};

// TrainData: the token stream, identical on every rank (read-only views, e.g. memory-mapped token
// caches); split [0, n_train) train, rest validation; and the other held-out sets (evals).
struct TrainData {
  TokenStream tokens;
  size_t n_train = 0;
  uint64_t hash = 0;                   // xxh3_64 of the whole token stream as int32 little-endian ids (io.h)
  uint64_t tokenizer_fingerprint = 0;
  EvalSets evals;
};

// make_train_data: splits tokens by val_fraction (nothing is held out when validation is off) and
// checks that both parts are long enough for the configuration and that every id is in [0, V);
// throws Error with the numbers otherwise. One pass over the stream (the range check and the hash).
// With val_tokens (--val-data, e.g. llm.c's val shards): tokens are all for training, val_tokens are
// appended as the held-out part (when --val-every > 0) and val_fraction is not used. Without them,
// cfg.resume_n_train (a --resume's recorded split, at most the stream's size) is the training part.
TrainData make_train_data(TokenStream tokens, uint64_t tokenizer_fingerprint, const TrainConfig& cfg,
                          const TokenStream* val_tokens = nullptr);

// Batch: one rank's sequences of one micro-step. tokens and targets (B_local, T) (targets are the
// tokens shifted by one), dropout_keys (B_local): the base dropout key of each sequence.
struct Batch {
  int seqs = 0;  // B_local
  std::vector<int32_t> tokens, targets;
  std::vector<uint64_t> dropout_keys;
};

// fill_batch: micro-step `micro` (0 .. grad_accum-1) of optimizer step `step` (from 1) for `rank`
// of `world`. One counter-based stream keyed by (seed, step) draws the whole global batch of
// cfg.batch window starts, uniform over [0, n_train - T); global sequence i of the step belongs to
// micro-step i / (batch / grad_accum) and to rank i % world. Dropout keys are (seed, step, i), so
// neither windows nor masks depend on world size or micro-batching (rng.h). B_local = batch /
// (grad_accum * world): the caller has checked divisibility (check_world).
void fill_batch(const TrainData& data, const TrainConfig& cfg, int step, int micro, int rank, int world, Batch* out);

// val_seqs_total: validation windows per evaluation, all ranks: min(val_seqs, (n_val - 1) / T) for a
// held-out tail of n_val tokens (0 when nothing is held out).
int val_seqs_total(const TrainData& data, const TrainConfig& cfg);
// val_windows: start offsets (into data.tokens) of this rank's validation windows. Window j starts at
// n_train + j*T (consecutive, each reading T + 1 tokens for its shifted targets), j < val_seqs_total;
// window j is evaluated by rank j % world.
std::vector<size_t> val_windows(const TrainData& data, const TrainConfig& cfg, int rank, int world);

// fill_windows: tokens and targets (count, T) of the windows starting at starts[first .. first+count).
void fill_windows(const TrainData& data, const std::vector<size_t>& starts, size_t first, int count, int T,
                  Batch* out);

// validation_loss: mean loss over min(val_seqs, held-out windows) consecutive windows of the held-out
// tail, split i % world == rank, in chunks of `micro_local` sequences (forward only, no dropout). Collective over comm;
// NaN when there are no windows.
double validation_loss(const TrainConfig& cfg, const TrainData& data, GPT& model, Communicator& comm, int micro_local);

}  // namespace xtrain
