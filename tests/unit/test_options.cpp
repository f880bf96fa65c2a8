// xtrain_mpi's usage errors (exit 2) in-process: the option parsing and checks the program runs
// before its first training collective, each case with the message pattern that
// tests/integration/test_bad_input.sh used to check under mpirun. The cases that must show every rank
// ending (a world of 4, a bad option on one rank, options differing across ranks) stay there.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "app/options.h"
#include <xtrain/backend/registry.h>
#include "core/cli.h"
#include <xtrain/core/error.h>
#include <xtrain/data/corpus.h>
#include "data/token_cache.h"
#include "test_tokenizer_util.h"

using namespace xtrain;

namespace {

// The shell test's run: a corpus file, tokenizer paths (not read by these checks) and its TINY model.
struct Run {
  test::ScratchDir dir;
  std::string corpus = dir.file("corpus.txt");
  Run() { std::ofstream(corpus) << "The quick brown fox jumps over the lazy dog.\n"; }
  std::vector<std::string> ok() const {
    return {"--data", corpus, "--encoder-json", dir.file("encoder.json"), "--vocab-bpe", dir.file("vocab.bpe"),
            "--dim", "32", "--heads", "4", "--kv-heads", "2", "--layers", "2", "--seq", "32", "--batch", "8",
            "--lr", "3e-3", "--warmup", "5", "--val-every", "0", "--log-every", "5"};
  }
};

// startup: what xtrain_mpi does with a command line on a world of `world` ranks up to its first file
// read, in its order: parse_options (main.cpp), check_world (run_training), list_data_files and
// (and of --val-data), check_distinct_paths and check_jsonl_field, then make_backend and --fp8's check (run_rank,
// app.cpp). Returns the exit code and message the
// program prints for the first exception (cli_failure, core/cli.h), or {0, ""} when every check passes.
CliFailure startup(std::vector<std::string> args, int world) {
  args.insert(args.begin(), "xtrain_mpi");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    const RunOptions o = parse_options(static_cast<int>(argv.size()), argv.data());
    check_world(o, world);
    const std::vector<std::string> data_files = list_data_files(o.data);
    const std::vector<std::string> val_files = o.val_data.empty() ? std::vector<std::string>{} : list_data_files(o.val_data);
    check_distinct_paths(o, data_files, val_files);
    check_jsonl_field(o, data_files, val_files);
    BackendOptions bo;
    bo.device = o.device, bo.dtype = o.dtype, bo.attention = o.attention, bo.weight_copy = o.weight_copy;
    const std::unique_ptr<Backend> be = make_backend(bo);
    if (o.train.fp8.any())  // run_rank's check of --fp8 right after the backend's set-up
      if (const std::string why = be->fp8_unavailable(); !why.empty()) throw UsageError(why);
  } catch (const std::exception& e) {
    return cli_failure(e);
  }
  return {0, ""};
}

// usage_error: `extra` appended to the run's options ends it with exit 2 and a message matching
// `pattern`: the shell test's grep -E pattern, read as an ECMAScript regular expression (the same
// meaning for these; libstdc++'s extended grammar refuses the escape in "2\^64").
void usage_error(const Run& run, std::vector<std::string> extra, const std::string& pattern, int world = 1) {
  std::vector<std::string> args = run.ok();
  args.insert(args.end(), extra.begin(), extra.end());
  const CliFailure f = startup(args, world);
  INFO("message: " << f.message);
  CHECK(f.exit_code == kExitUsage);
  CHECK(std::regex_search(f.message, std::regex(pattern)));
}

}  // namespace

TEST_CASE("the shell test's run passes every check") {
  const Run run;
  const CliFailure f = startup(run.ok(), 2);
  INFO(f.message);
  CHECK(f.exit_code == 0);
}

TEST_CASE("option parsing: unknown, abbreviated, stray and malformed words") {
  const Run run;
  usage_error(run, {"--bogus", "1"}, "usage error: .*--bogus", 2);
  usage_error(run, {"--steps", "many"}, "usage error: .*steps", 2);
  usage_error(run, {"extra_word"}, "usage error: unexpected argument 'extra_word'", 2);
  usage_error(run, {"--ste", "5"}, "usage error: .*--ste", 2);
  usage_error(run, {"--seed", "-1"}, R"(--seed must be an integer in \[0, 2\^64-1\], got '-1')", 2);
  usage_error(run, {"--seed", "18446744073709551616"}, "--seed must be an integer", 2);
}

