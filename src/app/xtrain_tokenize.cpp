// xtrain_tokenize: GPT-2 BPE from the command line: tokenize a text file into a token cache, or
// --data-like files into llm.c shards (--shard-tokens), print the ids of a string, or decode ids.
// Exit codes (core/cli.h): 0 success, 1 runtime error, 2 usage error.
#include <boost/program_options.hpp>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/cli.h"
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "core/json.h"
#include <xtrain/core/stop_signal.h>
#include <xtrain/data/corpus.h>
#include <xtrain/data/data_format.h>
#include "data/token_cache.h"
#include "data/token_shard.h"
#include "data/tokenizer_options.h"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage =
    "Usage: xtrain_tokenize [--encoder-json F --vocab-bpe F | --tokenizer-json F | --tokenizer NAME [--tokenizer-ranks F]\n"
    "                        | --tokenizer-model F.model]\n"
    "                       (--input TEXT [--output CACHE] | --input FILES --shard-tokens N --output NAME\n"
    "                        | --print-ids TEXT | --print-ids-of FILE | --decode IDS)\n"
    "Byte-level BPE: GPT-2 (tiktoken \"gpt2\" ids), a tiktoken encoding or a Hugging Face tokenizer.json; or a SentencePiece model (docs/tokenizers.md).";

// make_options: this tool's options; the tokenizer files are bound to `files`.
po::options_description make_options(xtrain::TokenizerFiles& files) {
  po::options_description o = xtrain::cli_group("Options");
  xtrain::add_tokenizer_options(o, files);
  o.add_options()
      ("input", po::value<std::string>(), "text file to tokenize into a token cache (default: none)")
      ("output", po::value<std::string>(), "token cache to write (default: the one training maps, in --cache-dir); a file already there must be a token cache. With --shard-tokens: the shards' name prefix NAME (required)")
      ("cache-dir", po::value<std::string>()->default_value(""), "without --output: the trainer's --cache-dir (default: $XDG_CACHE_HOME/xtrain or ~/.cache/xtrain; next-to-data: <input>.tokcache)")
      ("shard-tokens", po::value<long long>(), "write llm.c token shards NAME_000000.bin, NAME_000001.bin, ... of N tokens each (the last holds the rest) instead of a cache; --input is then a --data value (files, a comma list or a directory) joined as the trainer joins them")
      ("data-format", po::value<std::string>()->default_value("auto"), "with --shard-tokens: format of the --input files, as the trainer's --data-format")
      ("jsonl-field", po::value<std::string>()->default_value("text"), "with --shard-tokens: the JSON lines field holding each document (given, some --input file must be JSON lines)")
      ("print-ids", po::value<std::string>(), "print the ids of this text, space-separated (default: none)")
      ("print-ids-of", po::value<std::string>(), "a JSON array of texts: print the ids of each, one line per text in order (an empty line for no ids), as --print-ids does for one (default: none)")
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
  std::vector<std::pair<std::string, std::string>> inputs = {{"--input", input}};
  for (const auto& [opt, path] : xtrain::tokenizer_inputs(files)) inputs.emplace_back(opt, path);
  for (const auto& [opt, path] : inputs)
    if (xtrain::same_file(path, output))
      throw xtrain::UsageError(opt + " and --output name the same file (" + output + ")");
  xtrain::check_writable(output, "--output");
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && !xtrain::looks_like_token_cache(output))
    throw xtrain::UsageError("--output " + output + " exists and is not a token cache; not replacing it");
}

// shard_path: NAME_000007.bin for shard 7 (llm.c's numbering: six digits).
std::string shard_path(const std::string& name, size_t k) {
  char num[32];
  std::snprintf(num, sizeof num, "_%06zu.bin", k);
  return name + num;
}

