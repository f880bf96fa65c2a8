// Next-token sampling (src/serve/sampler.h): greedy, temperature, top-k, top-p.
#include <xtrain/serve/sampler.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "backend/greedy.h"
#include <xtrain/core/error.h>
#include <xtrain/core/rng.h>

namespace xtrain {

namespace {
std::string str(float x) {  // shortest form: "-1", "0.95"
  std::ostringstream os;
  os << x;
  return os.str();
}
}  // namespace

void SamplerOptions::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    throw UsageError("--temperature must be >= 0 (0 = greedy), got " + str(temperature));
  if (top_k < 0) throw UsageError("--top-k must be >= 0 (0 = all tokens), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) throw UsageError("--top-p must be in (0, 1], got " + str(top_p));
}

uint64_t sampling_key(uint64_t seed, uint64_t seq) { return hash_key(hash_key(seed, kRngSample), seq); }

int sample_token(const float* logits, int V, const SamplerOptions& opts, uint64_t key, uint64_t counter) {
  XT_CHECK(V >= 1, "sample_token: empty vocabulary");
  if (opts.temperature == 0.0f) return greedy_token(logits, V);  // the rule argmax_rows shares
  for (int v = 0; v < V; ++v)
    if (!std::isfinite(logits[v])) fail_non_finite_logit(v, logits[v]);

  // rank tokens by logit, descending, ties by lower id; only the first k need ordering. With nothing cut
  // (top_k 0, top_p 1) the order does not change the distribution and the ids stay in id order (no sort:
  // ranking 50257 logits per token would cost more than a small model's forward).
  const int k = opts.top_k > 0 ? std::min(opts.top_k, V) : V;
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < V) std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), before);
  else if (opts.top_p < 1.0f) std::sort(ids.begin(), ids.end(), before);

  // softmax(logits / T) over the kept k, shifted by the maximum (no overflow); the normalizer over all V
  // cancels in the renormalization below, so it is never computed
  const double inv_t = 1.0 / opts.temperature, mx = *std::max_element(logits, logits + V);
  std::vector<double> p(k);
  double total = 0.0;
  for (int i = 0; i < k; ++i) total += (p[i] = std::exp((double(logits[ids[i]]) - mx) * inv_t));
  // nucleus: the shortest prefix whose mass reaches top_p of the kept mass (HF: of the whole distribution
  // after top-k, which is the same set)
  int n = k;
  if (opts.top_p < 1.0f) {
    const double target = double(opts.top_p) * total;
    double cum = 0.0;
    for (n = 0; n < k;) {
      cum += p[n++];
      if (cum >= target) break;
    }
  }
  double kept = 0.0;
  for (int i = 0; i < n; ++i) kept += p[i];
  const double u = double(uniform_u64(key, counter) >> 11) * (1.0 / 9007199254740992.0) * kept;  // [0, kept)
  double cum = 0.0;
  for (int i = 0; i < n; ++i) {
    cum += p[i];
    if (u < cum) return ids[i];
  }
  return ids[n - 1];  // u within rounding of `kept`
}

}  // namespace xtrain
