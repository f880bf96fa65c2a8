// Writing Hugging Face tokenizer.json files (the `tokenizers` library's serialisation, as 0.23 saves
// it) for the tokenizers xtrain reads in other forms: one writer per kind. Tokenizer::hf_tokenizer_json
// (tokenizer.h) picks the writer; src/serve/export.cpp puts the result in a model directory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace xtrain::bpe {

// ByteLevelJson: a byte-level BPE vocabulary as a tokenizer.json holds it.
struct ByteLevelJson {
  std::vector<std::string> token_bytes;             // id -> bytes; "" for an unassigned id
  std::vector<bool> special;                        // id -> an added special token (literal text)
  bool specials_in_vocab = false;                   // also in model.vocab (GPT-2's <|endoftext|>)
  std::vector<std::pair<int32_t, int32_t>> merges;  // (left id, right id) in rank order
  std::string pattern;                              // Split regex before ByteLevel; "" = ByteLevel's own
  bool ignore_merges = false;                       // a piece that is a token is that token (tiktoken)
};

// write_byte_level_json: spec as tokenizer.json text: model BPE (vocab in the GPT-2 byte alphabet, merges
// as [left, right] pairs), added_tokens for the specials (special, not normalized), pre-tokenizer
// ByteLevel (pattern "") or Sequence[Split(pattern, Isolated), ByteLevel(use_regex false)],
// post-processor and decoder ByteLevel: GPT2Converter's and TikTokenConverter's output in
// transformers' convert_slow_tokenizer.py.
std::string write_byte_level_json(const ByteLevelJson& spec);

// merges_from_ranks: TikTokenConverter's merges for a tiktoken vocabulary (token bytes by rank, "" for
// an id that is no rank): for each token in rank order, every split into two tokens, ordered by the
// left then the right part's rank. With ignore_merges, tokenizers' BPE then merges exactly as tiktoken's
// byte_pair_merge does (any adjacent pair whose concatenation is a token, lowest rank first).
std::vector<std::pair<int32_t, int32_t>> merges_from_ranks(const std::vector<std::string>& token_bytes);

}  // namespace xtrain::bpe
