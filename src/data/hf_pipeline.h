// The text pipeline of a Hugging Face tokenizer.json around its BPE model, as `tokenizers` runs it
// (tokenizer/mod.rs encode_single_sequence, added_vocabulary.rs, pre_tokenizers/, processors/):
// added tokens split out, normalizer, pre-tokenizer steps, post-processor ids. hf_json.cpp reads it
// from the file and refuses what it cannot honour; hf_pipeline.cpp runs it. Internal to src/data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpe.h"

namespace xtrain::bpe {

// NormalForm: the Unicode normalizers of tokenizers (NFC, NFD, NFKC, NFKD; Unicode Standard Annex 15).
enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// normalize_unicode: *out = `text` in normal form `form`, through ICU's Normalizer2 on UTF-8; maximal
// runs of well-formed UTF-8 are normalized and ill-formed bytes copied as they are (tokenizers only
// sees valid UTF-8). Returns false, leaving *out alone, when `text` is already normalized.
bool normalize_unicode(NormalForm form, std::string_view text, std::string* out);

// AddedToken: an entry of tokenizer.json's added_tokens with the flags that change matching.
struct AddedToken {
  std::string content;  // as matched: after the normalizer when `normalized`
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// SplitBehavior: tokenizers' SplitDelimiterBehavior, what becomes of the matches of a Split.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// PreTokenizerStep: one Split, or the ByteLevel step (its GPT-2 regex as an Isolated split when
// use_regex; a space put before each piece that does not start with one when add_prefix_space).
// ByteLevel's byte-to-character mapping needs no step: the model works on bytes.
struct PreTokenizerStep {
  std::unique_ptr<SplitRegex> regex;  // null: no split
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
  bool byte_level = false;  // the ByteLevel step
};

// kMaxPipelineSteps: the most normalizers, pre-tokenizer steps or post-processors one tokenizer.json
// may chain (nested Sequences counted flat). Real files chain at most five (DeepSeek-V3: three Splits
// and ByteLevel); encode nests one call per pre-tokenizer step, so the bound keeps its stack small.
inline constexpr size_t kMaxPipelineSteps = 64;

struct HfPipeline {
  std::vector<NormalForm> normalizers;         // in order; empty = none
  std::vector<AddedToken> added_raw;           // matched in the raw text (normalized: false)
  std::vector<AddedToken> added_normalized;    // matched in the normalized text (normalized: true)
  std::vector<PreTokenizerStep> steps;         // in order; the last is ByteLevel's
  std::vector<int32_t> prefix, suffix;         // post-processor ids around the text's (single template)
  bool ignore_merges = false;                  // model.ignore_merges
  std::string description;                     // canonical settings, "" for GPT-2's (fingerprinted)
  // what read_hf_pipeline reads it from again without the vocabulary (the tokenizer table cache,
  // tokenizer_cache.h): the file's JSON less model.vocab and model.merges (hf_pipeline_source), dumped,
  // and added_token_ids of the whole file
  std::string source;
  std::vector<int32_t> added_ids;

  // encode: appends the ids of `text` to *out: prefix, then added tokens' ids and, for the text
  // between them, model(pre_token, where) for each pre-token in order (`where`: a pointer into
  // `text` at or before the pre-token's source, non-decreasing: for progress), then suffix.
  void encode(std::string_view text, std::vector<int32_t>* out,
              const std::function<void(std::string_view, const char*)>& model) const;
};

// added_token_ids: the id `tokenizers` gives each entry of tokenizer.json's added_tokens, in order, as
// its deserializer adds them one by one (serialization.rs, AddedVocabulary::add_tokens): -1 for an empty
// content (ignored); a content added before keeps its id; one in model.vocab gets the vocabulary's id;
// any other the next id after the vocabulary and the added tokens so far. The file's "id" is only
// checked against that (tokenizers warns and uses its own). Throws Error "<f>: ..." for added_tokens
// present and not an array (tokenizers refuses the file), an entry without integer "id" and string
// "content", and one content listed with two ids.
std::vector<int32_t> added_token_ids(const nlohmann::json& root, const std::string& f);

// read_hf_pipeline: the pipeline of tokenizer.json `root` (file `f` names it in messages). Throws
// Error "<f>: <json path> = <value> is not supported (<why>)" for anything it cannot honour exactly
// (another normalizer, pre-tokenizer or post-processor, byte_fallback, BPE dropout, affixes, unknown
// fields, more than kMaxPipelineSteps steps of a kind); the decoder is not read (xtrain decodes to bytes).
HfPipeline read_hf_pipeline(const nlohmann::json& root, const std::string& f);
// read_hf_pipeline: as above with the added tokens' ids given (added_token_ids of the whole file), so
// that `root` may be hf_pipeline_source's (no model.vocab to give them). Error "<f>: ..." for ids whose
// count is not that of root's added_tokens.
HfPipeline read_hf_pipeline(const nlohmann::json& root, const std::string& f, const std::vector<int32_t>& added_ids);

// hf_pipeline_source: tokenizer.json `root` less model.vocab and model.merges: all read_hf_pipeline
// reads besides the ids (a few kB where the whole file is megabytes).
nlohmann::json hf_pipeline_source(const nlohmann::json& root);

// hf_added_specials: the added tokens as literal specials (content, id) in file order, each string once,
// empty contents (id -1) left out: what from_hf_json hands to the tables. added_ids: added_token_ids.
std::vector<std::pair<std::string, int32_t>> hf_added_specials(const nlohmann::json& root, const std::vector<int32_t>& added_ids);

}  // namespace xtrain::bpe
