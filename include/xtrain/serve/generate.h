// Text generation with a KV-cache Decoder: prefill the prompts, then sample one token per step
// (sampler.h) until <|endoftext|> or the token budget; past the model's context the context is cropped
// to its last maxT tokens, as nanoGPT does. Plus Utf8Stream, which turns token bytes into printable text
// when a character is split across tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <xtrain/data/tokenizer.h>
#include <xtrain/model/inference.h>
#include <xtrain/serve/sampler.h>

namespace xtrain {

struct GenerateOptions {
  int max_new_tokens = 64;  // tokens to generate per sequence at most
  SamplerOptions sampler;
  uint64_t seed = 0;  // sampling stream: sampling_key(seed, sequence), counter = generated-token index
  int eos_id = -1;    // stop a sequence when it samples this id (not emitted); -1 = never
  // temperature 0: the argmax on the device (Decoder::append_greedy, Backend::argmax_rows), B ids copied back
  // per step instead of B*V logits; false: the host sampler on the copied logits. The same tokens and errors.
  bool device_greedy = true;
};

struct GenerateStats {
  int prompt_tokens = 0;     // per sequence
  int new_tokens = 0;        // tokens emitted, all sequences together
  int decode_tokens = 0;     // of which sampled after a one-token step (not from the prompt's logits)
  double prefill_s = 0.0;    // seconds for the prompt forward (including its first sampling)
  double decode_s = 0.0;     // seconds for the one-token steps
  double first_step_s = 0.0;  // of which the first decoding call (a decoder records its graph there)
  int first_call_steps = 0;   // one-token steps of that call (Decoder::kGreedySteps for a greedy run, else 1)
  int first_step_tokens = 0;  // tokens emitted from that call's steps
  // late_record_s: of decode_s after the first call, the seconds of graphs recorded there (the one-token step,
  // first needed for the steps after the greedy runs): a steady decoding figure leaves it out
  double late_record_s = 0.0;
  int context_crops = 0;     // steps past the model's context (maxT): the cache re-filled from a cropped window
};

// generate: continues B = dec.batch() prompts of equal length (tokens in [0, V), at least one each),
// starting from an empty cache. Calls on_token(sequence, id) for every emitted token as soon as it is
// sampled, and returns the emitted ids per sequence (the prompt and the stopping eos excluded).
// Past the model's context maxT the next token is sampled from the last maxT tokens only (nanoGPT's
// crop, `idx[:, -block_size:]`): when the cache is full it is re-filled from the last maxT - 1 tokens,
// at positions 0.., and the new token appended, so the logits are those of a forward over that window.
// Throws Error for a prompt count other than B, unequal or empty prompts, or a prompt longer than maxT.
std::vector<std::vector<int32_t>> generate(Decoder& dec, const std::vector<std::vector<int32_t>>& prompts,
                                           const GenerateOptions& opts,
                                           const std::function<void(int, int32_t)>& on_token,
                                           GenerateStats* stats = nullptr);

// continuation_text: the text `ids` add after `context` (the ids before them): decode(context + ids)
// past decode(context) when that is its prefix, else decode(ids). For byte-level BPE this is
// decode(ids); for SentencePiece it keeps the space before a word, which the library drops at the
// start of a text (so decoding token by token would join the words). Throws as Tokenizer::decode.
std::string continuation_text(const Tokenizer& tok, const std::vector<int32_t>& context, const std::vector<int32_t>& ids);

// Utf8Stream: byte-level BPE tokens may end inside a multi-byte UTF-8 character (e.g. an emoji spread
// over two tokens). push() returns the bytes up to the last complete character and holds back an
// incomplete trailing sequence (at most 3 bytes) until the next push; flush() returns what is held.
// Bytes that are not valid UTF-8 pass through unchanged (nothing waits forever).
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace xtrain
