// The training run's checkpoints (train/checkpointing.h): the header a run writes, and the checks and
// copies of a resume, under the ranks' agreement (comm/agree.h). The file format: src/checkpoint/.
#include "train/checkpointing.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "comm/agree.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/log.h>
#include <xtrain/core/progress.h>

namespace xtrain {

namespace {
// impossible_value: "" when every parameter and first moment is finite and every second moment finite
// and >= 0 (what AdamW keeps), else which value is not. The checksum proves a file's bytes are those
// written, not that the writer's values were sane: the writer checks before writing, a resume on reading.
std::string impossible_value(const CheckpointState& st) {
  const std::pair<const char*, const std::vector<float>*> parts[] = {
      {"parameter", &st.params}, {"first moment", &st.m}, {"second moment", &st.v}, {"Muon momentum", &st.momentum}};
  for (const auto& [what, v] : parts)
    for (size_t i = 0; i < v->size(); ++i)
      if (!std::isfinite((*v)[i]) || (v == &st.v && (*v)[i] < 0.0f)) {
        std::ostringstream os;
        os << what << " " << i << " is " << (*v)[i];
        return os.str();
      }
  return "";
}

// wsd_replans of a checkpoint's header, resumed for a schedule of new_total steps.
bool wsd_replans(const CheckpointMeta& m, int new_total) {
  return wsd_replans(static_cast<LrSchedule>(m.lr_schedule), m.step, m.total_steps, m.warmup, m.decay_frac, new_total);
}

CheckpointMeta make_meta(const TrainConfig& cfg, const TrainData& data, const GPT& model, int step,
                         const std::vector<MuonMatrix>& muon) {
  CheckpointMeta m;
  m.model = model.config();
  m.step = step;
  m.batch = cfg.batch;
  m.grad_accum = cfg.grad_accum;
  m.total_steps = cfg.schedule_length();
  m.dropout = cfg.dropout;
  m.lr = cfg.optim.lr;
  m.min_lr_frac = cfg.optim.min_lr_frac;
  m.weight_decay = cfg.optim.weight_decay;
  m.grad_clip = cfg.optim.grad_clip;
  m.warmup = cfg.optim.warmup_steps;
  m.seed = cfg.seed;
  m.tokenizer_fingerprint = data.tokenizer_fingerprint;
  m.data_hash = data.hash;
  m.num_params = model.num_params();
  m.n_train = data.n_train;
  const OptimConfig& oc = cfg.optim;
  m.optimizer = static_cast<int32_t>(oc.kind);
  m.lr_schedule = static_cast<int32_t>(oc.schedule);
  m.decay_frac = oc.schedule == LrSchedule::wsd ? oc.decay_frac : 0.0f;  // 0 where it does not apply
  m.beta1 = oc.beta1, m.beta2 = oc.beta2, m.adam_eps = oc.eps;
  if (oc.kind == OptimizerKind::muon) {  // the muon_* stay 0 in an AdamW run's file
    m.muon_lr = oc.muon.lr, m.muon_momentum = oc.muon.momentum, m.muon_weight_decay = oc.muon.weight_decay;
    m.muon_ns_steps = oc.muon.ns_steps, m.muon_adjust = static_cast<int32_t>(oc.muon.adjust);
    m.muon_matrices = static_cast<int32_t>(muon.size());
    for (const MuonMatrix& x : muon) m.muon_count += x.count();
  }
  return m;
}
}  // namespace

uint64_t write_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, Optimizer& opt, Backend& be,
                          HostCollectives& group, int step) {
  // Only rank 0 writes (every rank holds identical state). Its copies from the backend run on this, the
  // backend's, thread, in pieces of kCheckpointChunkBytes between meetings of every rank (agree_in_steps).
  auto st = std::make_shared<CheckpointState>();
  const size_t n = model.num_params();
  Muon* muon = opt.muon();
  const float* const from[4] = {model.params(), opt.adamw().m(), opt.adamw().v(), muon ? muon->momentum() : nullptr};
  std::vector<float>* const to[4] = {&st->params, &st->m, &st->v, &st->momentum};
  const size_t sizes[4] = {n, n, n, muon ? muon->count() : 0};
  int part = 0;
  size_t done = 0;
  agree_in_steps(group, [&] {
    if (group.rank() != 0) return true;
    if (part == 0 && done == 0) {  // in the first step, so a failure is agreed too
      st->meta = make_meta(cfg, data, model, step, muon ? muon->matrices() : std::vector<MuonMatrix>{});
      for (int i = 0; i < 4; ++i) to[i]->reserve(sizes[i]);  // no page touched yet
    }
    while (part < 4 && done == sizes[part]) ++part, done = 0;  // an empty part (no Muon) has nothing to copy
    if (part == 4) return true;
    const size_t k = std::min(kCheckpointChunkBytes / sizeof(float), sizes[part] - done);
    to[part]->resize(done + k);  // within the reserved capacity: no reallocation
    be.copy_to_host(to[part]->data() + done, from[part] + done, k * sizeof(float));
    done += k;
    while (part < 4 && done == sizes[part]) ++part, done = 0;
    return part == 4;
  });
  return agree_while_working(group, [st, path = cfg.ckpt, step, steps = cfg.steps]() -> uint64_t {
    if (st->params.empty()) return 0;  // not rank 0
    try {
      // A finite loss at this step does not make the UPDATED state finite: never replace a good
      // checkpoint with a blown-up one (a resume would refuse it).
      if (const std::string bad = impossible_value(*st); !bad.empty()) {
        std::error_code ec;
        XT_FAIL("the state after this step is not finite (" << bad << "); not writing " << path
                                                            << (std::filesystem::exists(path, ec) ? " (the previous checkpoint is kept)"
                                                                                                  : " (no checkpoint was written before)"));
      }
      const uint64_t checksum = save_checkpoint(path, *st);
      std::printf("step %5d/%d | checkpoint written to %s\n", step, steps, path.c_str());
      return checksum;
    } catch (const Error& e) {
      XT_FAIL("step " << step << ": " << e.what());
    }
  });
}

