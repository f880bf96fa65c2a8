// --data-format: telling the formats apart and loading those that are not text (see
// src/data/data_format.h).
#include <xtrain/data/data_format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/echo.h"
#include "core/io.h"
#include <xtrain/core/log.h>
#include "data/jsonl.h"
#include "data/token_shard.h"

namespace xtrain {

DataFormat parse_data_format(const std::string& name) {
  if (name == "auto") return DataFormat::automatic;
  if (name == "text") return DataFormat::text;
  if (name == "llmc") return DataFormat::llmc;
  if (name == "nanogpt") return DataFormat::nanogpt;
  if (name == "jsonl") return DataFormat::jsonl;
  throw UsageError("--data-format " + name + ": expected auto, text, llmc, nanogpt or jsonl");
}

const char* data_format_name(DataFormat f) {
  switch (f) {
    case DataFormat::automatic: return "auto";
    case DataFormat::text: return "text";
    case DataFormat::llmc: return "llmc";
    case DataFormat::nanogpt: return "nanogpt";
    case DataFormat::jsonl: return "jsonl";
  }
  return "?";
}

DataFormat detect_data_format(const std::string& path, DataFormat requested) {
  if (requested != DataFormat::automatic) return requested;
  if (starts_with_llmc_magic(path)) return DataFormat::llmc;
  if (is_jsonl_name(path)) return DataFormat::jsonl;
  const std::string bin = ".bin";
  if (path.size() >= bin.size() && path.compare(path.size() - bin.size(), bin.size(), bin) == 0)
    throw UsageError("--data " + path + ": a .bin file without llm.c's magic (" + std::to_string(kLlmcMagicGpt2) +
                     " or " + std::to_string(kLlmcMagicLlama3) +
                     "); for nanoGPT's headerless uint16 files pass --data-format nanogpt, for a text --data-format text");
  return DataFormat::text;
}

void check_jsonl_field_read(const std::string& field, DataFormat format, const std::vector<std::string>& files,
                            const std::string& inputs) {
  for (const std::string& f : files)
    if (detect_data_format(f, format) == DataFormat::jsonl) return;
  throw UsageError("--jsonl-field " + echo_value(field) + " is not read: no " + inputs + " file is JSON lines (--data-format " +
                   data_format_name(format) + ": .jsonl or .jsonl.zst names under auto, or --data-format jsonl)");
}

namespace {

// jsonl_ids: the ids of a JSON lines file's documents, as `each` (a for_each_jsonl_document over the
// file or over its bytes, checked against the bound it is given) gives them: each tokenized,
// tok.eot_id() between consecutive ones (none after the last), the rule join_files applies between
// files. The ids' bytes are held to the same bound (a template's ids on every short document could
// pass it). Rank 0 prints one line.
std::vector<int32_t> jsonl_ids(const std::string& path, const Tokenizer& tok, int rank,
                               const std::function<void(const DocumentFn&, const JsonlBound&)>& each) {
  const JsonlBound bound = jsonl_bound();
  std::vector<int32_t> ids;
  size_t docs = 0;
  each([&](const std::string& text, size_t) {
    if (docs++ > 0 && tok.eot_id() >= 0) ids.push_back(tok.eot_id());
    const std::vector<int32_t> doc = tok.encode(text);
    if ((ids.size() + doc.size()) * sizeof(int32_t) > bound.bytes)
      jsonl_too_large(path, "its ids take more than", bound);
    ids.insert(ids.end(), doc.begin(), doc.end());
  }, bound);
  if (docs > 1 && tok.eot_id() < 0)
    XT_FAIL(path << ": " << docs << " documents, but the tokenizer has no <|endoftext|> token to separate them");
  print0(rank, "jsonl  | %s: %zu documents, %zu tokens\n", path.c_str(), docs, ids.size());
  return ids;
}

}  // namespace

uint64_t jsonl_fingerprint(uint64_t tok_fingerprint, const std::string& field) {
  const std::string tag = "xtrain jsonl " + std::to_string(kJsonlIdsVersion);
  const uint64_t field_bytes = field.size();  // the length first: no two (field, fingerprint) pairs share bytes
  uint64_t h = fnv1a64(tag.data(), tag.size());
  h = fnv1a64(&field_bytes, sizeof field_bytes, h);
  h = fnv1a64(field.data(), field.size(), h);
  return fnv1a64(&tok_fingerprint, sizeof tok_fingerprint, h);
}

IdsRecipe jsonl_recipe(const Tokenizer& tok, const std::string& field, const std::string& path, int rank) {
  return IdsRecipe{jsonl_fingerprint(tok.fingerprint(), field), [&tok, field, path, rank](const std::string& bytes) {
                     return jsonl_ids(path, tok, rank, [&](const DocumentFn& fn, const JsonlBound& bound) {
                       for_each_jsonl_document(path, bytes, field, fn, bound);
                     });
                   }};
}

TokenStream load_pretokenized_or_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok,
                                       const std::string& field, int rank) {
  switch (format) {
    case DataFormat::llmc: return open_llmc_shard(path, tok.vocab_size());
    case DataFormat::nanogpt: return open_nanogpt_bin(path, tok.vocab_size());
    case DataFormat::jsonl:
      return TokenStream(jsonl_ids(path, tok, rank, [&](const DocumentFn& fn, const JsonlBound& bound) {
        for_each_jsonl_document(path, field, fn, bound);
      }));
    default: XT_CHECK(false, "load_pretokenized_or_jsonl: format " << data_format_name(format));
  }
  return {};
}

}  // namespace xtrain
