// The data seam: train/validation split, the batch sampler, the validation windows and the
// validation loss (see src/train/batches.h).
#include <xtrain/train/batches.h>

#include <algorithm>
#include <cmath>
#include <string>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/core/rng.h>

namespace xtrain {

namespace {
// copy_window: sequence b of out: tokens [off, off + T) and its targets [off + 1, off + T + 1).
void copy_window(const TokenStream& s, size_t off, int T, Batch* out, int b) {
  std::vector<int32_t> w(static_cast<size_t>(T) + 1);
  s.copy(off, w.size(), w.data());
  std::copy_n(w.begin(), T, out->tokens.begin() + static_cast<size_t>(b) * T);
  std::copy_n(w.begin() + 1, T, out->targets.begin() + static_cast<size_t>(b) * T);
}
}  // namespace

TrainData make_train_data(TokenStream tokens, uint64_t tokenizer_fingerprint, const TrainConfig& cfg,
                          const TokenStream* val_tokens) {
  TrainData d;
  d.tokenizer_fingerprint = tokenizer_fingerprint;
  // --resume without the split's options: the checkpoint's split (resume_n_train), whatever --val-every
  // and --val-fraction default to now; more than the stream holds is other data, which the data hash names
  const bool resume_split = !val_tokens && cfg.resume_n_train > 0 && cfg.resume_n_train <= tokens.size();
  const bool use_val = resume_split ? cfg.resume_n_train < tokens.size() : cfg.val_every > 0 && (val_tokens || cfg.val_fraction > 0);
  if (val_tokens) {  // held out by --val-data: the training part is the whole --data stream
    d.n_train = tokens.size();
    if (use_val) tokens.append(*val_tokens);
  }
  const size_t n = tokens.size();
  if (resume_split)
    d.n_train = static_cast<size_t>(cfg.resume_n_train);
  else if (!val_tokens)
    d.n_train = use_val ? static_cast<size_t>(static_cast<double>(n) * (1.0 - cfg.val_fraction)) : n;
  // One global batch of distinct windows must fit in the training part (plus the shifted target).
  const size_t need = static_cast<size_t>(cfg.batch) * cfg.seq + 1;
  if (d.n_train < need)
    XT_FAIL("corpus too short: " << d.n_train << " training tokens"
                                 << (use_val && !val_tokens ? " (the rest of " + std::to_string(n) + " is held out by --val-fraction)" : std::string())
                                 << " but one global batch needs --batch x --seq + 1 = " << need);
  if (use_val && n - d.n_train < static_cast<size_t>(cfg.seq) + 1)
    XT_FAIL("corpus too short for validation: " << (n - d.n_train) << " held-out tokens, --seq " << cfg.seq
                                                << " needs " << cfg.seq + 1
                                                << (val_tokens ? " (give more --val-data or set --val-every 0)"
                                                               : " (raise --val-fraction or set --val-every 0)"));
  Xxh3Stream hash;
  tokens.for_each_chunk([&](const int32_t* ids, size_t count) {
    for (size_t i = 0; i < count; ++i)
      if (ids[i] < 0 || ids[i] >= cfg.model.V)
        XT_FAIL("token id " << ids[i] << " outside the vocabulary [0, " << cfg.model.V << ")");
    hash.update(ids, count * sizeof(int32_t));
  });
  d.hash = hash.digest();
  d.tokens = std::move(tokens);
  return d;
}

void fill_batch(const TrainData& data, const TrainConfig& cfg, int step, int micro, int rank, int world, Batch* out) {
  const int T = cfg.seq;
  const int micro_global = cfg.batch / cfg.grad_accum;  // sequences per micro-step, all ranks
  const size_t span = data.n_train - T;                 // valid window starts: [0, n_train - T)
  const uint64_t step_key = hash_key(hash_key(cfg.seed, kRngBatch), static_cast<uint64_t>(step));
  const uint64_t drop_key = hash_key(hash_key(cfg.seed, kRngDropout), static_cast<uint64_t>(step));
  out->seqs = micro_global / world;
  out->tokens.resize(static_cast<size_t>(out->seqs) * T);
  out->targets.resize(out->tokens.size());
  out->dropout_keys.clear();
  int b = 0;
  for (int j = 0; j < micro_global; ++j) {
    const int i = micro * micro_global + j;  // global sequence index in this optimizer step
    if (i % world != rank) continue;
    const size_t off = uniform_u64(step_key, static_cast<uint64_t>(i)) % span;
    copy_window(data.tokens, off, T, out, b);
    out->dropout_keys.push_back(hash_key(drop_key, static_cast<uint64_t>(i)));
    ++b;
  }
  XT_CHECK(b == out->seqs, "batch " << cfg.batch << " not divisible by grad_accum " << cfg.grad_accum << " x world "
                                    << world);
}

int val_seqs_total(const TrainData& data, const TrainConfig& cfg) {
  const size_t n_val = data.tokens.size() - data.n_train;
  if (n_val == 0) return 0;
  return static_cast<int>(std::min<size_t>(cfg.val_seqs, (n_val - 1) / cfg.seq));
}

std::vector<size_t> val_windows(const TrainData& data, const TrainConfig& cfg, int rank, int world) {
  std::vector<size_t> starts;
  const int seqs = val_seqs_total(data, cfg);
  for (int j = rank; j < seqs; j += world) starts.push_back(data.n_train + static_cast<size_t>(j) * cfg.seq);
  return starts;
}

void fill_windows(const TrainData& data, const std::vector<size_t>& starts, size_t first, int count, int T,
                  Batch* out) {
  out->seqs = count;
  out->tokens.resize(static_cast<size_t>(count) * T);
  out->targets.resize(out->tokens.size());
  out->dropout_keys.clear();
  for (int k = 0; k < count; ++k) {
    const size_t off = starts[first + k];
    copy_window(data.tokens, off, T, out, k);
  }
}

double validation_loss(const TrainConfig& cfg, const TrainData& data, GPT& model, Communicator& comm, int micro_local) {
  const int T = cfg.seq;
  const std::vector<size_t> mine = val_windows(data, cfg, comm.rank(), comm.world_size());
  Batch batch;
  double sum = 0;
  for (size_t c = 0; c < mine.size(); c += micro_local) {
    const int b = static_cast<int>(std::min<size_t>(micro_local, mine.size() - c));
    fill_windows(data, mine, c, b, T, &batch);
    sum += model.forward(batch.tokens.data(), batch.targets.data(), b, T, false, 0.0f, nullptr);
  }
  comm.all_reduce_sum_host(&sum, 1);
  const int seqs = val_seqs_total(data, cfg);
  return seqs > 0 ? sum / (static_cast<double>(seqs) * T) : std::nan("");
}

}  // namespace xtrain
