// Internal pieces of the GPT-2 tokenizer: the byte <-> unicode alphabet of GPT-2's encoder.py, the
// byte-pair merge of one pre-token (tiktoken semantics), and the PCRE2 pre-tokenizer. The public
// interface is src/data/tokenizer.h; these are split out so each file stays small and testable.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace xtrain::bpe {

// byte_to_unicode: GPT-2's bytes_to_unicode() (openai/gpt-2 src/encoder.py): printable bytes
// '!'..'~', '\xa1'..'\xac', '\xae'..'\xff' map to the same code point; the other 68 bytes map, in
// increasing byte order, to U+0100, U+0101, ... (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
const std::array<char32_t, 256>& byte_to_unicode();

// token_text_to_bytes: a vocabulary string written in that alphabet (UTF-8) -> the raw bytes.
// Returns false when the string is not valid UTF-8 or holds a code point outside the alphabet.
bool token_text_to_bytes(std::string_view text, std::string* bytes);

// Merger: byte-pair merging of one pre-token: repeatedly merge the adjacent pair of lowest rank
// (leftmost on ties) until no adjacent pair merges. Which pairs merge is the PairRule.
enum class PairRule {
  // tiktoken's byte_pair_merge: ANY adjacent pair whose concatenated bytes is a mergeable token merges,
  // at that token's rank (the index of the merge that produced it: vocab.bpe line order; for GPT-2
  // rank + 256 == id, so this is exactly tiktoken on its mergeable_ranks).
  kAnySplit,
  // tokenizers' BPE model (and GPT-2's encoder.py): only the listed pairs merge, at their index in the
  // list; a pair listed twice keeps its last index, as tokenizers' merge map does.
  kListed,
};
class Merger {
 public:
  // byte_ids[b]: id of the single-byte token b. merges: (left id, right id, result id) in rank order.
  // token_bytes[id]: bytes of every id (kAnySplit finds all splits of a merged token with them).
  // whole_ids: tokens a whole piece maps to before any merging (tiktoken's encode_ordinary looks the
  // piece up in its encoder first; tokenizers' ignore_merges looks it up in the model vocabulary);
  // empty = none.
  Merger(const std::array<int32_t, 256>& byte_ids, const std::vector<std::array<int32_t, 3>>& merges,
         const std::vector<std::string>& token_bytes, PairRule rule, const std::vector<int32_t>& whole_ids = {});

  // merge: one pre-token (bytes, non-empty) -> ids appended to *out. O(n log n) in piece bytes.
  void merge(std::string_view piece, std::vector<int32_t>* out) const;

  // Tables: what the constructor derives (the byte ids, the pair table, the whole-piece lookup), which
  // the tokenizer cache (tokenizer_cache.h) stores and rebuilds a Merger from without deriving it again.
  struct Tables {
    std::array<int32_t, 256> byte_ids{};
    std::vector<std::array<int32_t, 4>> pairs;           // left id, right id, rank, id of the concatenation
    std::vector<std::pair<std::string, int32_t>> whole;  // token bytes, id
  };
  Tables tables() const;
  explicit Merger(const Tables& t);

 private:
  struct RankId {
    int32_t rank;
    int32_t id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  std::array<int32_t, 256> byte_ids_;
  std::unordered_map<uint64_t, RankId> pairs_;  // (left id, right id) -> rank and id of the concatenation
  std::unordered_map<std::string, int32_t> whole_;  // token bytes -> id; empty unless whole_piece_first
};

// PreTokenizer: GPT-2's split regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// compiled by PCRE2 with PCRE2_UTF | PCRE2_UCP (Unicode classes) and PCRE2_MATCH_INVALID_UTF, JIT when
// available. Invalid UTF-8 bytes match no alternative; each run of them becomes its own piece, so
// every input byte lands in exactly one piece and decode(encode(x)) == x for any bytes.
class PreTokenizer {
 public:
  // use_jit=false forces the interpreter; window_bytes is the interpreter's search window (see
  // first_match; tests shrink it to exercise the window edges). Throws Error when the pattern does
  // not compile.
  static constexpr size_t kWindowMarginBytes = 16;
  explicit PreTokenizer(bool use_jit = true, size_t window_bytes = 256);
  // pattern: another split regex in tiktoken's syntax (PCRE2 compiles tiktoken's patterns as they
  // are: \p{..} classes, (?i:..), possessive quantifiers; `$` is end of text, PCRE2_DOLLAR_ENDONLY).
  // Every alternative must decide within kWindowMarginBytes of its match's end (true of the GPT-2,
  // cl100k, o200k and Llama 3 patterns: at most one character of lookahead).
  explicit PreTokenizer(const std::string& pattern, bool use_jit = true, size_t window_bytes = 256);
  static const char* gpt2_pattern();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // split: calls fn(piece) for consecutive non-empty pieces covering all of text. Thread-safe.
  void split(std::string_view text, const std::function<void(std::string_view)>& fn) const;
  bool jit() const { return jit_; }

