// train_callback: a data-parallel training run driven from an embedding program, with its own per-step
// callback (StepCallback, <xtrain/train/train.h>): it keeps a smoothed loss and the best validation loss,
// and prints them on rank 0 every 5 steps and at the end. Public API only (docs/embedding.md).
//
// Build (examples/CMakeLists.txt, against an installed xtrain):
//   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build-examples
// Run (one rank, or several under mpirun; the global batch of 8 sequences must divide among them):
//   build-examples/train_callback [TEXT_FILE [STEPS [CHECKPOINT]]]
//   e.g. mpirun -np 2 build-examples/train_callback <prefix>/share/xtrain/brown.txt 20 run.ckpt
// TEXT_FILE defaults to brown.txt of the data directory (<xtrain/core/data_dir.h>), STEPS to 20; a small
// GPT-2 (2 layers, width 64, context 64) with GPT-2's tokenizer from the data directory; CHECKPOINT, when
// given, is written at the end (examples/perplexity scores it; xtrain_export turns it into a model
// directory for examples/generate). Exit 0, 1 (runtime error) or 2 (usage error), with one line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <xtrain/backend/registry.h>
#include <xtrain/comm/mpi/mpi_context.h>
#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include <xtrain/data/tokenizer.h>
#include <xtrain/distributed/communicators.h>
#include <xtrain/train/train.h>

namespace {

// data_file: `rel` in the data directory (<xtrain/core/data_dir.h>); a program outside <prefix>/bin finds
// it through $XTRAIN_DATA. UsageError saying where it was looked for when there is none.
std::string data_file(const std::string& rel) {
  const xtrain::DataDir& d = xtrain::default_data_dir();
  if (d.path.empty())
    throw xtrain::UsageError("no data directory for " + rel + " (looked in " + d.looked + "); set XTRAIN_DATA to <prefix>/share/xtrain");
  return d.path + "/" + rel;
}

int run(int argc, char** argv, xtrain::MpiContext& mpi) {
  if (argc > 4) throw xtrain::UsageError("usage: train_callback [TEXT_FILE [STEPS [CHECKPOINT]]]");
  const std::string text_file = argc > 1 ? argv[1] : data_file("brown.txt");
  xtrain::TrainConfig cfg;
  char* end = nullptr;
  cfg.steps = argc > 2 ? int(std::strtol(argv[2], &end, 10)) : 20;
  if (argc > 2 && (*end != '\0' || cfg.steps < 1 || cfg.steps > 1000000))
    throw xtrain::UsageError("STEPS must be an integer in [1, 1000000], got '" + std::string(argv[2]) + "'");
  if (argc > 3) cfg.ckpt = argv[3];
  cfg.model.maxT = cfg.seq = 64;
  cfg.model.C = 64, cfg.model.L = 2, cfg.model.NH = cfg.model.KVH = 4, cfg.model.HS = 16, cfg.model.F = 256;
  cfg.batch = 8, cfg.val_every = 10, cfg.val_seqs = 16, cfg.log_every = 10;
  cfg.optim.warmup_steps = std::max(1, cfg.steps / 10);
  if (cfg.batch % mpi.world_size() != 0)
    throw xtrain::UsageError("the batch of 8 sequences does not divide among " + std::to_string(mpi.world_size()) + " ranks");

  // Every rank reads and tokenizes the whole text here; load_corpus (<xtrain/data/corpus.h>) would share
  // that among a node's ranks and cache the tokens.
  const xtrain::Tokenizer tok = xtrain::Tokenizer::from_gpt2_files(data_file("gpt2/encoder.json"),
                                                                   data_file("gpt2/vocab.bpe"));
  std::ifstream in(text_file, std::ios::binary);
  if (!in) throw xtrain::UsageError("cannot read " + text_file);
  std::ostringstream text;
  text << in.rdbuf();
  cfg.model.V = tok.vocab_size();
  const xtrain::TrainData data = xtrain::make_train_data(tok.encode(text.str()), tok.fingerprint(), cfg);

  xtrain::BackendOptions bo;
  bo.local_rank = mpi.local_rank(), bo.local_size = mpi.local_size();  // a GPU per rank of the node
  bo.dtype = xtrain::DType::automatic;                                  // bf16 on CUDA, fp32 on the CPU
  std::unique_ptr<xtrain::Backend> be = xtrain::make_backend(bo);
  std::unique_ptr<xtrain::Communicator> comm = xtrain::make_communicator(mpi, *be, /*comm_timeout_s=*/60);
  xtrain::GPT model(cfg.model, *be);
  model.init_params(cfg.seed);

  // The callback: every rank gets the same report (all-reduced figures); rank 0 prints.
  double smoothed = NAN, best_val = INFINITY;
  int best_step = 0;
  const xtrain::StepCallback on_step = [&](const xtrain::StepReport& s) {
    smoothed = std::isnan(smoothed) ? s.loss : 0.9 * smoothed + 0.1 * s.loss;  // exponential moving average
    if (s.val_loss && *s.val_loss < best_val) best_val = *s.val_loss, best_step = s.step;
    if (mpi.rank() == 0 && (s.step % 5 == 0 || s.step == s.last_step))
      std::printf("callback | step %d | loss %.4f | smoothed %.4f | lr %.2e\n", s.step, s.loss, smoothed, s.lr);
  };
  const xtrain::TrainResult r = xtrain::train_rank(cfg, data, model, *be, *comm, on_step);
  if (mpi.rank() == 0)
    std::printf("callback | %d steps | best validation loss %.4f at step %d\n", r.last_step - r.first_step + 1, best_val,
                best_step);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<xtrain::MpiContext> mpi;
  try {
    mpi = std::make_unique<xtrain::MpiContext>(&argc, &argv);  // MPI_Init; one rank without a launcher
    return run(argc, argv, *mpi);
  } catch (const xtrain::AgreedFailure& e) {
    return e.exit_code();  // every rank failed alike; the message is printed
  } catch (const std::exception& e) {
    const int code = dynamic_cast<const xtrain::UsageError*>(&e) ? 2 : 1;
    std::fprintf(stderr, "rank %d: train_callback: %s\n", mpi ? mpi->rank() : 0, e.what());
    if (mpi && mpi->world_size() > 1) mpi->abort(code);  // no rank is left waiting in a collective
    return code;
  }
}
