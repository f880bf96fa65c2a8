// The greedy rule of next-token choice (src/backend/greedy.h) and the argument check of Backend::argmax_rows.
#include "backend/greedy.h"

#include <xtrain/backend/backend.h>

#include <cmath>

#include <xtrain/core/error.h>

namespace xtrain {

int32_t argmax_code(const float* logits, int V) {
  int32_t best = 0;
  for (int v = 0; v < V; ++v) {
    if (!std::isfinite(logits[v])) return -1 - v;
    if (logits[v] > logits[best]) best = v;  // strictly greater: the first of equal maxima stays
  }
  return best;
}

void fail_non_finite_logit(int v, float x) { XT_FAIL("logit of token " << v << " is " << x); }

void check_argmax_rows_args(int rows, int V, int ld) {
  XT_CHECK(rows >= 0 && V >= 1 && ld >= V, "argmax_rows: rows " << rows << ", V " << V << ", row stride " << ld
                                                                  << " (need rows >= 0, V >= 1, stride >= V)");
}

int greedy_token(const float* logits, int V) {
  XT_CHECK(V >= 1, "greedy_token: empty vocabulary");
  const int32_t code = argmax_code(logits, V);
  if (code < 0) fail_non_finite_logit(-1 - code, logits[-1 - code]);
  return code;
}

}  // namespace xtrain
