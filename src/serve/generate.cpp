// Generation loop over a Decoder and the UTF-8 streaming of its output (src/serve/generate.h).
#include <xtrain/serve/generate.h>

#include <chrono>

#include "backend/greedy.h"
#include <xtrain/core/error.h>

namespace xtrain {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<std::vector<int32_t>> generate(Decoder& dec, const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerateOptions& opts,
                                           const std::function<void(int, int32_t)>& on_token,
                                           GenerateStats* stats) {
  const int B = dec.batch();
  XT_CHECK(int(prompts.size()) == B, "generate: " << prompts.size() << " prompts for a decoder of batch " << B);
  const size_t T = prompts[0].size();
  XT_CHECK(T >= 1, "generate: the prompt is empty (at least one token is needed)");
  std::vector<int32_t> batch;  // (B,T)
  for (const auto& p : prompts) {
    XT_CHECK(p.size() == T, "generate: prompts of a batch must have equal lengths (" << p.size() << " vs " << T << ")");
    batch.insert(batch.end(), p.begin(), p.end());
  }
  const int V = dec.vocab_size(), maxT = dec.context();
  XT_CHECK(int(T) <= maxT, "the prompt has " << T << " tokens; the model's context is " << maxT);
  opts.sampler.validate();

  GenerateStats st;
  st.prompt_tokens = int(T);
  std::vector<std::vector<int32_t>> out(B);
  std::vector<uint64_t> keys(B);
  for (int b = 0; b < B; ++b) keys[b] = sampling_key(opts.seed, uint64_t(b));
  std::vector<char> done(B, 0);
  std::vector<std::vector<int32_t>> seqs(prompts);  // every token fed so far: the crop's source
  int live = B;
  // temperature 0 with the device path: the argmax on the device, B ids copied back per step (append_greedy),
  // and from the second token on runs of Decoder::kGreedySteps steps whose tokens the device feeds itself
  // (append_greedy_steps: the host neither waits nor launches between them); otherwise the host sampler on the
  // copied logits. The same tokens (greedy_token is the rule of all three).
  const bool device_greedy = opts.sampler.temperature == 0.0f && opts.device_greedy;
  const std::vector<float>* logits = nullptr;
  const std::vector<int32_t>* ids = nullptr;
  auto forward = [&](const int32_t* tokens, int Tn) {
    if (device_greedy) ids = &dec.append_greedy(tokens, Tn);
    else logits = &dec.append(tokens, Tn, false);
  };
  auto t0 = std::chrono::steady_clock::now();
  dec.reset();
  forward(batch.data(), int(T));
  std::vector<int32_t> next(B);
  // a run of append_greedy_steps: its (run_steps, B) codes, the step whose ids come next, the position of its
  // first step, and the (run_steps, B) tokens its steps were fed (next, then each step's ids made valid)
  const std::vector<int32_t>* run = nullptr;
  int run_steps = 0, run_at = 0, run_pos0 = 0;
  std::vector<int32_t> run_in;
  const int32_t* step_ids = nullptr;  // this step's B greedy codes (device_greedy)
  double record_s = 0.0;  // the decoder's recording seconds at the end of the first decoding call
  for (int n = 0; n < opts.max_new_tokens && live > 0; ++n) {
    if (n == 0 && device_greedy) step_ids = ids->data();
    if (n > 0 && run_at < run_steps) {  // the run's next step, already computed
      step_ids = run->data() + size_t(run_at) * B;
      for (int b = 0; b < B; ++b) seqs[b].push_back(run_in[size_t(run_at) * B + b]);
      ++run_at;
    } else if (n > 0) {
      if (dec.position() >= maxT) {  // full: the window becomes the last maxT - 1 tokens and `next`
        dec.reset();
        if (maxT > 1) {
          std::vector<int32_t> window;  // (B, maxT-1)
          for (const auto& s : seqs) window.insert(window.end(), s.end() - (maxT - 1), s.end());
          forward(window.data(), maxT - 1);
        }
        ++st.context_crops;
      }
      const int left = opts.max_new_tokens - n;  // steps this generation can still use
      if (device_greedy && left >= Decoder::kGreedySteps && maxT - dec.position() >= Decoder::kGreedySteps) {
        run_pos0 = dec.position(), run_steps = Decoder::kGreedySteps, run_at = 1;
        run = &dec.append_greedy_steps(next.data(), run_steps);
        run_in.assign(next.begin(), next.end());
        for (size_t i = 0; i + B < size_t(run_steps) * B; ++i) run_in.push_back(argmax_code_id((*run)[i]));
        step_ids = run->data();
      } else {
        run_steps = run_at = 0;
        forward(next.data(), 1);
        if (device_greedy) step_ids = ids->data();
      }
      if (n == 1) st.first_call_steps = std::max(run_steps, 1);
      for (int b = 0; b < B; ++b) seqs[b].push_back(next[b]);
    }
    int emitted = 0;
    for (int b = 0; b < B; ++b) {
      if (done[b]) continue;  // a finished sequence keeps feeding its last token; its output is ignored
      if (device_greedy) {
        const int32_t code = step_ids[b];
        if (code < 0) {  // the host sampler's error, with the logit of the step that made it
          if (run_at > 0 && run_at < run_steps) {  // not the run's last step: that step again, alone
            const int k = run_at - 1;
            dec.rewind(run_pos0 + k);
            dec.append_greedy(run_in.data() + size_t(k) * B, 1);
          }
          fail_non_finite_logit(argmax_code_id(code), dec.logit(b, argmax_code_id(code)));
        }
        next[b] = code;
      } else {
        next[b] = sample_token(logits->data() + size_t(b) * V, V, opts.sampler, keys[b], uint64_t(n));
      }
      if (next[b] == opts.eos_id) {
        done[b] = 1, --live;
        continue;
      }
      out[b].push_back(next[b]);
      ++st.new_tokens, ++emitted;
      if (n > 0) ++st.decode_tokens;
      if (on_token) on_token(b, next[b]);
    }
    if (n == 0) st.prefill_s = seconds_since(t0), t0 = std::chrono::steady_clock::now();
    if (n == 1) st.first_step_s = seconds_since(t0), record_s = dec.graph_record_seconds();
    if (n >= 1 && n < 1 + st.first_call_steps) st.first_step_tokens += emitted;  // the first call's steps
  }
  st.decode_s = seconds_since(t0);
  if (st.first_call_steps > 0) st.late_record_s = dec.graph_record_seconds() - record_s;
  if (stats) *stats = st;
  return out;
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  // find the start of the last character: at most 3 continuation bytes (10xxxxxx) back from the end
  size_t i = pending_.size(), cont = 0;
  while (i > 0 && cont < 3 && (static_cast<unsigned char>(pending_[i - 1]) & 0xC0) == 0x80) --i, ++cont;
  size_t cut = pending_.size();
  if (i > 0) {
    const unsigned char lead = static_cast<unsigned char>(pending_[i - 1]);
    // expected length from the lead byte (RFC 3629): 110xxxxx 2, 1110xxxx 3, 11110xxx 4
    const size_t need = (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 0;
    if (need > cont + 1) cut = i - 1;  // an incomplete character: hold it back
  }
  std::string ready = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return ready;
}

std::string Utf8Stream::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

std::string continuation_text(const Tokenizer& tok, const std::vector<int32_t>& context, const std::vector<int32_t>& ids) {
  std::vector<int32_t> all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string before = tok.decode(context), after = tok.decode(all);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  return tok.decode(ids);
}

}  // namespace xtrain
