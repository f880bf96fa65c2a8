// xtrain_eval: scores a trained model (an xtrain checkpoint or an export directory) on multiple-choice files
// (HellaSwag's JSON lines or the generic form, include/xtrain/score/multiple_choice.h) and on held-out token
// streams (the loss), with the trainer's own evaluation code (src/score/), so a figure here equals the
// trainer's --eval-mc / --eval figure at the checkpoint's step. A plain process (no launcher, no MPI).
// Exit codes (core/cli.h): 0 success, 1 runtime error, 2 usage error.
#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <xtrain/backend/backend.h>
#include <xtrain/backend/registry.h>
#include "comm/solo_group.h"
#include "core/cli.h"
#include "core/digest.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/log.h>
#include <xtrain/core/progress.h>
#include <xtrain/data/corpus.h>
#include <xtrain/data/data_format.h>
#include "data/token_cache.h"
#include "data/tokenizer_options.h"
#include <xtrain/score/held_out.h>
#include <xtrain/score/multiple_choice.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/export.h>
#include <xtrain/checkpoint/checkpoint.h>

namespace po = boost::program_options;
using namespace xtrain;

namespace {

constexpr const char* kUsage =
    "Usage: xtrain_eval (--ckpt FILE | --model DIR) [--mc FILE]... [--loss FILES]... [options]\n"
    "Scores a trained GPT on multiple-choice files (HellaSwag's format) and held-out data (docs/usage.md, "
    "\"Evaluating\").";

po::options_description make_options(TokenizerFiles& files) {
  po::options_description o = cli_group("Options");
  o.add_options()
      ("ckpt", po::value<std::string>(), "xtrain checkpoint to score (xtrain_mpi --ckpt; default: none)")
      ("model", po::value<std::string>(), "export directory to score (xtrain_export --out, or a Hugging Face GPT2LMHeadModel or LlamaForCausalLM directory; default: none)")
      ("mc", po::value<std::vector<std::string>>()->composing(),
       "multiple-choice JSON lines file, repeatable: HellaSwag's (ctx or ctx_a/ctx_b, endings, label) or the generic "
       "form (context, choices, answer), zstd-compressed when FILE ends in .zst; reports acc, acc_norm and "
       "acc_token_mean (default: none)")
      ("loss", po::value<std::vector<std::string>>()->composing(),
       "held-out data, repeatable, as xtrain_mpi --data (a file, a directory of shards or a comma-separated list, any "
       "--data-format): the mean loss over consecutive windows of --seq tokens (default: none)")
      ("seq", po::value<int>()->default_value(0), "tokens per --loss window (0 = the model's context; given, needs --loss)")
      ("max-seqs", po::value<int>()->default_value(0),
       "windows per --loss set at most, from its start (0 = every whole window; the trainer's --eval takes --val-seqs; given, needs --loss)")
      ("eval-batch", po::value<int>()->default_value(8),
       "sequences per forward: --loss windows, or the choices of whole --mc items (as xtrain_mpi --eval-batch; the "
       "same value gives the trainer's figures bit for bit)")
      ("data-format", po::value<std::string>()->default_value("auto"), "format of the --loss files, as xtrain_mpi --data-format (given, needs --loss)")
      ("jsonl-field", po::value<std::string>()->default_value("text"), "JSON lines --loss files: the string field holding each document (given, some --loss file must be JSON lines)")
      ("cache-dir", po::value<std::string>()->default_value(""),
       "directory of the --loss files' token caches, as xtrain_mpi --cache-dir and shared with it (default: "
       "$XDG_CACHE_HOME/xtrain or ~/.cache/xtrain); next-to-data: <file>.tokcache beside each file (given, needs --loss: --mc reads no cache)")
      ("no-cache", po::bool_switch(), "neither read nor write token caches: tokenize every --loss file in memory (as xtrain_mpi --no-cache; not with --cache-dir; given, needs --loss)")
      ("json", po::value<std::string>(),
       "also write FILE: one JSON object with each set's figures and, for --mc, every item's per-choice "
       "log-probability sums (full precision), token counts and byte lengths (default: none)")
      ("device", po::value<std::string>()->default_value("auto"), "auto | cpu | cuda")
      ("dtype", po::value<std::string>()->default_value("auto"), "auto (bf16 on cuda, fp32 on cpu) | fp32 | bf16");
  add_tokenizer_options(o, files, {"with --model: DIR/vocab.json unless given", "with --model: DIR/merges.txt unless given"});
  return o;
}

struct LoadedModel {
  GPTConfig config;
  std::vector<float> params;
  uint64_t tokenizer_fingerprint = 0;  // 0 = not recorded
  std::string source, vocab_json, merges_txt;
  std::optional<ModelDir> dir;  // --model: the directory (its weights moved into params)
};

// prefixed: e (an Error) with "opt: " in front of its message, of the same kind (usage error or not).
[[noreturn]] void throw_prefixed(const Error& e, const std::string& opt) {
  if (dynamic_cast<const UsageError*>(&e)) throw UsageError(opt + ": " + e.what());
  throw Error(opt + ": " + e.what());
}

// named: fn(), an error of which that does not start with `opt` getting "opt: " in front, so that every
// error from an input names the option that gave it ("--mc: hs.jsonl:12: endings[2]: ...").
template <typename Fn>
auto named(const std::string& opt, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const AgreedFailure&) {
    throw;
  } catch (const Error& e) {
    if (std::string_view(e.what()).substr(0, opt.size()) == opt) throw;
    throw_prefixed(e, opt);
  }
}

