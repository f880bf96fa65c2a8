// xtrain_tokenize: GPT-2 BPE from the command line: tokenize a text file into a token cache, print
// the ids of a string, or decode ids. Exit codes (core/cli.h): 0 success, 1 runtime error, 2 usage error.
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/cli.h"
#include "core/error.h"
#include "core/io.h"
#include "data/token_cache.h"
#include "data/tokenizer_options.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "Usage: xtrain_tokenize [--encoder-json F --vocab-bpe F | --tokenizer-json F | --tokenizer NAME [--tokenizer-ranks F]]\n"
    "                       (--input TEXT [--output CACHE] | --print-ids TEXT | --decode IDS)\n"
    "Byte-level BPE: GPT-2 (tiktoken \"gpt2\" ids) or a tiktoken encoding (docs/tokenizers.md).";

// make_options: this tool's options; the tokenizer files are bound to `files`.
po::options_description make_options(xtrain::TokenizerFiles& files) {
  po::options_description o = xtrain::cli_group("Options");
  xtrain::add_tokenizer_options(o, files);
  o.add_options()
      ("input", po::value<std::string>(), "text file to tokenize into a token cache (default: none)")
      ("output", po::value<std::string>(), "token cache to write (default: <input>.tokcache); a file already there must be a token cache")
      ("print-ids", po::value<std::string>(), "print the ids of this text, space-separated (default: none)")
      ("decode", po::value<std::string>(),
       "ids in [0, vocabulary size) separated by spaces or commas; writes their bytes and a newline (default: none)");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// check_output: the token cache `output` ("" = none) may be written: it is neither the input nor a
// tokenizer file in use (UsageError; same_file: a hard link or symlink too), write_file_atomic can
// create or replace it (check_writable: Error), and an existing file there is a token cache, maybe
// damaged or stale (UsageError otherwise: a text or a model file is never replaced).
void check_output(const std::string& output, const std::string& input, const xtrain::TokenizerFiles& files) {
  if (output.empty()) return;
  std::vector<std::pair<const char*, std::string>> inputs = {{"--input", input}};
  if (!xtrain::tokenizer_ranks_path(files).empty())
    inputs.emplace_back("--tokenizer-ranks", xtrain::tokenizer_ranks_path(files));
  else if (files.tokenizer_json.empty())
    inputs.insert(inputs.end(), {{"--encoder-json", files.encoder_json}, {"--vocab-bpe", files.vocab_bpe}});
  else
    inputs.emplace_back("--tokenizer-json", files.tokenizer_json);
  for (const auto& [opt, path] : inputs)
    if (xtrain::same_file(path, output))
      throw xtrain::UsageError(std::string(opt) + " and --output name the same file (" + output + ")");
  xtrain::check_writable(output, "--output");
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && !xtrain::looks_like_token_cache(output))
    throw xtrain::UsageError("--output " + output + " exists and is not a token cache; not replacing it");
}

int run(const po::variables_map& vm, xtrain::TokenizerFiles& files) {
  const int modes = int(vm.count("input")) + int(vm.count("print-ids")) + int(vm.count("decode"));
  if (modes != 1) throw xtrain::UsageError("give exactly one of --input, --print-ids, --decode");
  if (vm.count("output") && !vm.count("input")) throw xtrain::UsageError("--output needs --input");
  xtrain::read_tokenizer_options(vm, files);
  xtrain::reject_empty_values(vm, {"input", "output"});
  const std::string input = vm.count("input") ? vm["input"].as<std::string>() : "";
  const std::string output = vm.count("output") ? vm["output"].as<std::string>() : input.empty() ? "" : input + ".tokcache";
  check_output(output, input, files);  // before the tokenizer loads and the text is tokenized

  auto t0 = std::chrono::steady_clock::now();
  const xtrain::Tokenizer tok = xtrain::load_tokenizer(files);
  const double load_s = seconds_since(t0);

  if (vm.count("print-ids")) {
    const std::vector<int32_t> ids = tok.encode(vm["print-ids"].as<std::string>());
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  } else if (vm.count("decode")) {
    const std::string bytes = tok.decode(xtrain::parse_token_ids(vm["decode"].as<std::string>(), "--decode", tok.vocab_size()));
    std::cout.write(bytes.data(), std::streamsize(bytes.size()));
    std::cout << "\n";
  } else {
    xtrain::SourceId source = xtrain::stat_source(input);  // before reading (token_cache.h)
    const std::string text = xtrain::read_file(input);
    source.hash = xtrain::xxh3_64(text.data(), text.size());
    t0 = std::chrono::steady_clock::now();
    xtrain::ProgressOptions progress;
    progress.out = stderr;  // stdout keeps its one machine-readable line
    const std::vector<int32_t> ids = xtrain::encode_with_progress(tok, text, input, 0, progress);
    const double encode_s = seconds_since(t0);
    xtrain::write_token_cache(output, ids, tok.vocab_size(), tok.fingerprint(), source);
    std::printf("tokens=%zu bytes=%zu seconds=%.3f load_seconds=%.3f id_bytes=%d output=%s\n", ids.size(), text.size(),
                encode_s, load_s, xtrain::token_id_bytes(tok.vocab_size()), output.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xtrain::run_cli("xtrain_tokenize", [&] {
    xtrain::TokenizerFiles files;
    const xtrain::CliArgs args = xtrain::parse_cli({"xtrain_tokenize", kUsage, make_options(files), {}, {}}, argc, argv);
    if (args.help || args.version) {
      std::cout << (args.help ? args.help_text : args.version_text);
      return xtrain::kExitOk;
    }
    return run(args.vm, files);
  });
}