namespace {
// check_resume: a loaded checkpoint matches this run (want: make_meta of the run at step 0) and holds
// possible values; Error naming the option or value otherwise.
void check_resume(const CheckpointState& st, const CheckpointMeta& want, const std::string& resume, int steps) {
  const bool replans = wsd_replans(st.meta, want.total_steps);  // a wsd run extended in its stable phase
  const CheckpointMeta& got = st.meta;
  auto mismatch = [&](const char* what, auto have, auto need) {
    XT_FAIL("checkpoint " << resume << " does not match this run: " << what << " is " << have << " in the checkpoint, "
                          << need << " now");
  };
  // Every field the table says must match, in file order; the model as its description (one line
  // naming both models). The parameter count is among them: the copies below never take
  // model.num_params() floats out of vectors of another length.
  for (const MetaField& f : kMetaFields) {
    if (f.on_resume == OnResume::may_differ || !fields_differ(got, want, f)) continue;
    if (replans && f.offset == offsetof(CheckpointMeta, total_steps)) continue;
    if (f.on_resume == OnResume::model) mismatch("model", got.model.describe(), want.model.describe());
    mismatch(f.resume_name, field_text(got, f), field_text(want, f));
  }
  if (st.params.size() != want.num_params) XT_FAIL("checkpoint " << resume << ": internal size mismatch");
  if (got.step > steps)
    XT_FAIL("checkpoint " << resume << " is at step " << got.step << ", past --steps " << steps
                          << " (a larger --steps extends the run at the schedule's final learning rate)");
  // got.step == steps: nothing left to train (a requeued job after the last step); not an error.
  if (const std::string bad = impossible_value(st); !bad.empty())
    XT_FAIL("checkpoint " << resume << " holds an impossible value: " << bad << " (not written by a healthy run)");
}
}  // namespace

int restore_checkpoint(const TrainConfig& cfg, const TrainData& data, GPT& model, Optimizer& opt, Backend& be,
                       HostCollectives& group) {
  // Reading, parsing and checking the file is host work that may take long: on a worker thread while
  // the ranks keep meeting (agree_while_working); only the copies to the device below run here.
  Muon* muon = opt.muon();
  const CheckpointMeta want = make_meta(cfg, data, model, 0, muon ? muon->matrices() : std::vector<MuonMatrix>{});
  auto loaded = agree_while_working(group, [resume = cfg.resume, steps = cfg.steps, want, rank = group.rank()] {
    auto st = std::make_shared<CheckpointState>(load_checkpoint(resume, rank));
    check_resume(*st, want, resume, steps);
    return st;
  });
  const CheckpointState& st = *loaded;
  const CheckpointMeta& got = st.meta;
  const size_t bytes = model.num_params() * sizeof(float);
  be.copy_to_device(model.params(), st.params.data(), bytes);
  be.copy_to_device(opt.adamw().m(), st.m.data(), bytes);
  be.copy_to_device(opt.adamw().v(), st.v.data(), bytes);
  if (muon) be.copy_to_device(muon->momentum(), st.momentum.data(), muon->count() * sizeof(float));
  std::string extended;  // a run longer than the checkpoint's schedule (TrainConfig::schedule_steps)
  if (wsd_replans(got, want.total_steps) && got.step < cfg.steps)
    extended = " (extended to --steps " + std::to_string(cfg.steps) + ": the stable phase goes on, the decay is "
               "planned again over the last steps)";
  else if (cfg.steps > got.total_steps && got.step < cfg.steps)
    extended = " (extended to --steps " + std::to_string(cfg.steps) + "; steps past the LR schedule's " +
               std::to_string(got.total_steps) + " at its final learning rate)";
  print0(group.rank(), "resumed from %s at step %d%s\n", cfg.resume.c_str(), got.step,
         got.step == cfg.steps ? " (already at --steps: nothing to train)" : extended.c_str());
  return got.step;
}

}  // namespace xtrain
