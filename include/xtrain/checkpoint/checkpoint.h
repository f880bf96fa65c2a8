// The checkpoint file format: parameters, optimizer state (AdamW's moments; with Muon its momentum buffers
// too), step, model config, optimizer and schedule, and the identity of the data and tokenizer, in one file
// with a header and an XXH3-64 checksum over everything before it.
// Batch sampling and dropout are counter-based (rng.h), keyed by (seed, step), so seed + step are
// the whole RNG and data-loader state. Written atomically (write_file_atomic, io.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtrain/core/progress.h>
#include <xtrain/model/model.h>

namespace xtrain {

// The header of a checkpoint: its fields are written, read, checked and compared on resume through
// kMetaFields below, the one list of them.
struct CheckpointMeta {
  GPTConfig model;
  int32_t step = 0;           // optimizer steps completed
  int32_t batch = 0;          // global sequences per optimizer step
  int32_t grad_accum = 1;
  int32_t total_steps = 0;    // the LR schedule's length (TrainConfig::schedule_length; step may exceed it)
  float dropout = 0.0f;
  float lr = 0, min_lr_frac = 0, weight_decay = 0, grad_clip = 0;  // the rest of the schedule (OptimConfig)
  int32_t warmup = 0;
  uint64_t seed = 0;
  uint64_t tokenizer_fingerprint = 0;
  uint64_t data_hash = 0;     // TrainData::hash: XXH3-64 of the token stream
  uint64_t n_train = 0;       // tokens in the training part (the rest is held out for validation)
  uint64_t num_params = 0;
  // format 04: the optimizer and the rest of the schedule. A format-03 file reads as an AdamW run with
  // the cosine schedule and the betas and eps every run had then (the defaults below). Fields that do
  // not apply to the run hold 0 (decay_frac without wsd, the muon_* with adamw), so they always match.
  int32_t optimizer = 0;      // OptimizerKind (train/optim.h): 0 adamw, 1 muon
  int32_t lr_schedule = 0;    // LrSchedule: 0 cosine, 1 wsd, 2 linear
  float decay_frac = 0;       // wsd's decay share of the run
  float beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;
  float muon_lr = 0, muon_momentum = 0, muon_weight_decay = 0;
  int32_t muon_ns_steps = 0;
  int32_t muon_adjust = 0;    // MuonAdjust: 0 original, 1 match_rms_adamw
  int32_t muon_matrices = 0;  // the matrices Muon orthogonalizes (muon_matrices, train/optim.h)
  uint64_t muon_count = 0;    // floats of Muon's momentum buffers after v (<= num_params)
};

// ---- the header's field table: every CheckpointMeta field once, in file order (format 04) ----
// It drives writing, reading and range-checking the header and the resume comparison
// (checkpoint.cpp). The static checks below fail the build when a member of CheckpointMeta has no
// row, a row's type is not its member's, or a part's size changes (another format version). The
// family's rows (MetaPart::family: arch, norm_eps, rope_theta, tie) follow the base header and are
// written only for a model other than gpt2; the header's byte count (u32 header_bytes) says whether a
// file holds them, and a header without them reads as gpt2 with the defaults. The optimizer's rows
// (MetaPart::optim) come last, in every format-04 file; a format-03 file (still read) has none and reads
// with their defaults (AdamW, cosine, the betas and eps of then).

enum class MetaType { i32, f32, u64 };  // stored as int32_t, float, uint64_t (native byte order)
// Which header a row belongs to: the base (every file), the family's rows (files of a non-gpt2 model) or
// the optimizer's (format 04).
enum class MetaPart { base, family, optim };
// The values a header field may hold, checked on every read (a damaged file can carry any value
// behind a valid checksum): any; positive (> 0); step: >= 0 (past total_steps in a run extended past its
// schedule); grad_accum: [1, batch]; fraction: [0, 1); arch: an Arch value; flag: 0 or 1; schedule: an
// LrSchedule value (0, 1, 2).
enum class MetaRange { any, positive, step, grad_accum, fraction, arch, flag, schedule };
// How a resume compares the field with this run's value. model: must match, reported as the model
// description (GPTConfig::describe: both models in one message); must_match: must match, the message
// names `resume_name` (the option that sets it, or what the value is); may_differ: not compared (the
// step: the run continues from it; checked against --steps).
enum class OnResume { model, must_match, may_differ };

struct MetaField {
  const char* name;         // as in "header field <name> = ... is out of range"
  MetaType type;
  size_t offset;            // of the member in CheckpointMeta
  MetaRange range;
  OnResume on_resume;
  const char* resume_name;  // what a resume mismatch names
  MetaPart part = MetaPart::base;
  constexpr size_t bytes() const { return type == MetaType::u64 ? 8 : 4; }
};

template <typename T> struct MetaTypeOf;  // defined for the three stored types only
template <> struct MetaTypeOf<int32_t> { static constexpr MetaType value = MetaType::i32; };
template <> struct MetaTypeOf<float> { static constexpr MetaType value = MetaType::f32; };
template <> struct MetaTypeOf<uint64_t> { static constexpr MetaType value = MetaType::u64; };
template <> struct MetaTypeOf<Arch> { static constexpr MetaType value = MetaType::i32; };  // int32_t enum
template <MetaType want, typename Member>
constexpr MetaType checked_meta_type() {
  static_assert(MetaTypeOf<Member>::value == want, "XT_META_FIELD: the row's type is not its member's");
  return want;
}
// XT_META_FIELD: the row of CheckpointMeta's `member` (compile error when `type` is not its type).
#define XT_META_FIELD(member, name, type, range, on_resume, resume_name)                                 \
  MetaField{name, checked_meta_type<MetaType::type, decltype(std::declval<CheckpointMeta&>().member)>(), \
            offsetof(CheckpointMeta, member), MetaRange::range, OnResume::on_resume, resume_name}
// XT_META_FAMILY_FIELD: a row of the model family's part (compared on resume as the model).
#define XT_META_FAMILY_FIELD(member, name, type, range)                                                  \
  MetaField{name, checked_meta_type<MetaType::type, decltype(std::declval<CheckpointMeta&>().member)>(), \
            offsetof(CheckpointMeta, member), MetaRange::range, OnResume::model, "model", MetaPart::family}
// XT_META_OPTIM_FIELD: a row of the optimizer's part (format 04), compared on resume.
#define XT_META_OPTIM_FIELD(member, name, type, range, resume_name)                                       \
  MetaField{name, checked_meta_type<MetaType::type, decltype(std::declval<CheckpointMeta&>().member)>(), \
            offsetof(CheckpointMeta, member), MetaRange::range, OnResume::must_match, resume_name, MetaPart::optim}

constexpr MetaField kMetaFields[] = {  // name, type, values it may hold, resume comparison
    XT_META_FIELD(model.V, "V", i32, positive, model, "model"),
    XT_META_FIELD(model.maxT, "maxT", i32, positive, model, "model"),
    XT_META_FIELD(model.C, "C", i32, positive, model, "model"),
    XT_META_FIELD(model.L, "L", i32, positive, model, "model"),
    XT_META_FIELD(model.NH, "NH", i32, positive, model, "model"),
    XT_META_FIELD(model.KVH, "KVH", i32, positive, model, "model"),
    XT_META_FIELD(model.HS, "HS", i32, positive, model, "model"),
    XT_META_FIELD(model.F, "F", i32, positive, model, "model"),
    XT_META_FIELD(step, "step", i32, step, may_differ, "step"),
    XT_META_FIELD(batch, "batch", i32, positive, must_match, "--batch"),
    XT_META_FIELD(grad_accum, "grad_accum", i32, grad_accum, must_match, "--grad-accum"),
    XT_META_FIELD(total_steps, "total_steps", i32, positive, must_match, "--steps (LR schedule length)"),
    XT_META_FIELD(dropout, "dropout", f32, fraction, must_match, "--dropout"),
    // the rest of the schedule: a resumed run continues the same run, so a change is an error too
    XT_META_FIELD(lr, "lr", f32, any, must_match, "--lr"),
    XT_META_FIELD(min_lr_frac, "min_lr_frac", f32, any, must_match, "--min-lr-frac"),
    XT_META_FIELD(weight_decay, "weight_decay", f32, any, must_match, "--weight-decay"),
    XT_META_FIELD(grad_clip, "grad_clip", f32, any, must_match, "--grad-clip"),
    XT_META_FIELD(warmup, "warmup", i32, any, must_match, "--warmup"),
    XT_META_FIELD(seed, "seed", u64, any, must_match, "--seed"),
    XT_META_FIELD(tokenizer_fingerprint, "tokenizer_fingerprint", u64, any, must_match, "tokenizer fingerprint"),
    XT_META_FIELD(data_hash, "data_hash", u64, any, must_match, "training data hash"),
    // the copies of a resume rely on the count: compared on its own, as a damaged file can carry any
    // value here whatever the model description says
    XT_META_FIELD(num_params, "num_params", u64, positive, must_match, "the parameter count"),
    XT_META_FIELD(n_train, "n_train", u64, any, must_match, "training tokens (--val-fraction / --val-every split)"),
    // the model family's fields: in files of a non-gpt2 model only (see above)
    XT_META_FAMILY_FIELD(model.arch, "arch", i32, arch),
    XT_META_FAMILY_FIELD(model.norm_eps, "norm_eps", f32, positive),
    XT_META_FAMILY_FIELD(model.rope_theta, "rope_theta", f32, positive),
    XT_META_FAMILY_FIELD(model.tie_embeddings, "tie", i32, flag),
    // the optimizer's fields: in every format-04 file (see above)
    XT_META_OPTIM_FIELD(optimizer, "optimizer", i32, flag, "--optimizer"),
    XT_META_OPTIM_FIELD(lr_schedule, "lr_schedule", i32, schedule, "--lr-schedule"),
    XT_META_OPTIM_FIELD(decay_frac, "decay_frac", f32, any, "--decay-frac"),
    XT_META_OPTIM_FIELD(beta1, "beta1", f32, fraction, "--beta1"),
    XT_META_OPTIM_FIELD(beta2, "beta2", f32, fraction, "--beta2"),
    XT_META_OPTIM_FIELD(adam_eps, "adam_eps", f32, any, "--adam-eps"),
    XT_META_OPTIM_FIELD(muon_lr, "muon_lr", f32, any, "--muon-lr"),
    XT_META_OPTIM_FIELD(muon_momentum, "muon_momentum", f32, any, "--muon-momentum"),
    XT_META_OPTIM_FIELD(muon_weight_decay, "muon_weight_decay", f32, any, "--muon-weight-decay"),
    XT_META_OPTIM_FIELD(muon_ns_steps, "muon_ns_steps", i32, step, "--muon-ns-steps"),
    XT_META_OPTIM_FIELD(muon_adjust, "muon_adjust", i32, flag, "--muon-adjust"),
    XT_META_OPTIM_FIELD(muon_matrices, "muon_matrices", i32, step, "Muon's matrix count"),
    XT_META_OPTIM_FIELD(muon_count, "muon_count", u64, any, "Muon's state size"),
};
#undef XT_META_FIELD
#undef XT_META_FAMILY_FIELD
#undef XT_META_OPTIM_FIELD
constexpr int kNumMetaFields = sizeof(kMetaFields) / sizeof(MetaField);
constexpr size_t kMetaBytes = 112;  // format 03's base header: the u32 header_bytes of every gpt2 file
constexpr size_t kMetaFamilyBytes = 16;  // the family's rows after it (a llama file's header: 128 bytes)
constexpr size_t kMetaOptimBytes = 56;   // the optimizer's rows, last (format 04)

// meta_fields_disjoint: no two rows share a byte, each range is on a type it applies to.
// meta_fields_bytes: what the rows write.
constexpr bool meta_fields_disjoint(const MetaField* t, int n) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j)
      if (t[i].offset < t[j].offset + t[j].bytes() && t[j].offset < t[i].offset + t[i].bytes()) return false;
    const MetaRange r = t[i].range;
    if ((r == MetaRange::step || r == MetaRange::grad_accum) && t[i].type != MetaType::i32) return false;
    if (r == MetaRange::fraction && t[i].type != MetaType::f32) return false;
    if ((r == MetaRange::arch || r == MetaRange::flag || r == MetaRange::schedule) && t[i].type != MetaType::i32)
      return false;
  }
  return true;
}
constexpr size_t meta_fields_bytes(const MetaField* t, int n) {
  size_t sum = 0;
  for (int i = 0; i < n; ++i) sum += t[i].bytes();
  return sum;
}
constexpr size_t meta_part_bytes(const MetaField* t, int n, MetaPart part) {
  size_t sum = 0;
  for (int i = 0; i < n; ++i) sum += t[i].part == part ? t[i].bytes() : 0;
  return sum;
}
// the rows in part order (base, family, optim): a file's header is the table without the parts it lacks
constexpr bool meta_family_last(const MetaField* t, int n) {
  for (int i = 1; i < n; ++i)
    if (static_cast<int>(t[i - 1].part) > static_cast<int>(t[i].part)) return false;
  return true;
}
static_assert(std::is_standard_layout_v<CheckpointMeta>, "offsetof needs a standard-layout CheckpointMeta");
static_assert(meta_fields_disjoint(kMetaFields, kNumMetaFields), "kMetaFields: a byte in two rows, or a range on another type");
// disjoint rows as large as the struct (which has no padding): every member has its row
static_assert(meta_fields_bytes(kMetaFields, kNumMetaFields) == sizeof(CheckpointMeta),
              "kMetaFields: a member of CheckpointMeta without a row");
