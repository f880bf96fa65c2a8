// Token cache: the token stream of one text or JSON lines file in a binary file that training
// memory-maps read-only, so later runs skip tokenizing and the ranks of a node share one page-cache copy.
// Format version 3 (little-endian), the one reader and writer of it (xtrain_mpi, xtrain_tokenize):
//   0  char[8] magic "XTTOKENS"        8  u32 version = 3         12 u32 id_bytes: 2 or 4
//   16 u64 tokenizer fingerprint (IdsRecipe::fingerprint)         24 u64 source size (bytes)
//   32 u64 source mtime (ns since epoch)                          40 u64 source hash (xxh3_64 of the file)
//   48 u64 token count
//   56 u64 ids hash (xxh3_64 of the stored id bytes)              64 u64 source device (st_dev)
//   72 u64 source inode (st_ino)      80 u64 source ctime (ns since epoch)
//   88 count ids of id_bytes each (uint16 when the vocabulary has <= 65536 ids, as llm.c's shards;
//      uint32 otherwise); the file ends there. (Version 2 had no device, inode and ctime: the ids
//      started at 64. Such caches fail open() and are rebuilt with a warning.)
// Written atomically (write_file_atomic, io.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <xtrain/core/progress.h>
#include <xtrain/data/token_stream.h>
#include <xtrain/data/tokenizer.h>

namespace xtrain {

// SourceId: what a cache records of the text it was made from. A cache belongs to a text when the
// tokenizer fingerprint and the size match and either every stat field matches (size, mtime, device,
// inode, ctime: no read of the text, make and rsync's quick check made strict) or, when a stat field
// differs (a copy, a touch, tar or mv), the text's xxh3_64 matches the recorded one. Device and
// inode tell apart two texts that agree in size and mtime (tar gives same-size files the same
// whole-second mtime, mv keeps it); ctime changes on every write, rename or utimensat of the text.
struct SourceId {
  uint64_t bytes = 0;
  uint64_t mtime_ns = 0;
  uint64_t hash = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t ctime_ns = 0;
  // same_stat: every field stat_source fills agrees (hash not compared).
  bool same_stat(const SourceId& o) const {
    return bytes == o.bytes && mtime_ns == o.mtime_ns && device == o.device && inode == o.inode && ctime_ns == o.ctime_ns;
  }
};

// stat_source: size, mtime, device, inode and ctime of path (hash left 0). Throws Error "cannot read
// <path>: <strerror>".
SourceId stat_source(const std::string& path);

// token_id_bytes: bytes per stored id for a vocabulary of vocab_size ids: 2 when every id fits in
// uint16 (vocab_size <= 65536), else 4.
int token_id_bytes(int vocab_size);

struct TokenCacheHeader {
  int id_bytes = 4;
  uint64_t tokenizer_fingerprint = 0;
  SourceId source;
  uint64_t count = 0;
  uint64_t ids_hash = 0;
};

// write_token_cache: writes ids (each in [0, vocab_size)) in the format above, ids of
// token_id_bytes(vocab_size) bytes. A new cache gets the permission bits `mode` minus the umask: pass
// the text's, so that the cache (from which the text can be decoded) is readable by no one who cannot
// read the text. Throws Error naming path when an id does not fit or the write fails.
void write_token_cache(const std::string& path, const std::vector<int32_t>& ids, int vocab_size,
                       uint64_t tok_fingerprint, const SourceId& source, mode_t mode = 0666);

// looks_like_token_cache: path starts with the cache magic (a token cache, maybe damaged or stale) or
// is empty: a new cache may replace it; any other file (or one that cannot be read) is never overwritten.
bool looks_like_token_cache(const std::string& path);

// starts_with_token_cache_magic: path's first bytes are the whole cache magic (a token cache, however
// named); false for anything else, including a file that cannot be read.
bool starts_with_token_cache_magic(const std::string& path);

// MappedTokenCache: a token cache mapped read-only (mmap, MAP_SHARED: every process mapping the file
// shares its page-cache pages). open() checks magic, version, id width, that the file size is exactly
// header + count x id_bytes, and the ids hash (one pass over the mapping, tens of GB/s); it throws
// Error "token cache <path> ..." naming what is wrong (missing, truncated, foreign, corrupt). Where the
// process may map no more files (ENOMEM: the kernel's vm.max_map_count, ~65,530 mappings, tens of
// thousands of shards) the file is read into this process's memory instead, with one warning per process.
// owned_only: also Error "token cache <path> is owned by uid ..."/"has N hard links" unless the file
// opened is this user's with one link (checked on the descriptor: what is mapped is what was checked).
class MappedTokenCache {
 public:
  static std::shared_ptr<const MappedTokenCache> open(const std::string& path, bool owned_only = false);
  ~MappedTokenCache();
  MappedTokenCache(const MappedTokenCache&) = delete;
  MappedTokenCache& operator=(const MappedTokenCache&) = delete;
  const TokenCacheHeader& header() const { return header_; }
  TokenView ids() const;

