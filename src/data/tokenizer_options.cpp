// The shared tokenizer file options (see src/data/tokenizer_options.h).
#include "data/tokenizer_options.h"

#include "core/error.h"

namespace po = boost::program_options;

namespace xtrain {

namespace {
std::string with_note(const std::string& help, const std::string& note) {
  return note.empty() ? help : help + "; " + note;
}
}  // namespace

void add_tokenizer_options(po::options_description& desc, TokenizerFiles& files, const TokenizerOptionNotes& notes) {
  const std::string dd = XTRAIN_DEFAULT_DATA_DIR;
  desc.add_options()
    ("encoder-json", po::value(&files.encoder_json)->default_value(dd + "/gpt2/encoder.json"),
     with_note("OpenAI GPT-2 encoder.json (token -> id)", notes.encoder_json).c_str())
    ("vocab-bpe", po::value(&files.vocab_bpe)->default_value(dd + "/gpt2/vocab.bpe"),
     with_note("OpenAI GPT-2 vocab.bpe (merges in rank order)", notes.vocab_bpe).c_str());
  if (notes.hf_json)
    desc.add_options()("tokenizer-json", po::value(&files.tokenizer_json)->default_value(""),
                       "Hugging Face tokenizer.json; when given, it replaces --encoder-json/--vocab-bpe (default: none)");
}

void read_tokenizer_options(const po::variables_map& vm, TokenizerFiles& files) {
  reject_empty_values(vm, {"encoder-json", "vocab-bpe", "tokenizer-json"});
  files.encoder_json_given = vm.count("encoder-json") && !vm["encoder-json"].defaulted();
  files.vocab_bpe_given = vm.count("vocab-bpe") && !vm["vocab-bpe"].defaulted();
  check_tokenizer_choice(files.tokenizer_json, files.encoder_json_given, files.vocab_bpe_given);
}

}  // namespace xtrain