static_assert(meta_part_bytes(kMetaFields, kNumMetaFields, MetaPart::base) == kMetaBytes,
              "kMetaFields: format 03's base header is 112 bytes (another field is another format version)");
static_assert(meta_part_bytes(kMetaFields, kNumMetaFields, MetaPart::family) == kMetaFamilyBytes &&
                  meta_family_last(kMetaFields, kNumMetaFields),
              "kMetaFields: the family's rows are 16 bytes after the base header");
static_assert(meta_part_bytes(kMetaFields, kNumMetaFields, MetaPart::optim) == kMetaOptimBytes,
              "kMetaFields: the optimizer's rows are 56 bytes, last");

// field_text: the value of row f in m as `<<` prints it ("3", "0.0003", "12345678901"); the hashes (data
// hash, tokenizer fingerprint) as 16 hex digits, as the export registry and the run summary print them.
std::string field_text(const CheckpointMeta& m, const MetaField& f);
// fields_differ: row f differs between a and b (floats compared as floats: a NaN differs from itself).
bool fields_differ(const CheckpointMeta& a, const CheckpointMeta& b, const MetaField& f);

// kCheckpointChunkBytes: files are read, and states copied, in pieces of at most 64 MB, with a progress
// report or a meeting of the ranks after each.
inline constexpr size_t kCheckpointChunkBytes = size_t{64} << 20;

