// Command-line options of xtrain_mpi and xtrain_threads (Boost.Program_options): every option with
// its default in --help. Both launchers share every option; xtrain_threads adds --ranks.
#pragma once

#include <string>

#include "xtrain/backend.h"
#include "xtrain/config.h"

namespace xtrain {

struct RunOptions {
  TrainConfig train;
  std::string data;            // text corpus
  std::string tokens_cache;    // token cache path ("" = <data>.tokcache)
  bool no_cache = false;       // do not read or write the token cache
  std::string tokenizer_json;  // HF tokenizer.json (wins over encoder/vocab)
  std::string encoder_json, vocab_bpe;
  std::string init_from;       // model directory to start from (xtrain_export or HF GPT-2; "" = init_params)
  Device device = Device::automatic;  // --device, parsed once here
  DType dtype = DType::automatic;     // --dtype
  double comm_timeout_s = 300;
  int ranks = 0;  // --ranks (xtrain_threads): rank threads; 0 = every visible GPU
  bool help = false;
  std::string help_text;
};

enum class Launcher { mpi, threads };  // xtrain_mpi (one process per rank), xtrain_threads

// parse_options: fills RunOptions; throws UsageError (exit 2) for unknown options, bad values and
// inconsistent combinations that do not depend on the world size. With --help, help=true.
// launcher: the usage line, and --ranks for xtrain_threads only.
RunOptions parse_options(int argc, char** argv, Launcher launcher = Launcher::mpi);

// check_world: throws UsageError when --batch is not divisible by world x --grad-accum.
void check_world(const RunOptions& o, int world);

}  // namespace xtrain
