// Shared fixtures of the tokenizer tests: paths under $XTRAIN_SHARED_DATA, the GPT-2 tokenizer from
// both file formats (loaded once), encoder.json read directly as an oracle, and the scratch directory (scratch_dir.h).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "core/io.h"
#include "data/token_cache.h"
#include <xtrain/data/tokenizer.h>
#include "data/tokenizer_options.h"
#include "scratch_dir.h"

namespace xtrain::test {

inline std::string shared_data() {
  const char* d = std::getenv("XTRAIN_SHARED_DATA");
  return d ? d : "";
}
inline std::string gpt2_file(const std::string& name) { return shared_data() + "/gpt2/" + name; }
// gpt2_bpe_file: GPT-2's encoder.json or vocab.bpe from $XTRAIN_DATA_DIR/gpt2 (scripts/setup.sh fetches and
// sha256-checks them; the same bytes as the shared data's), so the tests on them need no shared data.
inline std::string gpt2_bpe_file(const std::string& name) {
  const char* d = std::getenv("XTRAIN_DATA_DIR");
  return std::string(d ? d : "") + "/gpt2/" + name;
}

// parse_tokenizer_options: argv (options only, no program name) through the tokenizer options as every
// program declares and reads them (data/tokenizer_options.h), into `files`; throws what a program sees.
inline void parse_tokenizer_options(std::vector<const char*> argv, TokenizerFiles& files) {
  namespace po = boost::program_options;
  po::options_description desc;
  add_tokenizer_options(desc, files);
  argv.insert(argv.begin(), "prog");
  po::variables_map vm;
  po::store(po::parse_command_line(int(argv.size()), argv.data(), desc), vm);
  po::notify(vm);
  read_tokenizer_options(vm, files);
}

inline const Tokenizer& gpt2() {
  static const Tokenizer t = Tokenizer::from_gpt2_files(gpt2_bpe_file("encoder.json"), gpt2_bpe_file("vocab.bpe"));
  return t;
}
inline const Tokenizer& hf() {
  static const Tokenizer t = Tokenizer::from_hf_json(gpt2_file("tokenizer.json"));
  return t;
}

// encoder_id: the id encoder.json gives a token written in GPT-2's byte alphabet ("Ġhello").
inline int32_t encoder_id(const std::string& token_text) {
  static const nlohmann::json enc = nlohmann::json::parse(read_file(gpt2_bpe_file("encoder.json")));
  return enc.at(token_text).get<int32_t>();
}

}  // namespace xtrain::test
