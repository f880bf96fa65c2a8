// The formats --data and --val-data read (--data-format): text, llm.c shards, nanoGPT raw uint16
// files and JSON lines; how `auto` tells them apart, and the loading of the ones that are not text
// (text goes through the token cache, corpus.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/data/token_stream.h>
#include <xtrain/data/tokenizer.h>

namespace xtrain {

enum class DataFormat { automatic, text, llmc, nanogpt, jsonl };

// parse_data_format: "auto", "text", "llmc", "nanogpt" or "jsonl"; throws UsageError otherwise.
DataFormat parse_data_format(const std::string& name);
const char* data_format_name(DataFormat f);

// detect_data_format: the format of one file under `requested`: any explicit format is returned as
// is; `automatic` gives llmc for a file that starts with llm.c's magic, jsonl for a name ending in
// .jsonl or .jsonl.zst, else text. nanogpt is never detected: a headerless file of uint16 ids cannot
// be told from text reliably. Under `automatic`, a name ending in ".bin" without llm.c's magic is
// refused (UsageError naming the file and --data-format nanogpt) rather than tokenized as text.
DataFormat detect_data_format(const std::string& path, DataFormat requested);

// check_jsonl_field_read: the one rule for a --jsonl-field given on a command line (not its default),
// the trainer's and the tools': some file of `files` is JSON lines under `format` (detect_data_format: by
// name under auto, a 4-byte read). Otherwise the field would be silently unused: UsageError
// "--jsonl-field <field> is not read: no <inputs> file is JSON lines (--data-format <format>: ...)".
// inputs: the options that name the files, as the message says them ("--data, --val-data or --eval";
// xtrain_eval's "--loss"; xtrain_tokenize's "--input").
void check_jsonl_field_read(const std::string& field, DataFormat format, const std::vector<std::string>& files,
                            const std::string& inputs);

// is_token_file: llm.c shards and nanoGPT files hold ids already, their documents separated as their
// writer chose (llm.c's and nanoGPT's scripts put <|endoftext|> at each document's boundary), so
// join_files adds no separator next to them.
inline bool is_token_file(DataFormat f) { return f == DataFormat::llmc || f == DataFormat::nanogpt; }

// kJsonlIdsVersion: the version of the rule that makes a JSON lines file's ids (each line's field
// tokenized, <|endoftext|> between documents, blank lines skipped: jsonl.h, load_pretokenized_or_jsonl).
// Part of jsonl_fingerprint, so a change to the rule must raise it: caches of the old rule are then
// neither found (keyed names) nor reused (header fingerprint).
inline constexpr int kJsonlIdsVersion = 1;

// jsonl_fingerprint: what a JSON lines cache records in place of the tokenizer fingerprint (token_cache.h):
// FNV-1a 64 (io.h) over "xtrain jsonl <kJsonlIdsVersion>", the field's length (u64) and bytes, and
// tok_fingerprint. So the field, the rule and the tokenizer each change the cache, and a JSON lines
// cache never matches a text cache of the same bytes.
uint64_t jsonl_fingerprint(uint64_t tok_fingerprint, const std::string& field);

// load_pretokenized_or_jsonl: the token stream of a file that is not text (format llmc, nanogpt or
// jsonl, as detect_data_format gave it): token files are memory-mapped and checked against
// tok.vocab_size() (token_shard.h); a JSON lines file is read (jsonl.h) and each document's `field`
// tokenized, with tok.eot_id() between consecutive documents (none after the last), the rule
// join_files applies between text files, so documents as lines train what documents as files train.
// `rank`: rank 0 prints a line of documents and tokens; -1 none. Throws Error naming the file (and
// line). No token cache here: load_corpus caches JSON lines through jsonl_recipe.
TokenStream load_pretokenized_or_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok,
                                       const std::string& field, int rank = -1);

}  // namespace xtrain