// ShardSet: llm.c shards NAME_000000.bin, NAME_000001.bin, ... written as one set: each into a
// temporary directory beside them (".<name>.shards.tmp.<pid>.<n>": hidden, so a --data listing of the
// directory skips it), then all renamed into place by commit(). Until commit() the destructor removes
// the temporary directory and all it holds, so an error or a stop signal leaves no shard and no
// temporary file (a SIGKILL leaves the hidden directory).
class ShardSet {
 public:
  // ShardSet: the set for the prefix `name` (--output); Error naming it when its directory cannot be
  // reached or the temporary directory cannot be made there.
  explicit ShardSet(const std::string& name) : loc_(xtrain::locate_output(shard_path(name, 0), "--output")), shown_(name) {
    base_ = loc_.name.substr(0, loc_.name.size() - shard_path("", 0).size());
    for (int n = 0;; ++n) {
      tmp_ = "." + base_ + ".shards.tmp." + std::to_string(::getpid()) + "." + std::to_string(n);
      if (::mkdirat(loc_.dir_fd, tmp_.c_str(), 0700) == 0) break;
      if (errno != EEXIST || n == 1000)
        XT_FAIL("--output " << name << ": cannot create a temporary directory in " << (loc_.dir.empty() ? "." : loc_.dir)
                            << ": " << std::strerror(errno));
    }
  }
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;
  ~ShardSet() {
    if (tmp_.empty()) return;
    std::error_code ec;  // best effort, never throws
    std::filesystem::remove_all(loc_.in(tmp_).path(), ec);
  }
  // check_target: shard k may be replaced: absent, or a regular file starting with llm.c's magic
  // (Error for a directory, FIFO or device; UsageError for another file: never replaced).
  void check_target(size_t k) const {
    const std::string path = shard_path(shown_, k);
    struct stat st{};
    if (::fstatat(loc_.dir_fd, shard_path(base_, k).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return;
      XT_FAIL("--output " << path << ": " << std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) XT_FAIL("--output " << path << ": exists and is not a regular file; not replacing it");
    if (!xtrain::starts_with_llmc_magic(path))
      throw xtrain::UsageError("--output " + path + " exists and is not an llm.c shard; not replacing it");
  }
  // write: shard k of count ids into the temporary directory (write_llmc_shard).
  void write(size_t k, const int32_t* ids, size_t count, int vocab_size) {
    xtrain::write_llmc_shard(loc_.in(tmp_ + "/" + shard_path(base_, k)).path(), ids, count, vocab_size);
    written_ = k + 1;
  }
  // commit: renames the shards written into place, in order, and removes the temporary directory.
  void commit() {
    for (size_t k = 0; k < written_; ++k) {
      const std::string file = shard_path(base_, k);
      if (::renameat(loc_.dir_fd, (tmp_ + "/" + file).c_str(), loc_.dir_fd, file.c_str()) != 0)
        XT_FAIL("cannot write llm.c shard " << shard_path(shown_, k) << ": rename failed: " << std::strerror(errno));
    }
    ::unlinkat(loc_.dir_fd, tmp_.c_str(), AT_REMOVEDIR);
    tmp_.clear();
    const int dfd = ::openat(loc_.dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // the renames durable (best effort, as write_file_atomic)
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  xtrain::OutputLocation loc_;  // the directory of the shards; loc_.name is shard 0's name
  std::string shown_;           // NAME as given, for messages
  std::string base_;            // NAME's last component
  std::string tmp_;             // the temporary directory's name in loc_ ("" after commit)
  size_t written_ = 0;
};

// write_shards: the stream of the --data-like `spec` (list_data_files, the trainer's formats and
// join_files) in llm.c shards of shard_tokens ids, as one ShardSet: nothing is written before every
// input is read and tokenized, and nothing is left when a write fails or a stop signal (SIGINT,
// SIGTERM, SIGUSR1) arrives before the set is complete (then one line and kExitStopped). An existing
// file at a shard path must be an llm.c shard (UsageError otherwise).
int write_shards(const po::variables_map& vm, const xtrain::TokenizerFiles& files, const std::string& spec,
                  const std::string& name, long long shard_tokens) {
  if (shard_tokens <= 0) throw xtrain::UsageError("--shard-tokens must be positive");
  if (name.empty()) throw xtrain::UsageError("--shard-tokens needs --output NAME (the shards' name prefix)");
  const xtrain::DataFormat format = xtrain::parse_data_format(vm["data-format"].as<std::string>());
  const std::vector<std::string> inputs = xtrain::list_data_files(spec, "--input");
  std::vector<xtrain::DataFormat> formats;
  for (const std::string& f : inputs) formats.push_back(xtrain::detect_data_format(f, format));
  if (!vm["jsonl-field"].defaulted())  // read by some --input file, as the trainer's by some --data file
    xtrain::check_jsonl_field_read(vm["jsonl-field"].as<std::string>(), format, inputs, "--input");
  xtrain::check_writable(shard_path(name, 0), "--output");
  // not in a cache directory (the --cache-dir value or the per-user default), as the trainer's outputs
  xtrain::check_output_outside_cache_dirs(shard_path(name, 0), "--output", vm["cache-dir"].as<std::string>());
  std::error_code ec;
  if (std::filesystem::exists(shard_path(name, 0), ec) && !xtrain::starts_with_llmc_magic(shard_path(name, 0)))
    throw xtrain::UsageError("--output " + shard_path(name, 0) + " exists and is not an llm.c shard; not replacing it");
  for (const std::string& f : inputs)
    if (xtrain::same_file(f, shard_path(name, 0)))
      throw xtrain::UsageError("--input and --output name the same file (" + f + ")");
  const xtrain::Tokenizer tok = xtrain::load_tokenizer(files);
  std::vector<xtrain::TokenStream> parts;
  std::vector<bool> token_file;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (formats[i] == xtrain::DataFormat::text) {
      xtrain::ProgressOptions progress;
      progress.out = stderr;
      parts.emplace_back(xtrain::encode_with_progress(tok, xtrain::read_file(inputs[i]), inputs[i], 0, progress));
    } else {
      parts.push_back(xtrain::load_pretokenized_or_jsonl(inputs[i], formats[i], tok, vm["jsonl-field"].as<std::string>()));
    }
    token_file.push_back(xtrain::is_token_file(formats[i]));
  }
  if (inputs.size() > 1 && tok.eot_id() < 0)
    throw xtrain::UsageError("--input names several files, but the tokenizer has no <|endoftext|> to separate them");
  const std::vector<int32_t> ids = xtrain::join_files(parts, tok.eot_id(), token_file).to_vector();
  const size_t per = static_cast<size_t>(shard_tokens);
  const size_t count = ids.empty() ? 1 : (ids.size() + per - 1) / per;
  xtrain::install_stop_signals();  // from here a stop signal removes what was written (ShardSet)
  ShardSet set(name);
  for (size_t k = 0; k < count; ++k) set.check_target(k);
  size_t k = 0;
  for (size_t at = 0; k < count; at += per, ++k) {
    if (const int sig = xtrain::stop_signal_received()) {
      std::fprintf(stderr, "xtrain_tokenize: stopped by %s after %zu of %zu shards: none written (exit %d)\n",
                   xtrain::signal_name(sig), k, count, xtrain::kExitStopped);
      return xtrain::kExitStopped;
    }
    set.write(k, ids.data() + at, std::min(per, ids.size() - at), tok.vocab_size());
  }
  set.commit();  // a stop signal from here on lets the renames finish: the set is complete
  std::printf("tokens=%zu shards=%zu id_bytes=%d output=%s .. %s\n", ids.size(), k, xtrain::token_id_bytes(tok.vocab_size()),
              shard_path(name, 0).c_str(), shard_path(name, k - 1).c_str());
  return xtrain::kExitOk;
}

int run(const po::variables_map& vm, xtrain::TokenizerFiles& files) {
  const int modes = int(vm.count("input")) + int(vm.count("print-ids")) + int(vm.count("print-ids-of")) + int(vm.count("decode"));
  if (modes != 1) throw xtrain::UsageError("give exactly one of --input, --print-ids, --print-ids-of, --decode");
  if (vm.count("output") && !vm.count("input")) throw xtrain::UsageError("--output needs --input");
  xtrain::read_tokenizer_options(vm, files);
  xtrain::reject_empty_values(vm, {"input", "output", "cache-dir", "print-ids-of"});
  // --print-ids-of: read (and its JSON checked) before the tokenizer loads
  std::vector<std::string> texts;
  if (vm.count("print-ids-of")) {
    const std::string path = vm["print-ids-of"].as<std::string>();
    const nlohmann::json j = xtrain::read_json_file(path);
    if (!j.is_array() || !std::all_of(j.begin(), j.end(), [](const nlohmann::json& t) { return t.is_string(); }))
      XT_FAIL(path << ": expected a JSON array of strings (--print-ids-of)");
    for (const auto& t : j) texts.push_back(t.get<std::string>());
  }
  if (vm.count("shard-tokens")) {
    if (!vm.count("input")) throw xtrain::UsageError("--shard-tokens needs --input");
    return write_shards(vm, files, vm["input"].as<std::string>(), vm.count("output") ? vm["output"].as<std::string>() : "",
                        vm["shard-tokens"].as<long long>());
  }
  if (!vm["data-format"].defaulted() || !vm["jsonl-field"].defaulted())
    throw xtrain::UsageError("--data-format and --jsonl-field go with --shard-tokens");
  const std::string input = vm.count("input") ? vm["input"].as<std::string>() : "";
  // without --output the cache training maps: in the cache directory, named by the text and the
  // tokenizer (keyed_cache_path), or <input>.tokcache with --cache-dir next-to-data
  const std::string cache_dir_opt = vm["cache-dir"].as<std::string>();
  const bool beside = cache_dir_opt == xtrain::kCacheNextToData;
  std::string cache_dir = vm.count("output") || beside ? "" : cache_dir_opt.empty() ? xtrain::default_token_cache_dir() : cache_dir_opt;
  if (!input.empty() && !vm.count("output") && !beside && cache_dir.empty())
    throw xtrain::UsageError("neither XDG_CACHE_HOME nor HOME is set: give --cache-dir DIR or --output CACHE");
  std::string output = vm.count("output") ? vm["output"].as<std::string>() : input.empty() || !beside ? "" : input + ".tokcache";
  check_output(output, input, files);  // before the tokenizer loads and the text is tokenized
  if (!input.empty() && !cache_dir.empty()) {  // the directory whatever chose it (token_cache.h)
    xtrain::check_cache_dir_owner(cache_dir, xtrain::token_cache_dir_origin(cache_dir_opt));
    xtrain::open_output_directory(cache_dir, xtrain::token_cache_dir_origin(cache_dir_opt), true);
  }

  auto t0 = std::chrono::steady_clock::now();
  const xtrain::Tokenizer tok = xtrain::load_tokenizer(files);
  const double load_s = seconds_since(t0);

  if (vm.count("print-ids") || vm.count("print-ids-of")) {
    if (vm.count("print-ids")) texts = {vm["print-ids"].as<std::string>()};
    for (const std::string& text : texts) {
      const std::vector<int32_t> ids = tok.encode(text);
      for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
      std::cout << "\n";
    }
  } else if (vm.count("decode")) {
    const std::string bytes = tok.decode(xtrain::parse_token_ids(vm["decode"].as<std::string>(), "--decode", tok.vocab_size()));
    std::cout.write(bytes.data(), std::streamsize(bytes.size()));
    std::cout << "\n";
  } else {
    xtrain::SourceId source = xtrain::stat_source(input);  // before reading (token_cache.h)
    const std::string text = xtrain::read_file(input);
    source.hash = xtrain::xxh3_64(text.data(), text.size());
    if (output.empty()) {
      output = xtrain::keyed_cache_path(cache_dir, source.hash, tok.fingerprint());
      check_output(output, input, files);
    }
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
