// perplexity: the perplexity of a model on a text file, through xtrain's public API only: a model
// directory (load_model_dir) or a checkpoint (load_checkpoint), the Tokenizer, and GPT::forward's loss
// (docs/embedding.md).
//
// Build (examples/CMakeLists.txt, against an installed xtrain):
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build-examples
// Run:
//   build-examples/perplexity (MODEL_DIR | CHECKPOINT) TEXT_FILE
//   e.g. build-examples/perplexity run.ckpt <prefix>/share/xtrain/brown.txt
// The text's N tokens are read in consecutive windows of the model's context maxT, inputs x[i:i+maxT] and
// targets x[i+1:i+maxT+1] (the last window shorter), as training reads them: each of the N - 1 tokens
// after the first is predicted once, from the tokens before it in its window, and the perplexity is
// exp(the mean of those N - 1 cross-entropies). The tokenizer is the model directory's vocab.json +
// merges.txt, else GPT-2's files in the data directory (<xtrain/core/data_dir.h>); it must be the one
// the model was trained with. Exit 0, 1 (runtime error) or 2 (usage error), with one line on stderr.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <xtrain/backend/registry.h>
#include <xtrain/checkpoint/checkpoint.h>
#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/model/model.h>
#include <xtrain/serve/export.h>

namespace {

// data_file: `rel` in the data directory (<xtrain/core/data_dir.h>); a program outside <prefix>/bin finds
// it through $XTRAIN_DATA. UsageError saying where it was looked for when there is none.
std::string data_file(const std::string& rel) {
  const xtrain::DataDir& d = xtrain::default_data_dir();
  if (d.path.empty())
    throw xtrain::UsageError("no data directory for " + rel + " (looked in " + d.looked + "); set XTRAIN_DATA to <prefix>/share/xtrain");
  return d.path + "/" + rel;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw xtrain::Error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int run(int argc, char** argv) {
  if (argc != 3) throw xtrain::UsageError("usage: perplexity (MODEL_DIR | CHECKPOINT) TEXT_FILE");
  const std::string from = argv[1], text_file = argv[2];

  // The model on the host: a directory's config.json + model.safetensors, or a checkpoint's header and weights.
  xtrain::GPTConfig cfg;
  std::vector<float> params;
  std::string encoder_json, vocab_bpe;  // the tokenizer's files: the model directory's, else the data directory's
  uint64_t fingerprint = 0;  // the tokenizer the model was trained with (0: not recorded)
  if (std::filesystem::is_directory(from)) {
    xtrain::ModelDir m = xtrain::load_model_dir(from);
    if (!m.vocab_json.empty() && !m.merges_txt.empty()) encoder_json = m.vocab_json, vocab_bpe = m.merges_txt;
    cfg = m.cfg, params = std::move(m.params), fingerprint = m.tokenizer_fingerprint;
  } else {
    xtrain::CheckpointState st = xtrain::load_checkpoint(from);
    cfg = st.meta.model, params = std::move(st.params), fingerprint = st.meta.tokenizer_fingerprint;
  }
  if (encoder_json.empty()) encoder_json = data_file("gpt2/encoder.json"), vocab_bpe = data_file("gpt2/vocab.bpe");
  const xtrain::Tokenizer tok = xtrain::Tokenizer::from_gpt2_files(encoder_json, vocab_bpe);
  if (fingerprint != 0 && fingerprint != tok.fingerprint())
    throw xtrain::UsageError(from + " was trained with another tokenizer than " + encoder_json);
  if (cfg.V != tok.vocab_size()) throw xtrain::UsageError(from + ": the model's vocabulary is not the tokenizer's");
  const std::vector<int32_t> ids = tok.encode(read_text(text_file));
  if (ids.size() < 2) throw xtrain::UsageError(text_file + ": fewer than two tokens, nothing to predict");

  xtrain::BackendOptions bo;
  bo.dtype = xtrain::DType::automatic;  // bf16 on CUDA, fp32 on the CPU
  std::unique_ptr<xtrain::Backend> be = xtrain::make_backend(bo);
  xtrain::GPT model(cfg, *be);
  be->copy_to_device(model.params(), params.data(), params.size() * sizeof(float));

  // Windows of T = maxT tokens, up to B at a time: consecutive windows are consecutive ids, so the batch
  // (b,t) is ids[start, start + b*t) and its targets the same ids shifted by one.
  const int T = cfg.maxT, B = 8;
  const size_t windows = (ids.size() - 1 + T - 1) / T;
  double nats = 0;
  size_t predicted = 0;
  for (size_t start = 0; start < ids.size() - 1;) {
    const size_t left = ids.size() - 1 - start;  // tokens still to predict
    const int t = int(std::min<size_t>(T, left)), b = t < T ? 1 : int(std::min<size_t>(B, left / T));
    // forward returns the SUM of the b*t cross-entropies (nats); train = false: no gradients, no dropout
    nats += model.forward(&ids[start], &ids[start + 1], b, t, /*train=*/false, /*dloss=*/0.0f, nullptr);
    predicted += size_t(b) * t;
    start += size_t(b) * t;
  }
  const double loss = nats / double(predicted);
  std::printf("%s: %zu tokens predicted in %zu windows of up to %d | loss %.4f nats/token | perplexity %.2f\n",
              text_file.c_str(), predicted, windows, T, loss, std::exp(loss));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const xtrain::UsageError& e) {
    std::fprintf(stderr, "perplexity: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perplexity: %s\n", e.what());
    return 1;
  }
}
