// Metrics, step line, validation and checkpoint glue for train_rank (see src/train_util.h).
#include "train_util.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "xtrain/checkpoint.h"
#include "xtrain/error.h"
#include "xtrain/io.h"

namespace xtrain {

namespace {
// keep_metrics_upto: rewrites the metrics file `path` (if it exists) without the records of steps > step
// and without lines that are not whole JSON (a run that died after its last checkpoint leaves records
// the resumed run writes again, and maybe half a line); every other line is kept as it was. Atomic and
// mode-preserving (write_file_atomic; a symlink is followed).
void keep_metrics_upto(const std::string& path, int step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;  // nothing written yet
  std::ifstream in(path);
  if (!in) XT_FAIL("cannot read metrics file " << path << ": " << std::strerror(errno));
  std::ostringstream kept;
  int dropped = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool later = r.is_object() && r.contains("step") && r["step"].is_number_integer() && r["step"].get<int>() > step;
    if (r.is_discarded() || later) {
      ++dropped;
    } else {
      kept << line << '\n';
    }
  }
  if (in.bad()) XT_FAIL("cannot read metrics file " << path << ": " << std::strerror(errno));
  if (dropped == 0) return;
  write_file_atomic(path, kept.str(), "cannot replace metrics file");
  std::printf("metrics | %s: dropped %d records after step %d or broken lines (written before the run was resumed)\n",
              path.c_str(), dropped, step);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int resume_step) : path_(path) {
  if (path.empty()) return;
  if (resume_step > 0) keep_metrics_upto(path, resume_step);
  f_ = std::fopen(path.c_str(), resume_step > 0 ? "a" : "w");
  if (!f_) XT_FAIL("cannot open metrics file " << path << ": " << std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!f_) return;
  const std::string line = record.dump() + "\n";
  if (std::fputs(line.c_str(), f_) < 0 || std::fflush(f_) != 0)
    XT_FAIL("cannot write metrics file " << path_ << ": " << std::strerror(errno));
}

void print_step(int step, int steps, double loss, float lr, double grad_norm, double ms, double tok_per_s,
                double eta_s) {
  const long eta = std::lround(eta_s);
  std::printf("step %5d/%d | loss %7.4f | lr %.2e | grad norm %.3f | %8.1f ms | %9.0f tok/s | eta %ldm%02lds\n", step,
              steps, loss, lr, grad_norm, ms, tok_per_s, eta / 60, eta % 60);
  std::fflush(stdout);
}

double validation_loss(const TrainConfig& cfg, const TrainData& data, GPT& model, Communicator& comm, int micro_local) {
  const int T = cfg.seq;
  const std::vector<size_t> mine = val_windows(data, cfg, comm.rank(), comm.world_size());
  Batch batch;
  double sum = 0;
  for (size_t c = 0; c < mine.size(); c += micro_local) {
    const int b = static_cast<int>(std::min<size_t>(micro_local, mine.size() - c));
    fill_windows(data, mine, c, b, T, &batch);
    sum += model.forward(batch.tokens.data(), batch.targets.data(), b, T, false, 0.0f, nullptr);
  }
  comm.all_reduce_sum_host(&sum, 1);
  const int seqs = val_seqs_total(data, cfg);
  return seqs > 0 ? sum / (static_cast<double>(seqs) * T) : std::nan("");
}

uint64_t params_hash(GPT& model, Backend& be) {
  std::vector<float> host(model.num_params());
  be.copy_to_host(host.data(), model.params(), host.size() * sizeof(float));
  return xxh3_64(host.data(), host.size() * sizeof(float));
}

static CheckpointMeta make_meta(const TrainConfig& cfg, const TrainData& data, const GPT& model, int step) {
  CheckpointMeta m;
  m.model = model.config();
  m.step = step;
  m.batch = cfg.batch;
  m.grad_accum = cfg.grad_accum;
  m.total_steps = cfg.steps;
  m.dropout = cfg.dropout;
  m.seed = cfg.seed;
  m.tokenizer_fingerprint = data.tokenizer_fingerprint;
  m.data_hash = data.hash;
  m.num_params = model.num_params();
  m.n_train = data.n_train;
  return m;
}

void write_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be, int rank,
                      int step) {
  if (rank != 0) return;  // only rank 0 writes; every rank holds identical state
  CheckpointState st;
  st.meta = make_meta(cfg, data, model, step);
  const size_t n = model.num_params(), bytes = n * sizeof(float);
  st.params.resize(n), st.m.resize(n), st.v.resize(n);
  be.copy_to_host(st.params.data(), model.params(), bytes);
  be.copy_to_host(st.m.data(), opt.m(), bytes);
  be.copy_to_host(st.v.data(), opt.v(), bytes);
  // A finite loss at this step does not make the UPDATED parameters finite: never replace a good
  // checkpoint with a blown-up one.
  for (float p : st.params)
    if (!std::isfinite(p))
      XT_FAIL("parameters are not finite after step " << step << "; not writing " << cfg.ckpt
                                                       << " (the previous checkpoint is kept)");
  save_checkpoint(cfg.ckpt, st);
  std::printf("step %5d/%d | checkpoint written to %s\n", step, cfg.steps, cfg.ckpt.c_str());
}

int restore_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, AdamW& opt, Backend& be,
                       int rank) {
  CheckpointState st = load_checkpoint(cfg.resume);
  const CheckpointMeta want = make_meta(cfg, data, model, 0);
  const CheckpointMeta& got = st.meta;
  auto mismatch = [&](const char* what, auto have, auto need) {
    XT_FAIL("checkpoint " << cfg.resume << " does not match this run: " << what << " is " << have << " in the checkpoint, "
                          << need << " now");
  };
  if (got.model.describe() != want.model.describe()) mismatch("model", got.model.describe(), want.model.describe());
  if (got.batch != want.batch) mismatch("--batch", got.batch, want.batch);
  if (got.grad_accum != want.grad_accum) mismatch("--grad-accum", got.grad_accum, want.grad_accum);
  if (got.seed != want.seed) mismatch("--seed", got.seed, want.seed);
  if (got.dropout != want.dropout) mismatch("--dropout", got.dropout, want.dropout);
  if (got.total_steps != want.total_steps) mismatch("--steps (LR schedule length)", got.total_steps, want.total_steps);
  if (got.tokenizer_fingerprint != want.tokenizer_fingerprint) mismatch("tokenizer fingerprint", got.tokenizer_fingerprint, want.tokenizer_fingerprint);
  if (got.data_hash != want.data_hash) mismatch("training data hash", got.data_hash, want.data_hash);
  if (got.n_train != want.n_train) mismatch("training tokens (--val-fraction / --val-every split)", got.n_train, want.n_train);
  if (got.step > cfg.steps) XT_FAIL("checkpoint " << cfg.resume << " is at step " << got.step << ", past --steps " << cfg.steps);
  // got.step == cfg.steps: nothing left to train (a requeued job after the last step); not an error.
  const size_t bytes = model.num_params() * sizeof(float);
  be.copy_to_device(model.params(), st.params.data(), bytes);
  be.copy_to_device(opt.m(), st.m.data(), bytes);
  be.copy_to_device(opt.v(), st.v.data(), bytes);
  if (rank == 0)
    std::printf("resumed from %s at step %d%s\n", cfg.resume.c_str(), got.step,
                got.step == cfg.steps ? " (already at --steps: nothing to train)" : "");
  return got.step;
}

}  // namespace xtrain
