// generate: text from a model directory (what xtrain_export writes) and a prompt, streamed as it is
// sampled, through xtrain's public API only: load_model_dir, Tokenizer, make_backend, GPT, Decoder and
// generate (docs/embedding.md).
//
// Build (examples/CMakeLists.txt, against an installed xtrain):
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build-examples
// Run:
//   build-examples/generate MODEL_DIR ["PROMPT"] [MAX_NEW_TOKENS]
//   e.g. xtrain_export run.ckpt --out run-model && build-examples/generate run-model "The jury" 40
// Samples at temperature 0.8 among the 40 most probable tokens (seed 1337), stops at <|endoftext|>.
// The tokenizer is the directory's own (model_dir_tokenizer: tokenizer.json, tokenizer.model or vocab.json
// + merges.txt, checked against config.json). Exit 0, 1 (runtime error) or 2 (usage error), with one line
// on stderr.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <xtrain/backend/registry.h>
#include <xtrain/core/error.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/model/inference.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/export.h>
#include <xtrain/serve/generate.h>

namespace {

int run(int argc, char** argv) {
  if (argc < 2 || argc > 4) throw xtrain::UsageError("usage: generate MODEL_DIR [\"PROMPT\"] [MAX_NEW_TOKENS]");
  const std::string dir = argv[1], prompt_text = argc > 2 ? argv[2] : "";
  char* end = nullptr;
  const long max_new = argc > 3 ? std::strtol(argv[3], &end, 10) : 64;
  if (argc > 3 && (*end != '\0' || max_new < 1 || max_new > 100000))
    throw xtrain::UsageError("MAX_NEW_TOKENS must be an integer in [1, 100000], got '" + std::string(argv[3]) + "'");

  // The model's config and fp32 weights on the host; then the tokenizer it was trained with, from the
  // directory (its tokenizer.json, tokenizer.model or vocab.json + merges.txt; Error when none matches).
  xtrain::ModelDir m = xtrain::load_model_dir(dir);
  const xtrain::Tokenizer tok = xtrain::model_dir_tokenizer(m, dir);

  // The backend (CUDA when compiled in and a GPU is visible, else the CPU) and the weights on it.
  xtrain::BackendOptions bo;
  bo.dtype = xtrain::DType::automatic;  // bf16 on CUDA, fp32 on the CPU
  std::unique_ptr<xtrain::Backend> be = xtrain::make_backend(bo);
  xtrain::GPT model(m.cfg, *be);
  be->copy_to_device(model.params(), m.params.data(), m.params.size() * sizeof(float));

  std::vector<int32_t> prompt = tok.encode(prompt_text);
  if (prompt.empty()) prompt.push_back(tok.eot_id());  // no prompt: start from <|endoftext|>, as GPT-2 does
  if (int(prompt.size()) > m.cfg.maxT)
    throw xtrain::UsageError("the prompt has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                             std::to_string(m.cfg.maxT));

  xtrain::GenerateOptions opts;
  opts.max_new_tokens = int(max_new);
  opts.sampler.temperature = 0.8f;
  opts.sampler.top_k = 40;
  opts.seed = 1337;
  opts.eos_id = tok.eot_id();
  xtrain::Decoder dec(model, /*B=*/1);  // one sequence, with its key/value cache
  xtrain::Utf8Stream out;               // holds back a character split across two tokens
  std::fputs(prompt_text.c_str(), stdout);
  xtrain::GenerateStats stats;
  xtrain::generate(dec, {prompt}, opts,
                   [&](int, int32_t id) {
                     std::fputs(out.push(tok.decode({id})).c_str(), stdout);
                     std::fflush(stdout);
                   },
                   &stats);
  std::printf("%s\n", out.flush().c_str());
  std::fprintf(stderr, "generate: %d tokens on %s, %.1f tok/s after the prompt\n", stats.new_tokens, be->name().c_str(),
               stats.decode_s > 0 ? stats.decode_tokens / stats.decode_s : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const xtrain::UsageError& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