TEST_CASE("option values and combinations") {
  const Run run;
  usage_error(run, {"--kv-heads", "3"}, R"(--kv-heads \(3\) must divide --heads)", 2);
  usage_error(run, {"--device", "nope"}, "usage error: --device");
  usage_error(run, {"--attention", "fast"}, "usage error: --attention must be auto, flash, gemm or cudnn");
  usage_error(run, {"--cuda-graph", "yes"}, "usage error: --cuda-graph must be auto, on or off");
  usage_error(run, {"--grad-accum", "1073741824"}, "usage error", 4);
  usage_error(run, {"--head-dim", "1073741824"}, "--head-dim = 1073741824 is too large", 2);
  usage_error(run, {"--lr", "inf"}, "--lr must be positive and finite", 2);
  usage_error(run, {"--comm-timeout", "1e10"}, "--comm-timeout must be between 1 and 1e6", 2);
  usage_error(run, {"--bucket-mb", "-0.5"}, "--bucket-mb must be between 0 and 1e6", 2);
  usage_error(run, {"--logits-chunk-rows", "-1"}, R"(usage error: --logits-chunk-rows must be >= 0 \(0 = automatic\), got -1)", 2);
  usage_error(run, {"--logits-chunk-rows", "two"}, "usage error: .*logits-chunk-rows");
  usage_error(run, {"--recompute", "3"}, "usage error: --recompute must be auto, 0, 1 or 2, got 3", 2);
  usage_error(run, {"--recompute", "on"}, "usage error: --recompute must be auto, 0, 1 or 2, got on", 2);
  CHECK(startup([&] { auto a = run.ok(); a.insert(a.end(), {"--logits-chunk-rows", "3"}); return a; }(), 1).exit_code == 0);
  usage_error(run, {"--tokens-cache", run.dir.file("x.tokcache"), "--no-cache"},
              "usage error: --tokens-cache and --no-cache exclude each other", 2);
  // options the run would not read: a cache directory with no cache, held-out sequences with no validation
  usage_error(run, {"--cache-dir", run.dir.file("caches"), "--no-cache"},
              R"(usage error: --cache-dir and --no-cache exclude each other \(--no-cache reads and writes no token cache\))");
  usage_error(run, {"--cache-dir", "next-to-data", "--no-cache"}, "usage error: --cache-dir and --no-cache exclude each other");
  usage_error(run, {"--val-seqs", "8"}, R"(usage error: --val-seqs needs --val-every > 0 \(with --val-every 0 nothing is evaluated\))");
  CHECK(startup([&] { auto a = run.ok(); a.insert(a.end(), {"--val-every", "5", "--val-seqs", "8"}); return a; }(), 1).exit_code == 0);
  // --jsonl-field is read only from JSON lines: a text corpus under auto or --data-format text does not read it
  usage_error(run, {"--jsonl-field", "body"},
              R"(usage error: --jsonl-field body is not read: no --data, --val-data or --eval file is JSON lines \(--data-format auto)");
  usage_error(run, {"--jsonl-field", "body", "--data-format", "text"}, R"(--jsonl-field body is not read: .*\(--data-format text)");
  const std::string jsonl = run.dir.file("docs.jsonl"), eval_jsonl = run.dir.file("eval.jsonl");
  std::ofstream(jsonl) << "{\"body\": \"The quick brown fox.\"}\n";
  std::ofstream(eval_jsonl) << "{\"body\": \"The lazy dog.\"}\n";
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--jsonl-field", "body", "--data-format", "jsonl"},  // the corpus read as JSON lines
        {"--jsonl-field", "body", "--data", jsonl},                                    // auto: by its name
        {"--jsonl-field", "body", "--val-every", "5", "--eval", "docs=" + eval_jsonl}}) {  // an --eval set reads it
    std::vector<std::string> args = run.ok();
    args.insert(args.end(), extra.begin(), extra.end());
    const CliFailure f = startup(args, 1);
    INFO(f.message);
    CHECK(f.exit_code == 0);
  }
  usage_error(run, {"--stop-after", "3"}, "usage error: --stop-after needs --ckpt", 2);
  usage_error(run, {"--tokenizer-json", run.dir.file("t.json"), "--encoder-json", run.dir.file("missing-encoder.json")},
              "either --tokenizer-json or --encoder-json", 2);
  // make_backend: the CPU backend has one attention route
  usage_error(run, {"--device", "cpu", "--attention", "cudnn"}, "usage error: --attention cudnn needs the CUDA backend", 2);
  // --weight-copy: two words; per-use only where bf16 matmuls keep a copy (the CPU backend keeps none)
  usage_error(run, {"--weight-copy", "off"}, "usage error: --weight-copy must be persistent or per-use \\(got 'off'\\)");
  usage_error(run, {"--weight-copy", "per-use"}, "usage error: --weight-copy per-use needs --dtype bf16 on the CUDA backend", 2);
  usage_error(run, {"--device", "cpu", "--weight-copy", "per-use"}, "--weight-copy per-use needs --dtype bf16", 2);
  // --fp8: none, mlp, head or both, each once; the CPU backend has no FP8 products (refused at the backend's set-up)
  for (const char* bad : {"mlp,", "MLP", "mlp,mlp", "attn", ""})
    usage_error(run, {"--fp8", bad}, "usage error: --fp8 must be none, mlp, head or mlp,head");
  usage_error(run, {"--device", "cpu", "--fp8", "mlp,head"}, "usage error: --fp8 needs the CUDA backend with --dtype bf16", 2);
  CHECK(fp8_linears_name(parse_fp8_linears("head,mlp")) == "mlp,head");
  CHECK(!parse_fp8_linears("none").any());
}

