// Metrics file and step line (see src/train/metrics.h).
#include "metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <xtrain/core/error.h>
#include "core/io.h"
#include "core/json.h"
#include <xtrain/core/progress.h>

namespace xtrain {

namespace {
// kOtherLinks: why a metrics file with other hard links is refused (MetricsWriter, check_metrics_file)
constexpr const char* kOtherLinks = "it has other hard links; not truncating the file they name";

// keep_metrics_upto: rewrites the metrics file `path` (if it exists) without the records of steps > step
// and without lines that are not whole JSON (a run that died after its last checkpoint leaves records
// the resumed run writes again, and maybe half a line); every other line is kept as it was. Atomic and
// mode-preserving (write_file_atomic: a symlink of this user or root is followed).
void keep_metrics_upto(const std::string& path, int step) {
  const OutputLocation loc = locate_output(path, "cannot replace metrics file");
  struct stat st{};
  if (::fstatat(loc.dir_fd, loc.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // nothing written yet
  std::istringstream in(read_output_file(loc, "metrics file " + path));
  std::ostringstream kept;
  int dropped = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json r;
    bool broken = false;
    try {
      r = parse_json(line, path);  // bounded in depth (core/json.h)
    } catch (const Error&) {
      broken = true;
    }
    const bool later = r.is_object() && r.contains("step") && r["step"].is_number_integer() && r["step"].get<int>() > step;
    if (broken || later) {
      ++dropped;
    } else {
      kept << line << '\n';
    }
  }
  if (dropped == 0) return;
  write_file_atomic(loc, path, kept.str(), "cannot replace metrics file");
  std::printf("metrics | %s: dropped %d records after step %d or broken lines (written before the run was resumed)\n",
              path.c_str(), dropped, step);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int resume_step) : path_(path) {
  if (path.empty()) return;
  if (resume_step > 0) keep_metrics_upto(path, resume_step);
  // Opened in the directory locate_output reached (symlinks only of this user or root), never
  // through a symlink at the name itself; O_NONBLOCK so a FIFO swapped in since the start-up check
  // does not block, then refused as not a regular file; truncated only after the checks, and never
  // a file with other hard links (truncating it would empty the file they name).
  const OutputLocation loc = locate_output(path, "cannot open metrics file");
  const int fd = ::openat(loc.dir_fd, loc.name.c_str(),
                          O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (resume_step > 0 ? O_APPEND : 0), 0666);
  if (fd < 0) XT_FAIL("cannot open metrics file " << path << ": " << std::strerror(errno));
  struct stat st{};
  const char* refused = ::fstat(fd, &st) != 0 ? "cannot stat it" : !S_ISREG(st.st_mode) ? "not a regular file"
                        : st.st_nlink > 1 ? kOtherLinks : nullptr;
  if (!refused && resume_step <= 0 && ::ftruncate(fd, 0) != 0) refused = "cannot truncate it";
  if (refused) {
    ::close(fd);
    XT_FAIL("cannot open metrics file " << path << ": " << refused);
  }
  fd_ = fd;
  fresh_ = resume_step <= 0;
  whole_bytes_ = fresh_ ? 0 : st.st_size;
  dev_ = st.st_dev, ino_ = st.st_ino;
  dir_fd_ = ::fcntl(loc.dir_fd, F_DUPFD_CLOEXEC, 0);  // -1: a new file that stays empty is then kept
  name_ = loc.name;
}

void check_metrics_file(const std::string& path) {
  if (path.empty()) return;
  const OutputLocation loc = locate_output(path, "--metrics");
  struct stat st{};
  if (::fstatat(loc.dir_fd, loc.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1)
    XT_FAIL("--metrics " << path << ": " << kOtherLinks);
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (fd_ < 0) return;
  const std::string line = record.dump() + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t k = ::write(fd_, line.data() + done, line.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    const int cause = k < 0 ? errno : ENOSPC;
    // Cut the part of the record written (a half line would be a broken record); a new file holding
    // no record is removed, if the name still names it.
    std::string removed;
    if (::ftruncate(fd_, whole_bytes_) == 0 && fresh_ && whole_bytes_ == 0 && dir_fd_ >= 0) {
      struct stat st{};
      if (::fstatat(dir_fd_, name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ && st.st_ino == ino_ &&
          ::unlinkat(dir_fd_, name_.c_str(), 0) == 0)
        removed = "; removed it, it held no record";
    }
    ::close(fd_);
    fd_ = -1;
    XT_FAIL("cannot write metrics file " << path_ << ": " << std::strerror(cause) << removed);
  }
  whole_bytes_ += static_cast<off_t>(line.size());
}

nlohmann::json train_record(const StepStats& s) {
  nlohmann::json r = {{"type", "train"}, {"step", s.step}, {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm},
                      {"ms", s.ms}, {"tok_per_s", s.tok_per_s}};
  if (s.mfu) r["mfu"] = *s.mfu;
  if (s.mem_in_use_bytes > 0) r["mem_in_use_bytes"] = s.mem_in_use_bytes;
  if (s.peak_memory_bytes > 0) r["peak_memory_bytes"] = s.peak_memory_bytes;
  return r;
}

std::string step_line(const StepStats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %5d/%d | loss %7.4f | lr %.2e | grad norm %.3f | %8.1f ms | %9.0f tok/s", s.step,
                s.steps, s.loss, s.lr, s.grad_norm, s.ms, s.tok_per_s);
  std::string line = buf;
  if (s.mfu) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100 * *s.mfu);
    line += buf;
  }
  if (s.peak_memory_bytes > 0) {
    std::snprintf(buf, sizeof buf, " | mem %.0f/%.0f MiB", s.mem_in_use_bytes / 1048576.0, s.peak_memory_bytes / 1048576.0);
    line += buf;
  }
  return s.eta_s < 0 ? line : line + " | eta " + minutes_seconds(s.eta_s);
}

void print_step(const StepStats& s) {
  std::printf("%s\n", step_line(s).c_str());
  std::fflush(stdout);
}

}  // namespace xtrain