 private:
  bool first_match(std::string_view rest, void* match_data, size_t* start, size_t* end) const;
  struct Code;
  std::unique_ptr<Code> code_;
  size_t window_bytes_;
  bool jit_ = false;
};

// SplitRegex: a split pattern of a Hugging Face tokenizer.json (Split's {"Regex": ..} or {"String": ..},
// ByteLevel's GPT-2 regex), which `tokenizers` runs with Oniguruma in Ruby syntax. PCRE2 compiles it
// with PCRE2_UTF | PCRE2_UCP (Unicode \s, \w, \p{..}) and PCRE2_MULTILINE with LF newlines (Ruby's
// `^` and `$` are line anchors); a String pattern is matched literally (PCRE2_LITERAL). Unlike
// PreTokenizer it matches in the whole subject from an offset (lookbehind and anchors see the text
// before), so any pattern gives tokenizers' matches; the interpreter (no JIT) is quadratic in the text.
class SplitRegex {
 public:
  // Throws Error "<what>: pcre2_compile at offset N: <message>" for a pattern PCRE2 rejects.
  SplitRegex(const std::string& pattern, bool literal, const std::string& what);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;
  // find_matches: tokenizers' Pattern::find_matches: fn(start, end, is_match) for consecutive spans
  // covering `text` (byte offsets), matches and the gaps between them. An empty match is reported
  // (start == end), and the search then moves on one character; none directly after a match.
  void find_matches(std::string_view text, const std::function<void(size_t, size_t, bool)>& fn) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// kMaxTokenBytes: the longest token a vocabulary whose merges are found from the tokens' bytes
// (PairRule::kAnySplit: rank files, encoder.json + vocab.bpe) may hold. The Merger looks up every split
// of every token, work quadratic in a token's length; the longest token of the real vocabularies
// (r50k, p50k, cl100k, o200k, Llama 3) is 128 bytes.
inline constexpr size_t kMaxTokenBytes = 256;

// RawVocab: a vocabulary as GPT-2's files and tokenizer.json give it: token strings in GPT-2's byte
// alphabet, merges as string pairs in rank order, and literal special (added) tokens; what
// from_gpt2_files and from_hf_json hand to Tokenizer (tokenizer.cpp builds the tables).
struct RawVocab {
  std::string file;                                           // for error messages
  std::vector<std::pair<std::string, int32_t>> vocab;         // token text -> id
  std::vector<std::pair<std::string, std::string>> merges;    // rank order
  std::vector<std::string> merge_where;                       // "vocab.bpe:7", "f: model.merges[5]"
  std::vector<std::pair<std::string, int32_t>> specials;      // literal content -> id
  PairRule rule = PairRule::kAnySplit;
  bool whole_piece_first = false;                             // ignore_merges: vocab tokens first
  std::string pipeline;  // canonical text of what else decides the ids ("" = GPT-2's); fingerprinted
};

// id_value: a token id from a JSON file, range-checked before narrowing (a JSON integer can be any
// 64-bit value; get<int32_t>() would wrap it). Throws Error "<where> has ..." otherwise.
int32_t id_value(const nlohmann::json& v, const std::string& where);
// read_vocab_object: a JSON object of token text -> id (encoder.json, model.vocab) into raw->vocab;
// Error naming `file` and `what` for another value.
void read_vocab_object(const nlohmann::json& obj, const std::string& file, const char* what, RawVocab* raw);

// RankVocab: a byte-level BPE vocabulary given as ranks (tiktoken's mergeable_ranks: token bytes
// by rank, rank == id) plus its split pattern and special tokens; what the tiktoken-format loaders
// (tiktoken.cpp) hand to Tokenizer. Ids that are neither a rank nor a special token stay unassigned
// (cl100k_base has 100277 ids, 100256 and 100261..100275 unused) and decode refuses them.
struct RankVocab {
  std::string file;                                       // for error messages
  std::string name;                                       // e.g. "cl100k_base"; part of the fingerprint
  std::vector<std::string> token_bytes;                   // rank -> bytes, "" for a rank not given
  std::vector<std::pair<std::string, int32_t>> specials;  // literal content -> id
  std::string pattern;                                    // split regex (tiktoken's pat_str)
};

}  // namespace xtrain::bpe
