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

// JsonlBound: how many bytes one JSON lines file may hold, decompressed, and its ids take (4 bytes an
// id while tokenizing): a quarter of the host memory available when its loading begins (MemAvailable),
// so that a small .zst of gigabytes of lines is refused in seconds instead of taking the machine's
// memory. Real text gives about one id per 4 bytes, i.e. ids of about its own size.
struct JsonlBound {
  size_t bytes = 0;      // the bound; SIZE_MAX: none (available memory unknown)
  size_t available = 0;  // the MemAvailable it was taken from, for the message
};
inline constexpr size_t kJsonlMemoryShare = 4;  // the bound is available / kJsonlMemoryShare
JsonlBound jsonl_bound();

// jsonl_too_large: the Error "<path>: <what> the JSON lines bound of N MiB (a quarter of the memory
// available, M MiB): split it into smaller files (each is tokenized and cached on its own)".
[[noreturn]] void jsonl_too_large(const std::string& path, const std::string& what, const JsonlBound& bound);

// for_each_jsonl_document: calls fn(text, line) with the string `field` of each line of path in order
// (line numbers from 1). A path ending in ".zst" is decompressed with libzstd's streaming API. Blank
// lines (only spaces, tabs, a '\r') are skipped. Throws Error, one line naming path and line:
// "<path>:<line>: not JSON (<parser's message>)", "...: no \"<field>\" field", "...: \"<field>\" is a
// <type>, not a string", "...: not a JSON object"; and "<path>: corrupt zstd stream (<libzstd's
// message>)" or "<path>: zstd stream ends mid-frame (truncated)". Before the first document, the
// file's decompressed size (a .zst decompressed once without parsing, at GB/s, up to the bound) is
// checked against `bound`: jsonl_too_large when it is larger.
void for_each_jsonl_document(const std::string& path, const std::string& field, const DocumentFn& fn,
                             const JsonlBound& bound = jsonl_bound());

// LineFn: called with each non-blank line (without its '\n') and its line number (from 1).
using LineFn = std::function<void(std::string_view line, size_t line_no)>;

// for_each_jsonl_line: the reading beneath for_each_jsonl_document, for JSON lines whose objects are
// not documents (xtrain_eval's and --eval-mc's multiple-choice items): calls fn(line, line_no) for
// each line of path in order, blank lines skipped, a path ending in ".zst" decompressed as a stream.
// The same bounds and errors: a line over kJsonMaxBytes, the decompressed size against `bound`
// (jsonl_too_large), a corrupt or truncated zstd stream, a file that cannot be read.
void for_each_jsonl_line(const std::string& path, const LineFn& fn, const JsonlBound& bound = jsonl_bound());

// for_each_jsonl_document: the same over `bytes`, the file's contents already read (compressed when
// path ends in ".zst"); path names it in errors. The token cache parses the bytes it hashed, so the
// ids it stores belong to the content its name and header record.
void for_each_jsonl_document(const std::string& path, std::string_view bytes, const std::string& field,
                             const DocumentFn& fn, const JsonlBound& bound = jsonl_bound());

// is_jsonl_name: path ends in ".jsonl" or ".jsonl.zst" (what --data-format auto reads as JSON lines).
bool is_jsonl_name(const std::string& path);

// jsonl_recipe: the IdsRecipe (token_cache.h) of the JSON lines file at path (".zst": compressed):
// fingerprint jsonl_fingerprint(tok.fingerprint(), field); encode parses the file's bytes
// (for_each_jsonl_document) into the ids load_pretokenized_or_jsonl gives, with its errors. tok must
// outlive the recipe. `rank`: rank 0 prints the "jsonl |" line; -1 none.
IdsRecipe jsonl_recipe(const Tokenizer& tok, const std::string& field, const std::string& path, int rank = -1);

}  // namespace xtrain
