// The shared tokenizer file options (see src/data/tokenizer_options.h).
#include "data/tokenizer_options.h"

#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "data/tiktoken.h"

namespace po = boost::program_options;

namespace xtrain {

namespace {
std::string with_note(const std::string& help, const std::string& note) {
  return note.empty() ? help : help + "; " + note;
}
}  // namespace

void add_tokenizer_options(po::options_description& desc, TokenizerFiles& files, const TokenizerOptionNotes& notes) {
  desc.add_options()
    ("encoder-json", po::value(&files.encoder_json)->default_value(default_data_file("gpt2/encoder.json")),
     with_note("OpenAI GPT-2 encoder.json (token -> id)", notes.encoder_json).c_str())
    ("vocab-bpe", po::value(&files.vocab_bpe)->default_value(default_data_file("gpt2/vocab.bpe")),
     with_note("OpenAI GPT-2 vocab.bpe (merges in rank order)", notes.vocab_bpe).c_str());
  std::string names;
  for (const std::string& n : tiktoken_names()) names += (names.empty() ? "" : ", ") + n;
  if (notes.hf_json)
    desc.add_options()
    ("tokenizer", po::value(&files.tokenizer)->default_value("gpt2"),
     ("tokenizer: gpt2 (the --encoder-json/--vocab-bpe or --tokenizer-json files) or a tiktoken encoding with "
      "its split pattern and special tokens: " + names + " (docs/tokenizers.md)").c_str())
    ("tokenizer-ranks", po::value(&files.tokenizer_ranks)->default_value(""),
     ("rank file of the --tokenizer encoding (\"<base64 token> <rank>\" lines; Llama 3's tokenizer.model is one) "
      "(default: " + default_data_file("tokenizers/<name>.tiktoken") + ", fetched by scripts/setup.sh --tokenizers; the data directory: $XTRAIN_DATA, else <prefix>/share/xtrain, else a build tree's source data/)").c_str());
  if (notes.hf_json)
    desc.add_options()("tokenizer-json", po::value(&files.tokenizer_json)->default_value(""),
                       "Hugging Face tokenizer.json; when given, it replaces --encoder-json/--vocab-bpe (default: none)")
      ("tokenizer-model", po::value(&files.tokenizer_model)->default_value(""),
       "SentencePiece .model file (spm_train's; Llama 2's tokenizer.model), encoded by libsentencepiece; when given, it "
       "replaces --encoder-json/--vocab-bpe (default: none)");
}

void read_tokenizer_options(const po::variables_map& vm, TokenizerFiles& files) {
  reject_empty_values(vm, {"encoder-json", "vocab-bpe", "tokenizer-json", "tokenizer", "tokenizer-model", "tokenizer-ranks"});
  const bool ranks_given = !files.tokenizer_ranks.empty();
  if (!files.tokenizer_model.empty()) {
    const bool other = (!files.tokenizer.empty() && files.tokenizer != "gpt2") || ranks_given ||
                       !files.tokenizer_json.empty() || (vm.count("encoder-json") && !vm["encoder-json"].defaulted()) ||
                       (vm.count("vocab-bpe") && !vm["vocab-bpe"].defaulted());
    if (other)
      throw UsageError("--tokenizer-model names the whole tokenizer; do not give --tokenizer, --tokenizer-ranks, "
                       "--tokenizer-json, --encoder-json or --vocab-bpe with it");
  }
  if (!files.tokenizer.empty() && files.tokenizer != "gpt2") {
    tiktoken_default_file(files.tokenizer);  // UsageError naming the known ones for an unknown name
    const bool gpt2_files = (vm.count("encoder-json") && !vm["encoder-json"].defaulted()) ||
                            (vm.count("vocab-bpe") && !vm["vocab-bpe"].defaulted()) || !files.tokenizer_json.empty();
    if (gpt2_files)
      throw UsageError("--tokenizer " + files.tokenizer + " reads a rank file; do not give --encoder-json, "
                       "--vocab-bpe or --tokenizer-json with it");
  } else if (ranks_given) {
    throw UsageError("--tokenizer-ranks needs --tokenizer NAME (one of the tiktoken encodings)");
  }
  files.any_given = false;
  for (const char* o : {"encoder-json", "vocab-bpe", "tokenizer", "tokenizer-ranks", "tokenizer-json", "tokenizer-model"})
    files.any_given = files.any_given || (vm.count(o) && !vm[o].defaulted());
  files.encoder_json_given = vm.count("encoder-json") && !vm["encoder-json"].defaulted();
  files.vocab_bpe_given = vm.count("vocab-bpe") && !vm["vocab-bpe"].defaulted();
  check_tokenizer_choice(files.tokenizer_json, files.encoder_json_given, files.vocab_bpe_given);
}

}  // namespace xtrain
