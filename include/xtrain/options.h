// Command-line options of xtrain_mpi (Boost.Program_options): every option with its default in --help.
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
  bool help = false;
  std::string help_text;
};

// parse_options: fills RunOptions; throws UsageError (exit 2) for unknown options, bad values and
// inconsistent combinations that do not depend on the world size. With --help, help=true.
RunOptions parse_options(int argc, char** argv);

// check_world: throws UsageError when --batch is not divisible by world x --grad-accum.
void check_world(const RunOptions& o, int world);

}  // namespace xtrain