TEST_CASE("an option the run would not read is refused naming both options (kOptionScopes), and --help says so") {
  const Run run;
  const std::vector<std::pair<std::vector<std::string>, std::string>> unread = {
      {{"--decay-frac", "0.3"}, R"(--decay-frac needs --lr-schedule wsd \(this run's --lr-schedule is cosine, which does not read it\))"},
      {{"--lr-schedule", "linear", "--decay-frac", "0.2"}, "--decay-frac needs --lr-schedule wsd \\(this run's --lr-schedule is linear"},
      {{"--muon-lr", "0.01"}, R"(--muon-lr needs --optimizer muon \(this run's --optimizer is adamw, which does not read it\))"},
      {{"--muon-momentum", "0.9"}, "--muon-momentum needs --optimizer muon"},
      {{"--muon-weight-decay", "0.1"}, "--muon-weight-decay needs --optimizer muon"},
      {{"--muon-ns-steps", "3"}, "--muon-ns-steps needs --optimizer muon"},
      {{"--muon-adjust", "match_rms_adamw"}, "--muon-adjust needs --optimizer muon"},
      {{"--norm-eps", "1e-6"}, "--norm-eps needs --arch llama \\(this run's --arch is gpt2"},
      {{"--tie-embeddings", "false"}, "--tie-embeddings needs --arch llama"},
  };
  for (const auto& [extra, pattern] : unread) usage_error(run, extra, "usage error: " + pattern);
  // a --resume that cannot be read: its options are unknown, so the scope check waits for the run's input
  // checks, which name the checkpoint's problem (exit 1, test_small_fixes.sh)
  for (const std::string& ckpt : {run.dir.file("missing.ckpt"), run.corpus}) {  // absent; not a checkpoint
    std::vector<std::string> args = run.ok();
    args.insert(args.end(), {"--resume", ckpt, "--muon-lr", "0.02"});
    const CliFailure f = startup(args, 1);
    INFO(f.message);
    CHECK(f.exit_code == 0);
  }
  // with the value that reads them: accepted
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--lr-schedule", "wsd", "--decay-frac", "0.3"},
        {"--optimizer", "muon", "--muon-lr", "0.01", "--muon-momentum", "0.9", "--muon-weight-decay", "0.1", "--muon-ns-steps", "3",
         "--muon-adjust", "match_rms_adamw"},
        {"--arch", "llama", "--norm-eps", "1e-6", "--tie-embeddings", "false"}}) {
    std::vector<std::string> args = run.ok();
    args.insert(args.end(), extra.begin(), extra.end());
    const CliFailure f = startup(args, 1);
    INFO(f.message);
    CHECK(f.exit_code == 0);
  }
  // --help names each scope after the option's text
  std::vector<std::string> args = {"xtrain_mpi", "--help"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::string help;  // the text as one line: Boost wraps it at its own width
  for (char c : parse_options(2, argv.data()).help_text)
    if (!(std::isspace(static_cast<unsigned char>(c)) && !help.empty() && help.back() == ' ')) help += std::isspace(static_cast<unsigned char>(c)) ? ' ' : c;
  for (const char* scoped : {"(only with --lr-schedule wsd)", "(only with --optimizer muon)", "(only with --arch llama)"})
    CHECK(help.find(scoped) != std::string::npos);
}

