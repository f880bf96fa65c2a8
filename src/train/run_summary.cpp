// The final metrics record and the printed end-of-run summary from one RunSummary. See run_summary.h.
#include "train/run_summary.h"

#include <cmath>
#include <cstdio>

#include <xtrain/core/error.h>
#include <xtrain/core/progress.h>

namespace xtrain {

namespace {

void check(const RunSummary& s) {
  XT_CHECK(s.first_step >= 1 && s.last_step >= s.first_step - 1,
           "steps " << s.first_step << "-" << s.last_step);
  XT_CHECK(s.world_size >= 1, "world size " << s.world_size);
  XT_CHECK(s.wall_s >= 0 && s.tok_per_s >= 0, "wall " << s.wall_s << " s, " << s.tok_per_s << " tok/s");
  XT_CHECK(!s.mfu || *s.mfu >= 0, "MFU " << *s.mfu);
  XT_CHECK(s.ckpt_xxh3 == 0 || !s.ckpt.empty(), "a checkpoint checksum without a checkpoint path");
}

std::string hex16(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// with_commas: 1638400 -> "1,638,400" (exact counts read better in a report than 1.64M).
std::string with_commas(uint64_t x) {
  std::string digits = std::to_string(x), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

nlohmann::json final_record(const RunSummary& s) {
  check(s);
  nlohmann::json r = {{"type", "final"},
                      {"step", s.last_step},
                      {"first_step", s.first_step},
                      {"world_size", s.world_size},
                      {"tokens_seen", s.tokens_seen()},
                      {"wall_s", s.wall_s},
                      {"max_param_diff", s.max_param_diff}};
  if (s.tok_per_s > 0) r["tok_per_s"] = s.tok_per_s;  // none when no step ran (a resume at --steps)
  if (s.mfu) r["mfu"] = *s.mfu;
  if (s.train_loss) r["loss"] = *s.train_loss;
  if (s.val_loss) {
    r["val_loss"] = *s.val_loss;
    r["val_step"] = s.val_step;
  }
  if (s.params > 0) r["params"] = s.params;
  if (s.peak_memory_bytes > 0) r["peak_memory_bytes"] = s.peak_memory_bytes;
  if (!s.ckpt.empty()) {
    r["ckpt"] = s.ckpt;
    r["ckpt_xxh3"] = hex16(s.ckpt_xxh3);
  }
  if (!s.timeline.empty()) r["timeline"] = s.timeline;
  return r;
}

std::vector<std::string> summary_lines(const RunSummary& s) {
  check(s);
  std::vector<std::string> out;
  const std::string steps = s.last_step >= s.first_step ? format("steps %d-%d", s.first_step, s.last_step)
                                                         : format("no step left after step %d", s.last_step);
  out.push_back("done   | " + steps + format(" | world %d | ", s.world_size) + with_commas(s.tokens_seen()) +
                " tokens seen | wall " + minutes_seconds(s.wall_s));
  if (s.train_loss || s.val_loss) {
    std::string l = "loss   |";
    if (s.train_loss) l += format(" train %.4f (step %d) |", *s.train_loss, s.last_step);
    if (s.val_loss) l += format(" val %.4f (step %d) |", *s.val_loss, s.val_step);
    l.pop_back();  // the last " |" separator
    l.pop_back();
    out.push_back(l);
  }
  if (s.tok_per_s > 0) {
    std::string l = "speed  | " + with_commas(static_cast<uint64_t>(std::llround(s.tok_per_s))) +
                    " tok/s (mean after the first step)";
    if (s.mfu) l += format(" | MFU %.1f%%", 100 * *s.mfu);
    out.push_back(l);
  }
  if (s.peak_memory_bytes > 0)
    out.push_back(format("memory | peak device memory: %.0f MiB (rank 0, xtrain's allocator)",
                         s.peak_memory_bytes / 1048576.0));
  out.push_back(format("max parameter difference across %d rank%s: %.3e", s.world_size, s.world_size == 1 ? "" : "s",
                       s.max_param_diff));
  if (!s.ckpt.empty()) out.push_back("ckpt   | " + s.ckpt + " | xxh3 " + hex16(s.ckpt_xxh3));
  if (!s.timeline.empty()) {
    const std::string steps = s.timeline_first > s.timeline_last ? "no step"
                              : s.timeline_first == s.timeline_last
                                  ? format("step %d", s.timeline_first)
                                  : format("steps %d-%d", s.timeline_first, s.timeline_last);
    out.push_back("trace  | " + s.timeline + " | " + steps + " (rank 0's --timeline, Chrome trace format)");
  }
  return out;
}

}  // namespace xtrain
