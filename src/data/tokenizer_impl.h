// Tokenizer::Impl, the tables a loaded tokenizer encodes and decodes with: private to src/data, where
// tokenizer.cpp builds them and tokenizer_cache.cpp stores and restores them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <xtrain/data/tokenizer.h>
#include "bpe.h"
#include "hf_pipeline.h"
#include "spm_codec.h"

namespace xtrain {

struct Tokenizer::Impl {
  std::vector<std::string> token_bytes;                     // id -> bytes, (V)
  std::vector<std::pair<std::string, int32_t>> specials;    // literal content -> id
  std::vector<std::array<int32_t, 3>> merges;               // (left, right, result) in rank order
  int32_t eot = -1;
  uint64_t fingerprint = 0;
  std::vector<bool> unassigned;                             // (V) or empty; ids decode refuses
  std::unique_ptr<bpe::Merger> merger;
  std::unique_ptr<spm::Codec> spm;                          // set for a SentencePiece model: it does all
  bpe::PreTokenizer pre;
  std::unique_ptr<bpe::HfPipeline> hf;                      // tokenizer.json's pipeline, else null
  Kind kind = Kind::Gpt2Files;
  std::string name;                                         // tiktoken: the encoding (cl100k_base)
  std::string pattern;                                      // tiktoken: the split pattern
  std::vector<std::string> files;                           // what it was read from
  Impl() = default;
  explicit Impl(const std::string& pattern) : pre(pattern) {}
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  static std::unique_ptr<Impl> build(const bpe::RawVocab& raw);
  // PieceMark: where encode reports progress: at a piece starting at or past `next` (a pointer into
  // the whole text), calls (*bytes_done)(p - base) and moves `next` on by kEncodeProgressBytes.
  struct PieceMark {
    const char* base = nullptr;
    const char* next = nullptr;
    const std::function<void(size_t)>* bytes_done = nullptr;
    void reached(const char* p) {  // the bytes before p are encoded
      if (!bytes_done || p < next) return;
      (*bytes_done)(static_cast<size_t>(p - base));
      next = p + kEncodeProgressBytes;
    }
  };
  void encode_ordinary(std::string_view text, std::vector<int32_t>* out, PieceMark* mark) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;  // cached merge
};

// end_of_text_id: the id of the first special among the end-of-text names (docs/tokenizers.md), -1 for none.
int32_t end_of_text_id(const std::vector<std::pair<std::string, int32_t>>& specials);
// bpe_fingerprint: Tokenizer::fingerprint() of a BPE vocabulary (GPT-2's files, a tokenizer.json):
// FNV-1a 64 over the ids' bytes (V), the merges' pairs, the specials by id and a pipeline other than
// GPT-2's ("" = GPT-2's). tiktoken_fingerprint: that of a tiktoken encoding, over its name, split
// pattern, every id's bytes (unassigned ids marked) and the specials in the encoding's order.
uint64_t bpe_fingerprint(const std::vector<std::string>& token_bytes, const std::vector<std::array<int32_t, 3>>& merges,
                         const std::vector<std::pair<std::string, int32_t>>& specials, const std::string& pipeline);
uint64_t tiktoken_fingerprint(const std::string& name, const std::string& pattern, const std::vector<std::string>& token_bytes,
                              const std::vector<bool>& unassigned, const std::vector<std::pair<std::string, int32_t>>& specials);

}  // namespace xtrain
