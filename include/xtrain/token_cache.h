// Token cache: the token stream of a corpus in a small binary file, so later runs skip tokenizing.
// Format (little-endian): header { magic "XTTOKENS", u32 version=1, u32 reserved, u64 tokenizer
// fingerprint, u64 source size in bytes, u64 source content hash (FNV-1a 64), u64 token count },
// then count x int32 ids, then u64 FNV-1a 64 of the id bytes. Written atomically (write_file_atomic, io.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xtrain/progress.h"
#include "xtrain/tokenizer.h"

namespace xtrain {

// write_token_cache / read_token_cache: see format above. read_token_cache throws Error for a
// missing, truncated or corrupt file (checksum), and returns false (no throw) when the file is valid
// but was made from other text or another tokenizer (the caller re-tokenizes).
void write_token_cache(const std::string& path, const std::vector<int32_t>& ids, uint64_t tok_fingerprint,
                       uint64_t source_bytes, uint64_t source_hash);
bool read_token_cache(const std::string& path, uint64_t tok_fingerprint, uint64_t source_bytes,
                      uint64_t source_hash, std::vector<int32_t>* ids);

// load_tokens: the token stream of text_path, from cache_path when it is valid for this text and
// tokenizer, otherwise tokenized now and (when write_cache) cached. cache_path "" means
// text_path + ".tokcache" (none when text_path is not a regular file); a cache_path that exists and
// is not a regular file is neither read nor written. A damaged or unwritable cache is a warning on
// stderr, each line starting with log_prefix (e.g. "rank 0 (host): "), then "warning: ". Throws
// Error when the text cannot be read. `rank`: the caller's rank; on rank 0 tokenizing prints progress
// lines (encode_with_progress); the default -1 prints none.
std::vector<int32_t> load_tokens(const std::string& text_path, const Tokenizer& tok,
                                 std::string cache_path, bool write_cache, const std::string& log_prefix = "",
                                 int rank = -1);

// encode_with_progress: tok.encode(text), and on rank 0 the progress lines of progress.h named
// "tokenize <name>": bytes done, MB/s and ETA at most every opt.interval_s, then the total.
std::vector<int32_t> encode_with_progress(const Tokenizer& tok, std::string_view text, const std::string& name,
                                          int rank, const ProgressOptions& opt = {});

}  // namespace xtrain