struct CheckpointState {
  CheckpointMeta meta;
  std::vector<float> params, m, v;  // (num_params) each
  std::vector<float> momentum;      // (muon_count): Muon's momentum buffers, its matrices in buffer order
};

// save_checkpoint: writes `path` atomically; a crash leaves either the old file or the new one.
// Returns the XXH3-64 checksum stored at the file's end. A file of kLongWorkBytes or more gets
// progress lines (progress.h). Throws Error naming the path and the OS error, or refusing a path that
// is not a regular file.
uint64_t save_checkpoint(const std::string& path, const CheckpointState& st);

// parse_checkpoint: the bytes of a checkpoint file -> state; `path` names it in errors. Throws Error
// "checkpoint <path>: <why>" for bad magic, another format version, a truncated file, a size that
// does not match the header's parameter and Muon state counts, a checksum mismatch, or a header field out of range
// (a dimension, batch, grad_accum or parameter count <= 0, a step < 0, dropout outside [0, 1)). Never reads outside `bytes` (fuzzed: tests/fuzz).
CheckpointState parse_checkpoint(const std::string& bytes, const std::string& path);

// check_checkpoint_file: the checks of parse_checkpoint that need only the file's head and size (magic,
// version, header, header fields, the size the parameter count implies), in milliseconds however large
// the file: a damaged or truncated --resume is refused before the corpus is read. The checksum is
// checked when the file is read (load_checkpoint). Returns the header. Throws Error as parse_checkpoint
// and load_checkpoint.
CheckpointMeta check_checkpoint_file(const std::string& path);

// load_checkpoint: reads `path` and parse_checkpoint()s it; also throws Error for a missing file and
// "checkpoint <path>: cannot read: not a regular file" for a FIFO, device or directory (never blocks).
// `rank`: the caller's rank; on rank 0 a file of kLongWorkBytes or more gets progress lines
// (progress.h; `progress` says where, e.g. stderr for a tool whose stdout is its output).
CheckpointState load_checkpoint(const std::string& path, int rank = 0,
                                const ProgressOptions& progress = long_work_options());

}  // namespace xtrain
