// --resume without repeating the run's options: the model, batch and schedule options not given on the
// command line are taken from the checkpoint's header; --steps beyond its schedule extends the run.
#pragma once

#include <functional>
#include <string>

#include <xtrain/train/config.h>

namespace xtrain {

// ModelOptions: the model options as given (0 = derived later by parse_options).
struct ModelOptions {
  int& kv_heads;
  int& head_dim;
  int& ffn;
  std::string& arch;  // --arch and --tie-embeddings as their words ("llama", "false")
  std::string& tie;
};

// OptimizerOptions: --optimizer, --lr-schedule and --muon-adjust as their words.
struct OptimizerOptions {
  std::string& optimizer;
  std::string& lr_schedule;
  std::string& muon_adjust;
};

// take_from_checkpoint: when t.resume names a readable checkpoint, every option among --arch,
// --tie-embeddings, --norm-eps, --rope-theta, --dim, --heads, --kv-heads, --head-dim, --layers, --ffn, --seq, --dropout, --batch, --grad-accum, --steps, --lr,
// --warmup, --min-lr-frac, --weight-decay, --grad-clip, --seed, --optimizer, --lr-schedule, --decay-frac,
// --beta1, --beta2, --adam-eps and the --muon-* options for which given("name") is false
// takes the checkpoint's value (*seed as decimal text); one that was given keeps its value, and the
// resume comparison (restore_checkpoint) names it when it differs. --steps beyond the checkpoint's
// schedule length extends the run: t.schedule_steps keeps that length (later steps run at the final
// learning rate), unless a wsd schedule is planned again (wsd_replans, optim.h: schedule_steps stays 0). A checkpoint that cannot be read is left to the run's own checks, which name the
// cause. Throws UsageError when the checkpoint is past its schedule (an extended run) and --steps is
// not given. The held-out split (t.resume_n_train) is the checkpoint's when none of --val-fraction,
// --val-every and --val-data is given. Returns false when t.resume is given and its header cannot be
// read (the options are then as given), true otherwise.
bool take_from_checkpoint(const std::function<bool(const char*)>& given, TrainConfig& t, ModelOptions model,
                          std::string* seed, OptimizerOptions optim);

}  // namespace xtrain
