// --data-format: telling the formats apart and loading those that are not text (see
// src/data/data_format.h).
#include "data/data_format.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/log.h"
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

TokenStream load_pretokenized_or_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok,
                                       const std::string& field, int rank) {
  switch (format) {
    case DataFormat::llmc: return open_llmc_shard(path, tok.vocab_size());
    case DataFormat::nanogpt: return open_nanogpt_bin(path, tok.vocab_size());
    case DataFormat::jsonl: {
      std::vector<int32_t> ids;
      size_t docs = 0;
      for_each_jsonl_document(path, field, [&](const std::string& text, size_t) {
        if (docs++ > 0 && tok.eot_id() >= 0) ids.push_back(tok.eot_id());
        const std::vector<int32_t> doc = tok.encode(text);
        ids.insert(ids.end(), doc.begin(), doc.end());
      });
      if (docs > 1 && tok.eot_id() < 0)
        XT_FAIL(path << ": " << docs << " documents, but the tokenizer has no <|endoftext|> token to separate them");
      print0(rank, "jsonl  | %s: %zu documents, %zu tokens\n", path.c_str(), docs, ids.size());
      return TokenStream(std::move(ids));
    }
    default: XT_CHECK(false, "load_pretokenized_or_jsonl: format " << data_format_name(format));
  }
  return {};
}

}  // namespace xtrain