LoadedModel load_model(const po::variables_map& vm) {
  LoadedModel m;
  if (vm.count("ckpt")) {
    ProgressOptions progress = long_work_options();
    progress.out = stderr;  // stdout is the table or the JSON
    CheckpointState st = named("--ckpt", [&] { return load_checkpoint(vm["ckpt"].as<std::string>(), 0, progress); });
    m.config = st.meta.model, m.params = std::move(st.params);
    m.tokenizer_fingerprint = st.meta.tokenizer_fingerprint;
    m.source = "the checkpoint";
    return m;
  }
  ModelDir d = named("--model", [&] { return load_model_dir(vm["model"].as<std::string>()); });
  m.config = d.cfg, m.params = std::move(d.params);
  m.vocab_json = d.vocab_json, m.merges_txt = d.merges_txt;
  m.tokenizer_fingerprint = d.tokenizer_fingerprint;
  m.source = "its config.json";
  m.dir = std::move(d);
  return m;
}

// load_tokenizer_for: as xtrain_generate: with --model and no tokenizer option, the directory's tokenizer
// (model_dir_tokenizer: its tokenizer.json, tokenizer.model or vocab.json + merges.txt); else an export's
// vocab.json and merges.txt unless tokenizer files are given.
Tokenizer load_tokenizer_for(const TokenizerFiles& files, const LoadedModel& lm) {
  if (lm.dir && !files.any_given) return model_dir_tokenizer(*lm.dir, "--model " + lm.dir->dir);
  if (!files.tokenizer_json.empty() || !files.tokenizer_model.empty() || !tokenizer_ranks_path(files).empty() ||
      lm.vocab_json.empty() || lm.merges_txt.empty())
    return load_tokenizer(files);
  TokenizerFiles f = files;
  if (!f.encoder_json_given) f.encoder_json = lm.vocab_json;
  if (!f.vocab_bpe_given) f.vocab_bpe = lm.merges_txt;
  return load_tokenizer(f);
}

