// Next-token sampling from logits: greedy, temperature, top-k and top-p (nucleus), in the order Hugging
// Face transformers applies them (temperature, then top-k, then top-p). The one home of these rules; every
// draw is a pure function of (seed, sequence, step) through the counter-based RNG (rng.h), so a seed
// reproduces a generation exactly on any machine and backend that gives the same logits.
#pragma once

#include <cstdint>

namespace xtrain {

struct SamplerOptions {
  float temperature = 1.0f;  // 0 = greedy (argmax); else logits are divided by it (> 0)
  int top_k = 0;             // keep the k most probable tokens (0 = all)
  float top_p = 1.0f;        // keep the smallest most-probable set with probability >= top_p, in (0, 1]
  // validate: throws UsageError naming the option (--temperature, --top-k, --top-p) for a bad value.
  void validate() const;
};

// sample_token: logits (V) fp32 host -> a token id in [0, V).
// temperature 0: the argmax (the lowest id among equal maxima; top-k/top-p do not matter): greedy_token
// (backend/greedy.h), the rule Backend::argmax_rows computes on the device too.
// Otherwise p = softmax(logits / temperature) in double; tokens are ranked by p (ties: lower id first);
// the first top_k are kept (all when 0), then the shortest prefix of them whose probability sum reaches
// top_p * (their total) (nucleus sampling, Holtzman et al. 2020, "The Curious Case of Neural Text
// Degeneration"; at least one token); one uniform draw u in [0, 1) (53 bits of uniform_u64(key, counter))
// picks from the kept tokens by their renormalized cumulative probability, in rank order (in id order
// when nothing is cut: top_k 0 and top_p 1).
// Throws Error for V < 1 or non-finite logits (a NaN would make the ranking meaningless), with
// fail_non_finite_logit's message naming the lowest such id.
int sample_token(const float* logits, int V, const SamplerOptions& opts, uint64_t key, uint64_t counter);

// sampling_key: the RNG stream key of sequence `seq` of a generation seeded with `seed`; the draw for the
// n-th generated token of that sequence is counter n.
uint64_t sampling_key(uint64_t seed, uint64_t seq);

}  // namespace xtrain