 private:
  MappedTokenCache() = default;
  TokenCacheHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::string copy_;                       // the file's bytes when it could not be mapped (read_file)
  const unsigned char* bytes_ = nullptr;   // map_ or copy_
};

// kTokenCacheExt: how every token cache's file name ends (beside its data, or in --cache-dir);
// is_token_cache_name: whether path ends so (a --data entry or an output with that name is refused).
inline constexpr const char* kTokenCacheExt = ".tokcache";
bool is_token_cache_name(const std::string& path);

// kCacheNextToData: the --cache-dir value that keeps each file's cache beside it, <file>.tokcache (a
// data directory is written into only when asked).
inline constexpr const char* kCacheNextToData = "next-to-data";

// default_token_cache_dir: the per-user cache directory: $XDG_CACHE_HOME/xtrain where XDG_CACHE_HOME
// is an absolute path (the XDG Base Directory spec ignores a relative one), else $HOME/.cache/xtrain;
// "" when neither is set.
std::string default_token_cache_dir();

// token_cache_dir: the cache directory (CorpusOptions::cache_dir) of a --cache-dir value, the trainer's
// and xtrain_eval's: "" (not given) gives default_token_cache_dir() (itself "" when neither variable is
// set: the caller then caches nothing and says so), kCacheNextToData gives "" (each cache beside its
// file), any other value itself.
std::string token_cache_dir(const std::string& cache_dir_option);

// check_no_cache: --no-cache (the run reads and writes no token cache) with a --cache-dir value ("": not
// given) leaves that option unused: throws UsageError naming both (xtrain_mpi, xtrain_threads, xtrain_eval).
void check_no_cache(bool no_cache, const std::string& cache_dir);

// token_cache_dir_origin: what chose token_cache_dir(cache_dir_option), as messages name it:
// "--cache-dir" when the option is given, else "$XDG_CACHE_HOME/xtrain" or "$HOME/.cache/xtrain".
std::string token_cache_dir_origin(const std::string& cache_dir_option);

// check_cache_dir_owner: a cache directory that exists must be this user's or root's, whatever chose it
// (the option, $XDG_CACHE_HOME or $HOME): its caches are mapped as this run's tokens and written for
// later runs, so another user's directory (one made first in a sticky /tmp) is refused in one line
// (Error "<origin> <dir>: owned by uid ...", origin as token_cache_dir_origin gives it), as an output
// through another user's symlink is (io.h). An absent directory passes (this user makes it with the
// first cache).
void check_cache_dir_owner(const std::string& dir, const std::string& origin = "--cache-dir");

// not_a_directory: dir exists and is not a directory, or a component on its way is not one (ENOTDIR):
// no cache can be read or written there, whatever the run does (the caller warns once and caches nothing).
bool not_a_directory(const std::string& dir);

// check_output_outside_cache_dirs: an output file (opt: the option naming it) is not directly in a cache
// directory: token_cache_dir(cache_dir_option) (the run's --cache-dir value; next-to-data: none) or
// default_token_cache_dir() (where every program keeps its tokenizer tables, data/tokenizer_cache.h). Their
// entries are named by content (<hash>-<fingerprint>.tokcache, <key>.toktables) and one that is damaged or
// foreign is replaced, so an output there could be overwritten by a later start or read as a cache.
// same_file compares the output's directory (also through a symlink, or not yet created) with each, and the
// directory a write reaches: every symbolic link on the path followed (any component, dangling or not).
// Throws UsageError "<opt> <path> is inside the token cache directory <dir> (<origin>: ...)".
void check_output_outside_cache_dirs(const std::string& path, const std::string& opt, const std::string& cache_dir_option);

// check_directory_outside_cache_dirs: an output directory (opt: the option naming it, e.g. xtrain_export's
// --out) is neither one of the cache directories check_output_outside_cache_dirs names nor below one at any
// depth (a subdirectory of a cache is refused as the files directly in it are): same_file compares it and
// each directory above it with each cache directory, both with every symbolic link on their path followed
// (any component, dangling or not: "link/" to a directory not made yet in a cache is in it) and ".." applied
// after them, as the kernel does. A symbolic link loop is left to the write, which fails on it.
// Throws UsageError "<opt> <path> is [inside] the token cache directory <dir> (<origin>: ...)".
void check_directory_outside_cache_dirs(const std::string& path, const std::string& opt, const std::string& cache_dir_option);

// keyed_cache_path: the cache of a text in a cache directory, named by its content and the tokenizer:
// "<dir>/<xxh3_64 of the text, 16 hex>-<tokenizer fingerprint, 16 hex>.tokcache". A copied, moved or
// touched text finds its cache; two texts never share one.
std::string keyed_cache_path(const std::string& dir, uint64_t text_hash, uint64_t tok_fingerprint);

// IdsRecipe: how a cached file's bytes become its ids. `fingerprint` is what the cache header records
// (offset 16) and a keyed cache's name holds: for a text the tokenizer's fingerprint, for JSON lines
// that mixed with what else changes the ids (jsonl_recipe, data_format.h). encode(bytes) gives the ids
// of the file's whole contents; its Errors (e.g. a line that is not JSON) pass through load_cached_ids.
struct IdsRecipe {
  uint64_t fingerprint = 0;
  std::function<std::vector<int32_t>(const std::string& bytes)> encode;
};

// text_recipe: a text file's recipe: tok's fingerprint and encode_with_progress(tok, bytes, name, rank)
// (tok must outlive the recipe).
IdsRecipe text_recipe(const Tokenizer& tok, const std::string& name, int rank);

// load_cached_ids: the ids of the file at `path` through the cache at cache_path: the mapped cache when
// it belongs to this file and recipe (SourceId, recipe.fingerprint), otherwise recipe.encode(the file's
// bytes) now and, when write_cache, cached and mapped (in memory when the cache cannot be written).
// Ids must lie in [0, vocab_size) (the cache's id width, token_id_bytes). A cache that matched by hash
// only is, when write_cache and its directory is writable, rewritten with the file's current stat
// fields (same ids). cache_path "" means path + ".tokcache" (none when path is not a regular file). A
// cache that is missing, empty (0 bytes), stale, damaged or of an older format is rebuilt; one that
// exists and is not a regular file, is not a token cache (no magic) or cannot be read is neither read
// nor overwritten. Each such case is a warning on stderr starting with log_prefix (e.g. "rank 0
// (host): "), then "warning: " (an unreadable cache: "token cache <path> is unreadable (<strerror>);
// ..."). A cache is written only after encode returns, atomically (write_file_atomic), so an encode
// that throws leaves nothing. Throws Error when the file cannot be read, and encode's Errors.
// *tokenized, when given, is set to whether the file was encoded (false: a cache was reused).
// record_identity false (a keyed_cache_path: the name holds the content) skips that rewrite, which
// copies of one file would otherwise repeat in turn. owned_only (a cache in a cache directory, which
// other users may reach, e.g. a sticky one): a cache there that is not a regular file of this user
// with one link (a symbolic link, another user's file, a hard link) is neither read nor written: one
// warning line ("token cache <path> <why>; not reading or replacing it, tokenizing <path> in memory").
TokenStream load_cached_ids(const std::string& path, const IdsRecipe& recipe, int vocab_size, std::string cache_path,
                            bool write_cache, const std::string& log_prefix = "", bool* tokenized = nullptr,
                            bool record_identity = true, bool owned_only = false);

// load_tokens: load_cached_ids of the text at text_path with text_recipe(tok, text_path, rank): on rank
// 0 tokenizing prints progress lines (encode_with_progress); rank -1 prints none.
TokenStream load_tokens(const std::string& text_path, const Tokenizer& tok, std::string cache_path, bool write_cache,
                        const std::string& log_prefix = "", int rank = -1, bool* tokenized = nullptr,
                        bool record_identity = true);

// encode_with_progress: tok.encode(text), and on rank 0 the progress lines of progress.h named
// "tokenize <name>": bytes done, MB/s and ETA at most every opt.interval_s, then the total.
std::vector<int32_t> encode_with_progress(const Tokenizer& tok, std::string_view text, const std::string& name,
                                          int rank, const ProgressOptions& opt = {});

}  // namespace xtrain
