// JSON lines corpora (Hugging Face datasets' usual export): one JSON object per line with the
// document in a string field, plain or zstd-compressed (.jsonl.zst, decompressed as a stream).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "data/token_cache.h"
#include <xtrain/data/tokenizer.h>

namespace xtrain {

// DocumentFn: called with each document's text and its line number (from 1).
using DocumentFn = std::function<void(const std::string& text, size_t line)>;

// for_each_jsonl_document: calls fn(text, line) with the string `field` of each line of path in order
// (line numbers from 1). A path ending in ".zst" is decompressed with libzstd's streaming API. Blank
// lines (only spaces, tabs, a '\r') are skipped. Throws Error, one line naming path and line:
// "<path>:<line>: not JSON (<parser's message>)", "...: no \"<field>\" field", "...: \"<field>\" is a
// <type>, not a string", "...: not a JSON object"; and "<path>: corrupt zstd stream (<libzstd's
// message>)" or "<path>: zstd stream ends mid-frame (truncated)".
void for_each_jsonl_document(const std::string& path, const std::string& field, const DocumentFn& fn);

// for_each_jsonl_document: the same over `bytes`, the file's contents already read (compressed when
// path ends in ".zst"); path names it in errors. The token cache parses the bytes it hashed, so the
// ids it stores belong to the content its name and header record.
void for_each_jsonl_document(const std::string& path, std::string_view bytes, const std::string& field,
                             const DocumentFn& fn);

// is_jsonl_name: path ends in ".jsonl" or ".jsonl.zst" (what --data-format auto reads as JSON lines).
bool is_jsonl_name(const std::string& path);

// jsonl_recipe: the IdsRecipe (token_cache.h) of the JSON lines file at path (".zst": compressed):
// fingerprint jsonl_fingerprint(tok.fingerprint(), field); encode parses the file's bytes
// (for_each_jsonl_document) into the ids load_pretokenized_or_jsonl gives, with its errors. tok must
// outlive the recipe. `rank`: rank 0 prints the "jsonl |" line; -1 none.
IdsRecipe jsonl_recipe(const Tokenizer& tok, const std::string& field, const std::string& path, int rank = -1);

}  // namespace xtrain
