// The command-line pieces that xtrain_mpi, xtrain_threads, xtrain_tokenize, xtrain_generate and
// xtrain_export share: the tokenizer options (--tokenizer, --tokenizer-ranks, --encoder-json,
// --vocab-bpe, --tokenizer-json, --tokenizer-model),
// declared, checked and loaded (load_tokenizer(const TokenizerFiles&), tokenizer.h) once.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "core/cli.h"  // reject_empty_values
#include <xtrain/data/tokenizer.h>

namespace xtrain {

// TokenizerOptionNotes: a tool's words appended (after "; ") to the shared help of --encoder-json /
// --vocab-bpe (e.g. what xtrain_export writes them as); hf_json = false leaves --tokenizer-json, --tokenizer-model,
// --tokenizer and --tokenizer-ranks out (a tool that handles only GPT-2's pair).
struct TokenizerOptionNotes {
  std::string encoder_json, vocab_bpe;
  bool hf_json = true;
};

// add_tokenizer_options: adds --encoder-json and --vocab-bpe (defaults <data directory>/gpt2/
// encoder.json and vocab.bpe, the files scripts/setup.sh fetches) and --tokenizer-json (default none)
// to `desc`, bound to `files`, at this point of desc's --help order; also --tokenizer (default gpt2),
// --tokenizer-ranks (default: the encoding's file under <data directory>/tokenizers; core/data_dir.h) and
// --tokenizer-model (a SentencePiece model, default none).
void add_tokenizer_options(boost::program_options::options_description& desc, TokenizerFiles& files,
                           const TokenizerOptionNotes& notes = {});

// read_tokenizer_options: after po::store + po::notify of those options, records which of the GPT-2
// files were given on the command line and applies check_tokenizer_choice (UsageError: both
// --tokenizer-json and --encoder-json/--vocab-bpe given).
// Also refuses an empty path for any of the three (reject_empty_values, core/cli.h), an unknown
// --tokenizer name, GPT-2 files given with a tiktoken --tokenizer, --tokenizer-ranks without one, and
// --tokenizer-model given with any other tokenizer option.
void read_tokenizer_options(const boost::program_options::variables_map& vm, TokenizerFiles& files);

}  // namespace xtrain
