// Command-line options of xtrain_mpi and xtrain_threads (Boost.Program_options): every option with
// its default in --help. Both launchers share every option; xtrain_threads adds --ranks.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <xtrain/backend/backend.h>
#include <xtrain/comm/host_collectives.h>
#include <xtrain/data/data_format.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/train/config.h>

namespace xtrain {

struct RunOptions {
  TrainConfig train;
  std::string data;            // text corpus: file, directory or comma-separated list (list_data_files, corpus.h)
  std::string val_data;        // held-out files (--val-data, same syntax as --data; "" = the tail of --data)
  DataFormat data_format = DataFormat::automatic;  // --data-format (data_format.h)
  std::string jsonl_field = "text";                // --jsonl-field
  bool jsonl_field_given = false;                  // given on the command line (check_jsonl_field)
  std::string tokens_cache;    // token cache of a single data file ("" = <file>.tokcache)
  bool no_cache = false;       // do not read or write the token cache
  std::string cache_dir;       // --cache-dir: content-keyed caches' directory, kCacheNextToData, "" = the
                               // per-user default (default_token_cache_dir, token_cache.h)
  TokenizerFiles tokenizer;    // --encoder-json, --vocab-bpe, --tokenizer-json
  // --eval NAME=FILES and --eval-mc NAME=FILE (repeatable), in command-line order: (name, files)
  std::vector<std::pair<std::string, std::string>> evals, eval_mcs;
  std::string init_from;       // model directory to start from (xtrain_export or HF GPT-2; "" = init_params)
  Device device = Device::automatic;  // --device, parsed once here
  DType dtype = DType::automatic;     // --dtype
  Attention attention = Attention::automatic;  // --attention
  WeightCopy weight_copy = WeightCopy::persistent;  // --weight-copy (not a model property: resume may change it)
  double comm_timeout_s = 300;
  int ranks = 0;  // --ranks (xtrain_threads): rank threads; 0 = every visible GPU
  bool help = false, version = false;  // --help, --version (parse_cli, core/cli.h)
  std::string help_text, version_text;
  // canonical: every option as ("--name", value text), defaults included, in --help order; what
  // check_options_agree compares across ranks.
  std::vector<std::pair<std::string, std::string>> canonical;
};

// OutputFile: a file a training run writes, and the option that names it.
struct OutputFile {
  std::string opt, path;
};

// run_outputs: the files a training run writes (rank 0), those given, in this order: --ckpt, --metrics,
// --timeline. The one list of them: check_distinct_paths compares them with the inputs and each other,
// and run_rank checks each is writable and locks it ("<path>.lock" beside it) for the whole run.
std::vector<OutputFile> run_outputs(const RunOptions& o);

enum class Launcher { mpi, threads };  // xtrain_mpi (one process per rank), xtrain_threads

// parse_options: fills RunOptions through parse_cli (core/cli.h: no abbreviations, no positional
// words, an option given twice takes its last value); throws UsageError (exit 2) for unknown options,
// bad values and inconsistent combinations that do not depend on the world size; Error (exit 1) naming
// the file for an --init-from directory whose config.json is missing or refused (read_model_config,
// serve/export.h), as xtrain_generate --model does. With --help (or
// --version), help (or version) is true and nothing else is checked.
// launcher: the usage line, and --ranks for xtrain_threads only.
RunOptions parse_options(int argc, char** argv, Launcher launcher = Launcher::mpi);

// check_options_agree: every rank must have parsed the same options (canonical). One all-reduce
// (min and max of a hash) when they agree. Otherwise the option list is searched for the first
// option that differs (in --help order) and every rank throws AgreedFailure(2) after the lowest rank
// that differs from rank 0 has printed one line: "rank 1 (host): usage error: the options differ
// across ranks: --batch 16 on rank 1 but --batch 8 on rank 0 (ranks differing from rank 0: 1); every
// rank must be given the same options". Collective over all ranks.
void check_options_agree(HostCollectives& group, const RunOptions& o);

// check_distinct_paths: no output is the same file (same_file, io.h: device and inode, or the same
// absolute path for files not yet created) as an input or another output, so no run truncates its
// own corpus or cache. Inputs: every --data file (data_files: list_data_files(o.data)), the tokenizer
// files, --resume and the files of the --init-from directory; outputs: --ckpt, --metrics and
// --timeline; each token cache (--tokens-cache or <file>.tokcache, also with --no-cache) is both.
// val_files (list_data_files(o.val_data), or none) are inputs named --val-data, and none may be a
// --data file ("--val-data <v> is also a --data file (<d>)").
// --resume and --ckpt may be the same file (a requeued job). Each output's lock file ("<path>.lock",
// run_outputs) is neither an input nor another output (checked before any lock is taken: DirLock
// would refuse the file, and a usage error names both). Throws
// UsageError "<opt> and <opt> name the same file (<path>)", or for an output in a token cache directory
// (check_output_outside_cache_dirs, token_cache.h: the run's --cache-dir or the per-user default); then, for an output whose directory is a --data or --val-data directory (a
// later run would read it as a shard), "<opt> <path> is inside the --data directory <dir> ...".
void check_distinct_paths(const RunOptions& o, const std::vector<std::string>& data_files,
                          const std::vector<std::string>& val_files = {});

// check_jsonl_field: a --jsonl-field given on the command line is read by some --data, --val-data or
// --eval file: check_jsonl_field_read (data_format.h, the rule xtrain_eval's --loss and xtrain_tokenize's
// --input follow too). Throws UsageError naming the option otherwise (it would be silently unused).
// data_files, val_files: as for check_distinct_paths.
void check_jsonl_field(const RunOptions& o, const std::vector<std::string>& data_files,
                       const std::vector<std::string>& val_files = {});

// check_world: throws UsageError when --batch is not divisible by world x --grad-accum.
void check_world(const RunOptions& o, int world);

}  // namespace xtrain
