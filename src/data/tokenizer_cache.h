// Tokenizer table cache: the tables a tokenizer's loader derives from its files (GPT-2's encoder.json +
// vocab.bpe, a tiktoken rank file; what that costs: bench/results/coldstart_cpu_2026-12.md), stored
// in the per-user cache directory of the token caches (--cache-dir, token_cache.h), so that a later start
// reads them instead of parsing and deriving them again. One entry per loader and source bytes:
//   <dir>/<key, 16 hex>.toktables, key = xxh3_64 of "xtrain-tokenizer-tables", the format version, the
//   loader ("gpt2", "tiktoken:<encoding>") and each source file's size and bytes
// Format (little-endian), the one reader and writer of it:
//   0 char[8] magic "XTTOKTAB"   8 u32 version = kTokenizerTablesVersion   12 u32 0
//   16 u64 key                   24 u64 payload bytes                      32 u64 xxh3_64 of the payload
//   40 payload: kind, name, split pattern, eot, fingerprint, every id's bytes, the specials, the merges,
//      the unassigned ids and the Merger's tables (bpe.h), each length-prefixed; the file ends there.
// An entry is trusted only when it is a regular file owned by this user (never another user's tables)
// whose header, size, payload hash and every field check out; anything else is ignored with a warning
// and rebuilt. Entries are written atomically (write_file_atomic, io.h); a directory that cannot be
// written leaves the tokenizer uncached (a warning), never failed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <xtrain/data/tokenizer.h>

namespace xtrain {

inline constexpr uint32_t kTokenizerTablesVersion = 1;
inline constexpr const char* kTokenizerTablesExt = ".toktables";

// TokenizerTables: a built tokenizer's tables as the payload above, and back. Friend of Tokenizer.
class TokenizerTables {
 public:
  // save: the payload of t (a GPT-2 files or tiktoken tokenizer; Error for the other kinds).
  static std::string save(const Tokenizer& t);
  // restore: the tokenizer of a payload, read from `files` (what source_files() and describe() give).
  // Throws Error "<why>" for a payload that is truncated, has trailing bytes or a field out of range.
  static Tokenizer restore(std::string_view payload, const std::vector<std::string>& files);
};

// tokenizer_tables_path: the entry of `loader` over source files of these bytes in `dir`.
std::string tokenizer_tables_path(const std::string& dir, const std::string& loader, const std::vector<std::string>& source_bytes);

// load_tokenizer_cached: the tokenizer of `sources` (paths) as `loader` names it: restored from its
// entry in cache_dir when a valid one is there, else build() (its Errors pass through) and the entry
// written for the next start. *hit, when given, says which. A damaged, foreign or another user's entry is
// a warning on stderr ("warning: tokenizer cache <path>: <why>; rebuilt"), as is a failed write.
Tokenizer load_tokenizer_cached(const std::string& cache_dir, const std::string& loader, const std::vector<std::string>& sources,
                                const std::function<Tokenizer()>& build, bool* hit = nullptr);

}  // namespace xtrain
