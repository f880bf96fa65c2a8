// Tokenizer table cache: the tables a tokenizer's loader derives from its files (GPT-2's encoder.json +
// vocab.bpe, a tiktoken rank file, a byte-level BPE tokenizer.json; what that costs: bench/results/coldstart_cpu_2026-12.md), stored
// in the per-user cache directory of the token caches (--cache-dir, token_cache.h), so that a later start
// reads them instead of parsing and deriving them again. One entry per loader and source bytes:
//   <dir>/<key, 16 hex>.toktables, key = xxh3_64 of "xtrain-tokenizer-tables", the format version, the
//   loader ("gpt2", "tiktoken:<encoding>", "tokenizer.json") and each source file's size and bytes
// Format (little-endian), the one reader and writer of it:
//   0 char[8] magic "XTTOKTAB"   8 u32 version = kTokenizerTablesVersion   12 u32 0
//   16 u64 key                   24 u64 payload bytes                      32 u64 xxh3_64 of the payload
//   40 payload: kind, name, split pattern, eot, fingerprint, every id's bytes, the specials, the merges,
//      the unassigned ids and the Merger's tables (bpe.h), each length-prefixed; for a tokenizer.json then
//      its pipeline's source and added token ids (hf_pipeline.h), read again by the file's own reader;
//      the file ends there.
// An entry is trusted only when it is a regular file owned by this user with one link (never another
// user's tables) whose header, size, payload hash and every field check out and whose tables are what
// the loader builds (TokenizerTables::restore); anything else is ignored with a warning and rebuilt. A
// symbolic link at its name is neither read nor written through. Entries are written atomically (write_file_atomic, io.h); a directory that cannot be
// written leaves the tokenizer uncached (a warning), never failed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <xtrain/data/tokenizer.h>

namespace xtrain {

inline constexpr uint32_t kTokenizerTablesVersion = 1;
inline constexpr const char* kTokenizerTablesExt = ".toktables";
inline constexpr const char* kHfJsonLoader = "tokenizer.json";  // the loader name of Tokenizer::from_hf_json

// TokenizerTables: a built tokenizer's tables as the payload above, and back. Friend of Tokenizer.
class TokenizerTables {
 public:
  // Expected: what a loader builds, which a restored entry must be: its kind, name and split pattern
  // (GPT-2's files and a tokenizer.json: "" and ""; tiktoken: the encoding's) and, for tiktoken, its
  // specials in the encoding's order (GPT-2's files: empty, the encoder's; a tokenizer.json: its added
  // tokens). expect: that of a loader name ("gpt2", "tiktoken:<encoding>", kHfJsonLoader); UsageError
  // for an unknown encoding.
  struct Expected {
    Tokenizer::Kind kind = Tokenizer::Kind::Gpt2Files;
    std::string name, pattern;
    std::vector<std::pair<std::string, int32_t>> specials;
  };
  static Expected expect(const std::string& loader);
  // save: the payload of t (GPT-2 files, tiktoken or tokenizer.json; Error for SentencePiece).
  static std::string save(const Tokenizer& t);
  // restore: the tokenizer of a payload, read from `files` (what source_files() and describe() give).
  // Throws Error "<why>" for a payload that is truncated, has trailing bytes or a field out of range,
  // whose kind, name, split pattern or specials are not `want`'s, whose tokenizer.json pipeline the
  // file's reader refuses, or whose end-of-text id or fingerprint is not the one its tables give
  // (re-derived as the loader derives them), or whose Merger tables are not what the merges and token
  // bytes give (check_merger_tables, tokenizer_cache.cpp).
  static Tokenizer restore(std::string_view payload, const std::vector<std::string>& files, const Expected& want);
};

// tokenizer_tables_path: the entry of `loader` over source files of these bytes in `dir`.
std::string tokenizer_tables_path(const std::string& dir, const std::string& loader, const std::vector<std::string>& source_bytes);

// TokenizerCacheDir: where the entries live, and how messages name it: `origin` is what chose the
// directory (the tool's option, e.g. "--cache-dir", or "$XDG_CACHE_HOME"), `log_prefix` starts each
// warning line (rank_prefix under mpirun, core/log.h; "" for a single process).
struct TokenizerCacheDir {
  std::string dir, origin = "--cache-dir", log_prefix;
  TokenizerCacheDir(std::string d, std::string o = "--cache-dir", std::string p = "")  // implicit: a path alone is a --cache-dir
      : dir(std::move(d)), origin(std::move(o)), log_prefix(std::move(p)) {}
};

// TokenizerBuild: the loader, given the sources' bytes as load_tokenizer_cached read them once and
// hashed into the entry's key, from which it must build (Tokenizer::from_*_bytes): a file replaced
// meanwhile never leaves one file's tables under another's key. nullptr: a source could not be read;
// the loader reads the files itself, giving its own error.
using TokenizerBuild = std::function<Tokenizer(const std::vector<std::string>* source_bytes)>;

// load_tokenizer_cached: the tokenizer of `sources` (paths) as `loader` names it: restored from its
// entry in cache.dir when a valid one is there, else build(the bytes of the key) (its Errors pass
// through) and the entry written for the next start. *hit, when given, says which. A damaged, foreign or another user's entry is
// a warning on stderr (one line, written at once: "<log_prefix>warning: tokenizer cache <path>: <why>;
// rebuilding it"), as is a failed write. A symbolic link at the entry's name is neither read nor written
// through ("... is a symbolic link; not writing through it"). A cache.dir that is not a directory (a file,
// or under one) is one line ("... not used (<origin> <dir>: <path> is not a directory)") and build().
Tokenizer load_tokenizer_cached(const TokenizerCacheDir& cache, const std::string& loader, const std::vector<std::string>& sources,
                                const TokenizerBuild& build, bool* hit = nullptr);

}  // namespace xtrain
