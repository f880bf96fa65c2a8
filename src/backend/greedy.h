// The greedy rule of next-token choice, in one place for the host sampler (serve/sampler.h, temperature 0)
// and the Backend op argmax_rows (every backend's result is this function's on the same logits): the
// argmax, the lowest id among equal maxima; a non-finite logit is an error, named by its lowest id.
// It lives in the backend layer because the CPU backend's argmax_rows calls it (layers link downward only).
#pragma once

#include <cstdint>

namespace xtrain {

// argmax_code: logits (V) fp32 host, V >= 1 -> the lowest id of the maximum, in [0, V); or -1 - v when the
// row holds a non-finite logit (NaN, +-inf), v the lowest id of one (the encoding of Backend::argmax_rows).
int32_t argmax_code(const float* logits, int V);

// argmax_code_id: the id an argmax_code names either way: the argmax, or v of -1 - v (the lowest non-finite
// logit's id). A valid token id: what argmax_rows' `tokens` hold, what a run of greedy steps feeds on.
inline int32_t argmax_code_id(int32_t code) { return code >= 0 ? code : -1 - code; }

// fail_non_finite_logit: throws Error "logit of token v is x" (x as printed by an ostream), the one message
// for a non-finite logit, from the host sampler or from a device's argmax_rows.
[[noreturn]] void fail_non_finite_logit(int v, float x);

// greedy_token: logits (V) fp32 host -> argmax_code's id. Throws Error for V < 1 and, through
// fail_non_finite_logit, for a non-finite logit.
int greedy_token(const float* logits, int V);

}  // namespace xtrain