TEST_CASE("wsd's decay has at least one step; Muon's options are bounded as their AdamW counterparts") {
  const Run run;
  // round(0.001 x 100) = 0 and round(0.2 x 2) = 0: a run that would end at its peak learning rate
  usage_error(run, {"--lr-schedule", "wsd", "--decay-frac", "0.001", "--steps", "100"},
              R"(--decay-frac 0.001 of a 100-step schedule is round\(0.1\) = 0 decay steps: the run would end at its peak learning rate; give --decay-frac >= 0.01 \(one step\))");
  usage_error(run, {"--lr-schedule", "wsd", "--steps", "2"}, R"(--decay-frac 0.2 of a 2-step schedule is round\(0.4\) = 0 decay steps)");
  usage_error(run, {"--lr-schedule", "wsd", "--decay-frac", "0"}, R"(--decay-frac must be in \(0, 1\])");
  CHECK(startup([&] { auto a = run.ok(); a.insert(a.end(), {"--lr-schedule", "wsd", "--decay-frac", "0.01", "--steps", "100"}); return a; }(), 1)
            .exit_code == 0);  // round(1) = 1 step
  // round(0.2 x 10) = 2 decay steps, but the decay starts after the warmup (wsd_decay_start): 0 steps left
  usage_error(run, {"--lr-schedule", "wsd", "--steps", "10", "--warmup", "10"},
              R"(--warmup 10 fills the 10-step wsd schedule \(its decay starts after the warmup\): 0 decay steps, the run would end at its peak learning rate; give --warmup < 10)");
  usage_error(run, {"--lr-schedule", "wsd", "--steps", "10", "--warmup", "30"}, "--warmup 30 fills the 10-step wsd schedule");
  CHECK(startup([&] { auto a = run.ok(); a.insert(a.end(), {"--lr-schedule", "wsd", "--steps", "10", "--warmup", "9"}); return a; }(), 1)
            .exit_code == 0);  // the decay takes the last step
  // the same bound for --lr and --muon-lr, --beta1 and --muon-momentum, --weight-decay and --muon-weight-decay
  const std::vector<std::string> muon = {"--optimizer", "muon"};
  auto with_muon = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), muon.begin(), muon.end());
    return extra;
  };
  usage_error(run, {"--lr", "inf"}, "--lr must be positive and finite");
  usage_error(run, with_muon({"--muon-lr", "inf"}), "--muon-lr must be positive and finite");
  usage_error(run, with_muon({"--muon-lr", "0"}), "--muon-lr must be positive and finite");
  usage_error(run, {"--beta1", "1"}, R"(--beta1 must be in \[0, 1\))");
  usage_error(run, with_muon({"--muon-momentum", "1"}), R"(--muon-momentum must be in \[0, 1\))");
  usage_error(run, with_muon({"--muon-momentum", "-0.1"}), R"(--muon-momentum must be in \[0, 1\))");
  usage_error(run, {"--weight-decay", "-1"}, "--weight-decay must be >= 0 and finite");
  usage_error(run, with_muon({"--muon-weight-decay", "-1"}), "--muon-weight-decay must be >= 0 and finite");
  usage_error(run, {"--weight-decay", "1e6"},
              R"(--weight-decay 1e\+06 x --lr 0.003 = 3000 must be below 1 \(decoupled weight decay multiplies the weights by 1 - lr x weight decay each step\))");
  usage_error(run, with_muon({"--muon-weight-decay", "1e6"}), R"(--muon-weight-decay 1e\+06 x --muon-lr 0.02 = 20000 must be below 1)");
  usage_error(run, with_muon({"--muon-weight-decay", "60", "--muon-lr", "0.02"}), "--muon-weight-decay 60 x --muon-lr 0.02 = 1.2 must be below 1");
  // lr x wd = 1 exactly (0.5 x 2, both exact in float): the factor 1 - lr x wd is 0, every step wipes the weights
  usage_error(run, {"--weight-decay", "2", "--lr", "0.5"}, "--weight-decay 2 x --lr 0.5 = 1 must be below 1");
  usage_error(run, with_muon({"--muon-weight-decay", "2", "--muon-lr", "0.5"}), "--muon-weight-decay 2 x --muon-lr 0.5 = 1 must be below 1");
  CHECK(startup(with_muon([&] { auto a = run.ok(); a.insert(a.end(), {"--muon-weight-decay", "1.5", "--muon-lr", "0.5"}); return a; }()), 1)
            .exit_code == 0);  // 0.75: below the bound
}

