// The training corpus of --data: one text file, several, or a directory of shards, joined into one
// token stream. Tokenizing is shared by the ranks of a node (each a share of the text and JSON lines
// files that lack a valid token cache), then every rank maps every cache, so a node holds one
// page-cache copy.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <xtrain/comm/host_collectives.h>
#include <xtrain/data/data_format.h>
#include <xtrain/data/token_stream.h>
#include <xtrain/data/tokenizer.h>

namespace xtrain {

// list_data_files: the text files named by a --data value: comma-separated paths, each a file or a
// directory. A directory gives its entries sorted by name (byte order), leaving out hidden names
// (".*") and token caches (names containing ".tokcache", including their temporary files); each
// must be a regular file (or a symlink to one). opt: the option that gave spec, named in every error
// (the trainer's --data, --val-data, --eval NAME; xtrain_eval's --loss). Throws Error "<opt>: cannot
// read <path>: <strerror>" for a missing or unreadable path, "<opt> <path>: cannot read: not a regular
// file ..." for a FIFO, device or subdirectory, "<opt> <dir>: no data files in the directory" for an
// empty directory, UsageError "<opt> lists one file twice: ..." for a file listed twice.
// A file given by name that ends in ".tokcache" is refused ("<opt> <path>: a token cache, not a text").
std::vector<std::string> list_data_files(const std::string& spec, const std::string& opt = "--data");

// check_distinct_files: no two of `files` are one file (device and inode, so a second path to it, a
// hard link or a symlink, counts too): the check list_data_files makes within one value, for programs that
// join several values (xtrain_eval's --loss sets). Throws UsageError "<opt> lists one file twice: <a> and
// <b>" (" (the same file)" after two paths), Error "<opt>: cannot read <path>: <strerror>" for a file
// that cannot be stat'ed.
void check_distinct_files(const std::vector<std::string>& files, const std::string& opt);

// data_spec_entries: the comma-separated entries of a --data value as given (files or directories),
// the one split list_data_files uses. Throws UsageError "<opt> ...: an empty path in the list".
std::vector<std::string> data_spec_entries(const std::string& spec, const std::string& opt = "--data");

// join_files: the one rule joining files into the stream: their streams in order with the <|endoftext|>
// id (eot_id) between consecutive files, none after the last, nothing between when eot_id < 0. So one
// file gives exactly its own stream, and files a, b give the stream of the single text
// a + "<|endoftext|>" + b (the tokenizer encodes special tokens in text to their ids).
// token_file (empty, or one flag per file): no separator next to a file flagged (an llm.c or nanoGPT
// token file, is_token_file: its ids are joined as they are, so shards cut from one stream by
// xtrain_tokenize --shard-tokens give that stream back).
TokenStream join_files(const std::vector<TokenStream>& files, int eot_id, const std::vector<bool>& token_file = {});

// CorpusOptions: tokens_cache: the cache of a single file ("" = <file>.tokcache; a UsageError with
// several files); no_cache: tokenize every file in memory on every rank, no cache read or written
// (JSON lines then streamed, never held whole);
// format: --data-format (detect_data_format, per file); jsonl_field: --jsonl-field; option: the option
// that named the files, for load_corpus's usage errors (--data, or xtrain_eval's --loss).
// cache_dir: the directory of the caches, each named by its file's content and its recipe's fingerprint
// (keyed_cache_path, token_cache.h; for JSON lines jsonl_fingerprint, which holds jsonl_field; created
// when missing); "" = <file>.tokcache beside each file.
struct CorpusOptions {
  std::string tokens_cache;
  std::string cache_dir;
  bool no_cache = false;
  DataFormat format = DataFormat::automatic;
  std::string jsonl_field = "text";
  std::string option = "--data";
};

// load_corpus: collective over group (every rank calls it with the same files). Phase 1: local rank
// r of each node makes sure the caches of the text and JSON lines files i with i % local_size == r
// are valid (tokenizing and writing those that are not, text_recipe or jsonl_recipe; with a cache_dir
// it hashes each of them for the cache's name and shares the hashes with one all-reduce). Phase 2: every rank maps the caches of the other files (in
// memory when a cache is still missing, e.g. an unwritable directory). So a text is tokenized once
// per node, and read only by the rank that owns it on the node. A stop signal ends both phases
// (OnStopSignal::end_job). Both phases run under
// agree_while_working (agree.h), so a rank that fails names its file and every rank throws within
// --comm-timeout (a bad JSON lines file: its parse error, naming file and line). Rank 0 prints one
// line: text and JSON lines files, tokens, caches reused and files tokenized. Token files (llm.c
// shards, nanoGPT files: data_format.h) are mapped in phase 2 by every rank; with no_cache JSON lines
// are tokenized there by every rank.
// Returns join_files of the files' streams. Throws UsageError, before any collective, for several
// files with opt.tokens_cache, or several files with a tokenizer that has no <|endoftext|> (nothing
// would separate them).
TokenStream load_corpus(HostCollectives& group, int local_rank, int local_size, const std::vector<std::string>& files,
                        std::shared_ptr<const Tokenizer> tok, const CorpusOptions& opt);

}  // namespace xtrain