// load_named_tokenizer: load_tokenizer_for, an error that quotes one of the tokenizer files given getting
// that file's option in front ("--vocab-bpe: merges.txt:3: expected a merge ..."), one from the files of
// --model's directory "--model".
Tokenizer load_named_tokenizer(const TokenizerFiles& files, const LoadedModel& lm) {
  try {
    return load_tokenizer_for(files, lm);
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("--", 0) == 0) throw;  // names its option already
    for (const auto& [opt, path] : tokenizer_inputs(files))
      if (what.find(path) != std::string::npos) throw_prefixed(e, opt);
    if (lm.dir) throw_prefixed(e, "--model");
    throw;
  }
}

std::vector<std::string> list_of(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? vm[name].as<std::vector<std::string>>() : std::vector<std::string>{};
}

int run(const po::variables_map& vm, TokenizerFiles& files) {
  set_log_stream(stderr);  // stdout is the table: the corpus loading's tokenize and cache lines go with the progress
  if (vm.count("ckpt") + vm.count("model") != 1) throw UsageError("give exactly one of --ckpt FILE, --model DIR");
  const std::vector<std::string> mc_files = list_of(vm, "mc"), loss_sets = list_of(vm, "loss");
  if (mc_files.empty() && loss_sets.empty()) throw UsageError("nothing to score: give --mc FILE or --loss FILES");
  for (const auto& v : {mc_files, loss_sets})
    for (const std::string& s : v)
      if (s.empty()) throw UsageError("--mc and --loss must not be given an empty value");
  const int eval_batch = vm["eval-batch"].as<int>(), max_seqs = vm["max-seqs"].as<int>();
  int seq = vm["seq"].as<int>();
  if (eval_batch < 1 || eval_batch > 65536) throw UsageError("--eval-batch must be in [1, 65536]");
  if (max_seqs < 0) throw UsageError("--max-seqs must be >= 0");
  if (seq < 0) throw UsageError("--seq must be >= 0");
  read_tokenizer_options(vm, files);
  reject_empty_values(vm, {"ckpt", "model", "json", "cache-dir"});
  const std::string json = vm.count("json") ? vm["json"].as<std::string>() : std::string();
  const std::string cache_dir = vm["cache-dir"].as<std::string>();
  const bool no_cache = vm["no-cache"].as<bool>();
  check_no_cache(no_cache, cache_dir);
  std::vector<std::vector<std::string>> loss_files;
  for (const std::string& s : loss_sets) loss_files.push_back(list_data_files(s, "--loss"));
  std::vector<std::string> all_loss_files;  // every set's: a file in two sets is refused, as in one (list_data_files)
  for (const auto& files : loss_files) all_loss_files.insert(all_loss_files.end(), files.begin(), files.end());
  check_distinct_files(all_loss_files, "--loss");
  CorpusOptions corpus;
  corpus.format = parse_data_format(vm["data-format"].as<std::string>());
  corpus.jsonl_field = vm["jsonl-field"].as<std::string>();
  if (corpus.jsonl_field.empty()) throw UsageError("--jsonl-field must not be empty");
  if (!vm["jsonl-field"].defaulted())  // read by some --loss file, as the trainer's by some --data file
    check_jsonl_field_read(corpus.jsonl_field, corpus.format, all_loss_files, "--loss");
  // the other options only --loss sets read: given with none, refused as an unread --jsonl-field is
  // (a switch has no value to quote: value "")
  auto check_read_by_loss = [&](const char* option, const std::string& value, const char* what) {
    if (loss_sets.empty() && !vm[option].defaulted())
      throw UsageError(std::string("--") + option + (value.empty() ? "" : " ") + value + " is not read: no --loss file (" +
                       what + ")");
  };
  check_read_by_loss("data-format", data_format_name(corpus.format), "the --loss files' format");
  check_read_by_loss("seq", std::to_string(seq), "tokens per --loss window");
  check_read_by_loss("max-seqs", std::to_string(max_seqs), "windows per --loss set");
  // --mc reads no cache (its items are tokenized in memory, and this tool keeps no tokenizer tables)
  check_read_by_loss("cache-dir", cache_dir, "the --loss files' token caches");
  check_read_by_loss("no-cache", "", "the --loss files' token caches");
  if (!json.empty()) {  // never over an input or a cache, and writable, before the (possibly long) scoring
    if (is_token_cache_name(json))
      throw UsageError("--json " + json + " ends in " + kTokenCacheExt + ", the name of token caches: choose another name");
    check_output_outside_cache_dirs(json, "--json", cache_dir);
    std::vector<std::string> inputs = mc_files;
    for (const auto& files : loss_files)
      for (const std::string& f : files) {
        inputs.push_back(f);
        if (!no_cache && cache_dir == kCacheNextToData) inputs.push_back(f + kTokenCacheExt);
      }
    for (const char* o : {"ckpt", "tokenizer-json", "tokenizer-model", "tokenizer-ranks", "encoder-json", "vocab-bpe"})
      if (vm.count(o)) inputs.push_back(vm[o].as<std::string>());
    for (const std::string& in : inputs)
      if (same_file(json, in)) throw UsageError("--json " + json + " is an input of this run (" + in + "); not overwriting it");
    check_writable(json, "--json");
  }
  corpus.option = "--loss";
  // the trainer's caches, found and written as it does (docs/usage.md, "Data and token caches")
  corpus.no_cache = no_cache;
  corpus.cache_dir = token_cache_dir(cache_dir);
  if (cache_dir.empty() && corpus.cache_dir.empty() && !no_cache && !loss_sets.empty()) {  // never the data directory unasked
    std::fprintf(stderr, "cache  | neither XDG_CACHE_HOME nor HOME is set: no token cache (--cache-dir DIR names one)\n");
    corpus.no_cache = true;
  }
  // the directory whatever chose it (--cache-dir is refused above without --loss)
  if (!no_cache && !corpus.cache_dir.empty() && !loss_sets.empty())
    check_cache_dir_owner(corpus.cache_dir, token_cache_dir_origin(cache_dir));
  // the files first: a bad item is refused in seconds, before the model is read
  std::vector<std::vector<McItem>> items;
  for (const std::string& f : mc_files) items.push_back(named("--mc", [&] { return read_mc_file(f); }));

  LoadedModel lm = load_model(vm);
  const auto tok = std::make_shared<const Tokenizer>(load_named_tokenizer(files, lm));
  if (lm.tokenizer_fingerprint != 0 && lm.tokenizer_fingerprint != tok->fingerprint())
    throw UsageError("the tokenizer given (fingerprint " + hex64(tok->fingerprint()) +
                     ") is not the one the model was trained with (" + hex64(lm.tokenizer_fingerprint) + ", " + lm.source + ")");
  if (lm.config.V != tok->vocab_size())
    throw UsageError("the model's vocabulary (" + std::to_string(lm.config.V) + ") differs from the tokenizer's (" +
                     std::to_string(tok->vocab_size()) + ")");
  if (seq == 0) seq = lm.config.maxT;
  if (seq > lm.config.maxT)
    throw UsageError("--seq " + std::to_string(seq) + " is longer than the model's context " + std::to_string(lm.config.maxT));
  std::vector<McTokens> mcs;
  for (size_t i = 0; i < mc_files.size(); ++i)
    mcs.push_back(named("--mc", [&] { return tokenize_mc(std::move(items[i]), *tok, lm.config, mc_files[i]); }));
  SoloGroup one;  // load_corpus is collective: a world of this one process, whose errors are this tool's
  std::vector<TokenStream> streams;
  for (size_t i = 0; i < loss_files.size(); ++i)
    streams.push_back(named("--loss", [&] { return load_corpus(one, 0, 1, loss_files[i], tok, corpus); }));

  BackendOptions bo;
  bo.device = parse_device(vm["device"].as<std::string>());
  bo.dtype = parse_dtype(vm["dtype"].as<std::string>());
  std::unique_ptr<Backend> be = make_backend(bo);
  GPT model(lm.config, *be);
  XT_CHECK(lm.params.size() == model.num_params(),
           "the model has " << lm.params.size() << " parameters; its config needs " << model.num_params());
  be->copy_to_device(model.params(), lm.params.data(), lm.params.size() * sizeof(float));
  lm.params = {};

  nlohmann::json out = {{"model", vm.count("ckpt") ? vm["ckpt"].as<std::string>() : vm["model"].as<std::string>()},
                        {"device", be->device_name()}, {"dtype", to_string(be->dtype())}, {"eval_batch", eval_batch}};
  out["mc"] = nlohmann::json::array();
  out["loss"] = nlohmann::json::array();
  for (size_t i = 0; i < mcs.size(); ++i) {
    const McTokens& mc = mcs[i];
    const McResult r = score_mc(model, mc, eval_batch, nullptr, mc_progress_line(mc_files[i], stderr));
    nlohmann::json per_item = nlohmann::json::array();
    for (size_t k = 0; k < mc.items.size(); ++k) {
      nlohmann::json lp = nlohmann::json::array(), nt = nlohmann::json::array(), nb = nlohmann::json::array();
      for (size_t row = mc.first_row[k]; row < mc.first_row[k + 1]; ++row)
        lp.push_back(r.choices[row].logprob), nt.push_back(r.choices[row].tokens), nb.push_back(mc.choice_bytes[row]);
      per_item.push_back({{"line", mc.items[k].line}, {"label", mc.items[k].label}, {"logprob", lp}, {"tokens", nt}, {"bytes", nb}});
    }
    out["mc"].push_back({{"file", mc_files[i]}, {"items", r.items}, {"acc", r.acc}, {"acc_norm", r.acc_norm},
                         {"acc_token_mean", r.acc_token_mean}, {"right_logprob", r.right_logprob}, {"longest_row", mc.T + 1}, {"per_item", per_item}});
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    const size_t n = streams[i].size(), whole = n > 0 ? (n - 1) / seq : 0;
    const size_t windows = max_seqs > 0 ? std::min<size_t>(whole, max_seqs) : whole;
    if (windows == 0)
      XT_FAIL("--loss " << loss_sets[i] << ": " << n << " tokens, less than one window of --seq " << seq << " + 1");
    const double loss = held_out_loss(model, streams[i], seq, static_cast<int>(std::min<size_t>(windows, 1u << 30)), eval_batch, nullptr);
    out["loss"].push_back({{"files", loss_sets[i]}, {"windows", windows}, {"seq", seq}, {"loss", loss}});
  }
  if (!json.empty()) write_file_atomic(json, out.dump() + "\n", "cannot write --json");
  std::printf("%-6s %-40s %10s %8s %8s %14s %8s\n", "kind", "set", "items/seqs", "acc", "acc_norm", "acc_token_mean", "loss");
  for (const auto& m : out["mc"])
    std::printf("%-6s %-40s %10zu %8.4f %8.4f %14.4f %8s\n", "mc", m["file"].get<std::string>().c_str(),
                m["items"].get<size_t>(), m["acc"].get<double>(), m["acc_norm"].get<double>(),
                m["acc_token_mean"].get<double>(), "");
  for (const auto& l : out["loss"])
    std::printf("%-6s %-40s %10zu %8s %8s %14s %8.4f\n", "loss", l["files"].get<std::string>().c_str(),
                l["windows"].get<size_t>(), "", "", "", l["loss"].get<double>());
  std::printf("(%s, %s; --eval-batch %d)\n", be->device_name().c_str(), to_string(be->dtype()), eval_batch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_cli("xtrain_eval", [&] {
    TokenizerFiles files;
    const CliArgs args = parse_cli({"xtrain_eval", kUsage, make_options(files), {}, {}}, argc, argv);
    if (args.help || args.version) {
      std::cout << (args.help ? args.help_text : args.version_text);
      return kExitOk;
    }
    return run(args.vm, files);
  });
}