// check_options_agree compares the canonical option texts ("texts are equal exactly when values are"): two
// spellings of one --fp8 value must give one text, or ranks given "mlp,head" and "head,mlp" (one value:
// parse_fp8_linears) would be refused as disagreeing.
TEST_CASE("--fp8 head,mlp and --fp8 mlp,head are one configuration for check_options_agree") {
  const Run run;
  auto canonical_fp8 = [&](const char* value) {
    std::vector<std::string> args = run.ok();
    args.insert(args.begin(), "xtrain_mpi");
    args.insert(args.end(), {"--fp8", value});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    const RunOptions o = parse_options(static_cast<int>(argv.size()), argv.data());
    std::string text;
    for (const auto& e : o.canonical)
      if (e.first == "--fp8") text = e.second;
    return text;
  };
  CHECK(fp8_linears_name(parse_fp8_linears("head,mlp")) == fp8_linears_name(parse_fp8_linears("mlp,head")));
  CHECK(canonical_fp8("head,mlp") == canonical_fp8("mlp,head"));
}

TEST_CASE("--weight-copy parses; persistent, the default, is what the CPU backend runs with") {
  const Run run;
  std::vector<std::string> args = run.ok();
  args.insert(args.begin(), "xtrain_mpi");
  args.insert(args.end(), {"--weight-copy", "per-use"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const RunOptions o = parse_options(static_cast<int>(argv.size()), argv.data());
  CHECK(o.weight_copy == WeightCopy::per_use);
  CHECK(parse_weight_copy("persistent") == WeightCopy::persistent);
  CHECK(std::string(to_string(WeightCopy::per_use)) == "per-use");
  // compared across ranks with the other options (check_options_agree)
  bool listed = false;
  for (const auto& e : o.canonical) listed = listed || (e.first == "--weight-copy" && e.second == "per-use");
  CHECK(listed);
  CHECK(startup(run.ok(), 2).exit_code == 0);  // the default on the CPU backend
  std::vector<std::string> explicit_default = run.ok();
  explicit_default.insert(explicit_default.end(), {"--weight-copy", "persistent"});
  CHECK(startup(explicit_default, 2).exit_code == 0);
}

TEST_CASE("an option given an empty value is refused, not read as 'not given'") {
  // `--resume ""` (a job script's unset variable) would otherwise start afresh over the checkpoint
  // it should continue; refused before anything is written
  const Run run;
  usage_error(run, {"--ckpt", run.dir.file("e.ckpt"), "--resume", ""}, "usage error: --resume was given an empty value", 2);
  CHECK_FALSE(std::filesystem::exists(run.dir.file("e.ckpt")));
  usage_error(run, {"--timeline", ""}, "usage error: --timeline was given an empty value");
  usage_error(run, {"--vocab-bpe", ""}, "usage error: --vocab-bpe was given an empty value");
  usage_error(run, {"--data", ""}, "usage error: --data was given an empty value");
  // the options whose default is "none" (an empty string inside): given empty, refused all the same
  usage_error(run, {"--val-data", ""}, "usage error: --val-data was given an empty value");
  usage_error(run, {"--tokenizer", "cl100k_base", "--tokenizer-ranks", ""}, "usage error: --tokenizer-ranks was given an empty value");
}

TEST_CASE("batch not divisible by world size x grad-accum") {
  const Run run;
  usage_error(run, {"--batch", "6", "--grad-accum", "2"}, "divisible by world size", 2);
  usage_error(run, {"--batch", "6"}, "divisible by world size", 4);
}

TEST_CASE("--data lists and files that are outputs too") {
  const Run run;
  usage_error(run, {"--data", run.corpus + ","}, "usage error: --data .*: an empty path in the list");
  usage_error(run, {"--data", run.corpus + "," + run.corpus}, "usage error: --data lists one file twice");
  usage_error(run, {"--metrics", run.corpus}, "--data and --metrics name the same file", 2);
  usage_error(run, {"--tokens-cache", run.corpus}, "name the same file", 2);
  const std::string link = run.dir.file("corpus-link.txt");
  REQUIRE(::link(run.corpus.c_str(), link.c_str()) == 0);
  usage_error(run, {"--metrics", link}, "--data and --metrics name the same file", 2);
  // a token cache under another name is not a text
  const std::string ids = run.dir.file("ids.bin");
  write_token_cache(ids, {1, 2, 3}, 50257, 1, stat_source(run.corpus));
  usage_error(run, {"--data", ids}, "usage error: --data .*ids.bin: a token cache");
}

TEST_CASE("no output in a token cache directory: the run's --cache-dir or the per-user default, where tokenizer tables are too") {
  const Run run;
  const std::string cache = run.dir.file("cache"), xdg = run.dir.file("xdg");
  const char* before = std::getenv("XDG_CACHE_HOME");
  const std::string saved = before ? before : "";
  REQUIRE(::setenv("XDG_CACHE_HOME", xdg.c_str(), 1) == 0);
  // a tokenizer-table entry's name, not yet written: a later start would read the metrics as tables or replace them
  usage_error(run, {"--cache-dir", cache, "--metrics", cache + "/0123456789abcdef.toktables"},
              "usage error: --metrics .*/cache/0123456789abcdef.toktables is inside the token cache directory .*/cache \\(--cache-dir");
  std::filesystem::create_directory(cache);
  std::filesystem::create_directory_symlink(cache, run.dir.file("cache-link"));
  usage_error(run, {"--cache-dir", cache, "--ckpt", run.dir.file("cache-link") + "/run.ckpt"},
              "usage error: --ckpt .*cache-link/run.ckpt is inside the token cache directory");
  // an output that is itself a symbolic link into the cache directory: its final target is what would be written,
  // an entry there (existing) or a name there (dangling), through a chain of links
  const std::string entry = cache + "/0123456789abcdef.toktables";
  std::ofstream(entry) << "XTTOKTAB";
  std::filesystem::create_symlink(entry, run.dir.file("clink.ckpt"));
  usage_error(run, {"--cache-dir", cache, "--ckpt", run.dir.file("clink.ckpt")},
              "usage error: --ckpt .*clink.ckpt is inside the token cache directory .*/cache \\(--cache-dir");
  std::filesystem::create_symlink("clink.ckpt", run.dir.file("clink2.jsonl"));
  usage_error(run, {"--cache-dir", cache, "--metrics", run.dir.file("clink2.jsonl")},
              "usage error: --metrics .*clink2.jsonl is inside the token cache directory");
  std::filesystem::create_symlink(cache + "/fedcba9876543210.toktables", run.dir.file("dangling.jsonl"));
  usage_error(run, {"--cache-dir", cache, "--metrics", run.dir.file("dangling.jsonl")},
              "usage error: --metrics .*dangling.jsonl is inside the token cache directory");
  // the per-user default, where every program keeps its tokenizer tables: with no --cache-dir and with another one
  usage_error(run, {"--timeline", xdg + "/xtrain/t.json"},
              "usage error: --timeline .*/xdg/xtrain/t.json is inside the token cache directory .*/xdg/xtrain \\(\\$XDG_CACHE_HOME/xtrain");
  usage_error(run, {"--cache-dir", cache, "--metrics", xdg + "/xtrain/0123456789abcdef.toktables"},
              "--metrics .* is inside the token cache directory .*/xdg/xtrain");
  // beside them, and with next-to-data (no cache directory of the run), only the default is refused
  const CliFailure ok = startup([&] {
    std::vector<std::string> a = run.ok();
    a.insert(a.end(), {"--cache-dir", cache, "--metrics", run.dir.file("m.jsonl"), "--ckpt", xdg + "/run.ckpt"});
    return a;
  }(), 1);
  CHECK_MESSAGE(ok.exit_code == 0, ok.message);
  const CliFailure beside = startup([&] {
    std::vector<std::string> a = run.ok();
    a.insert(a.end(), {"--cache-dir", "next-to-data", "--metrics", cache + "/m.jsonl"});
    return a;
  }(), 1);
  CHECK_MESSAGE(beside.exit_code == 0, beside.message);
  before ? ::setenv("XDG_CACHE_HOME", saved.c_str(), 1) : ::unsetenv("XDG_CACHE_HOME");
}

TEST_CASE("--val-data: held-out files are inputs of their own, never a --data file or an output") {
  const Run run;
  const std::string val = run.dir.file("val.txt");
  std::ofstream(val) << "Held out.\n";
  usage_error(run, {"--val-data", run.corpus}, "usage error: --val-data .*corpus.txt is also a --data file");
  usage_error(run, {"--val-data", val, "--metrics", val}, "--val-data and --metrics name the same file", 2);
  usage_error(run, {"--val-data", val, "--cache-dir", "next-to-data", "--ckpt", val + ".tokcache"}, "--ckpt .*ends in .tokcache");
  usage_error(run, {"--val-data", run.dir.path.string(), "--data", val}, "usage error: --val-data .* is also a --data file");
  usage_error(run, {"--val-data", val, "--tokens-cache", run.dir.file("c.tokcache")},
              "--tokens-cache names the cache of one --data file; with --val-data");
  usage_error(run, {"--data-format", "csv"}, "--data-format csv: expected auto, text, llmc, nanogpt or jsonl");
  usage_error(run, {"--jsonl-field", ""}, "usage error: --jsonl-field");
  const CliFailure f = startup([&] {
    std::vector<std::string> a = run.ok();
    a.insert(a.end(), {"--val-data", val});
    return a;
  }(), 2);
  INFO(f.message);
  CHECK(f.exit_code == 0);
}

TEST_CASE("--eval and --eval-mc: repeatable NAME=FILES, in order; inputs that no output may be") {
  const Run run;
  const std::string ev = run.dir.file("ev.txt"), mc = run.dir.file("hs.jsonl");
  std::ofstream(ev) << "Held out.\n";
  std::ofstream(mc) << "{}\n";
  std::vector<std::string> args = run.ok();
  args.insert(args.end(), {"--val-every", "10", "--eval", "b=" + ev, "--eval-mc", "hs=" + mc, "--eval", "a=" + run.corpus});
  args.insert(args.begin(), "xtrain_mpi");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const RunOptions o = parse_options(static_cast<int>(argv.size()), argv.data());
  REQUIRE(o.evals.size() == 2);
  CHECK(o.evals[0] == std::pair<std::string, std::string>{"b", ev});
  CHECK(o.evals[1] == std::pair<std::string, std::string>{"a", run.corpus});
  REQUIRE(o.eval_mcs.size() == 1);
  CHECK(o.eval_mcs[0].first == "hs");
  bool found = false;  // the ranks compare every value of a repeatable option
  for (const auto& [name, text] : o.canonical) found = found || (name == "--eval" && text == "b=" + ev + "\na=" + run.corpus);
  CHECK(found);
  usage_error(run, {"--val-every", "10", "--eval", "nofiles"}, "usage error: --eval takes NAME=FILES, got 'nofiles'");
  usage_error(run, {"--val-every", "10", "--eval", "a b=" + ev}, "usage error: --eval name 'a b': use letters");
  usage_error(run, {"--val-every", "10", "--eval", "x=" + ev, "--eval", "x=" + ev}, "--eval names the set 'x' twice");
  usage_error(run, {"--val-every", "10", "--eval", "x=" + ev, "--eval-mc", "x=" + mc}, "--eval and --eval-mc both name a set 'x'");
  usage_error(run, {"--eval", "x=" + ev}, "--eval and --eval-mc need --val-every > 0");
  usage_error(run, {"--eval-batch", "0"}, "--eval-batch must be in \\[1, 65536\\]");
  usage_error(run, {"--val-every", "10", "--eval-mc", "hs=" + mc, "--metrics", mc}, "--eval-mc hs and --metrics name the same file");
  usage_error(run, {"--val-every", "10", "--eval", "e=" + ev, "--ckpt", ev}, "--eval e and --ckpt name the same file");
}
