// Writing a model directory all-or-nothing (see ExportCommit in serve/export.h): under an exclusive
// lock on the directory, every new file is written completely under a staging name first, the
// previous files are kept under backup names (hard links), and only then are the new files renamed
// into place; undone from the backups unless the caller keeps the result.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/progress.h>
#include <xtrain/serve/export.h>
#include "serve/export_commit.h"

namespace xtrain {

namespace {
std::string staged_name(const std::string& name) { return ".xtrain-export.new." + name; }
std::string backup_name(const std::string& name) { return ".xtrain-export.prev." + name; }

// sync_dir: makes the renames in dir_fd (an O_PATH descriptor) durable; failures are ignored (a file
// system without directory fsync still renamed).
void sync_dir(int dir_fd) {
  const int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}
}  // namespace

ExportCommit::ExportCommit(const std::string& dir, const ExportFiles& files)
    : out_(open_output_directory(dir, "--out", /*create=*/true)), dir_(dir) {
  auto path_of = [&](const std::string& name) { return (std::filesystem::path(dir) / name).string(); };
  // One export into a directory at a time: two at once would otherwise leave one checkpoint's
  // config.json next to the other's model.safetensors.
  lock_ = std::make_unique<DirLock>(out_.dir_fd, kExportLockName, path_of(kExportLockName), "the export lock", "xtrain_export",
                                    "another export into this directory");
  // Refused before anything is written: a symlink planted in dir (renaming over it would be fine, but
  // it says someone meant the file to live elsewhere) and a name that is a directory, FIFO or device.
  for (const auto& [name, bytes] : files) {
    struct stat st{};
    if (::fstatat(out_.dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISLNK(st.st_mode)) XT_FAIL(path_of(name) << ": is a symlink; not writing through it");
    if (!S_ISREG(st.st_mode)) XT_FAIL(path_of(name) << ": exists and is not a regular file");
  }
  // 1. Every new file complete under its staging name (write_file_atomic: written, fsync'd, renamed),
  // the model last, with progress lines from kLongWorkBytes (progress.h).
  try {
    for (const auto& [name, bytes] : files) {
      if (name == kModelFile) continue;
      write_file_atomic(out_.in(staged_name(name)), path_of(staged_name(name)), bytes, "cannot write");
      staged_.push_back(name);
    }
    auto it = files.find(kModelFile);
    if (it != files.end()) {
      const std::string path = path_of(staged_name(kModelFile));
      Progress progress("write " + path_of(kModelFile), it->second.size(), 0, long_work_options());
      write_file_atomic(out_.in(staged_name(kModelFile)), path, it->second, "cannot write",
                        [&](size_t done) { progress.update(done); });
      progress.finish();
      staged_.push_back(kModelFile);
    }
    // 2. The previous files kept under backup names (a second name for the same inode: the file
    // stays in place meanwhile), then 3. the new ones renamed over them.
    for (const std::string& name : staged_) {
      (void)::unlinkat(out_.dir_fd, backup_name(name).c_str(), 0);  // left by an export that was killed
      if (::linkat(out_.dir_fd, name.c_str(), out_.dir_fd, backup_name(name).c_str(), 0) == 0) {
        backed_up_.push_back(name);
      } else if (errno != ENOENT) {
        XT_FAIL(path_of(name) << ": cannot keep the previous file as " << backup_name(name) << ": " << std::strerror(errno));
      }
    }
    // A previous export's file that this one does not hold (a regular file under one of the export's
    // names) is kept under its backup name and removed.
    for (const char* name : kExportFileNames) {
      struct stat st{};
      if (files.count(name) || ::fstatat(out_.dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      (void)::unlinkat(out_.dir_fd, backup_name(name).c_str(), 0);
      if (::linkat(out_.dir_fd, name, out_.dir_fd, backup_name(name).c_str(), 0) != 0)
        XT_FAIL(path_of(name) << ": cannot keep the previous file as " << backup_name(name) << ": " << std::strerror(errno));
      backed_up_.push_back(name);
      if (::unlinkat(out_.dir_fd, name, 0) != 0) XT_FAIL(path_of(name) << ": cannot remove the previous file: " << std::strerror(errno));
      removed_.push_back(name);
    }
    for (const std::string& name : staged_) {
      if (::renameat(out_.dir_fd, staged_name(name).c_str(), out_.dir_fd, name.c_str()) != 0)
        XT_FAIL(path_of(name) << ": cannot rename the new file into place: " << std::strerror(errno));
      renamed_.push_back(name);
    }
    sync_dir(out_.dir_fd);
  } catch (...) {
    undo();
    throw;
  }
}

void ExportCommit::undo() noexcept {
  for (const std::string& name : renamed_) {
    const bool had = std::find(backed_up_.begin(), backed_up_.end(), name) != backed_up_.end();
    if (had) (void)::renameat(out_.dir_fd, backup_name(name).c_str(), out_.dir_fd, name.c_str());
    else (void)::unlinkat(out_.dir_fd, name.c_str(), 0);  // there was no previous file
  }
  for (const std::string& name : removed_) (void)::renameat(out_.dir_fd, backup_name(name).c_str(), out_.dir_fd, name.c_str());
  for (const std::string& name : staged_) (void)::unlinkat(out_.dir_fd, staged_name(name).c_str(), 0);
  for (const std::string& name : backed_up_) (void)::unlinkat(out_.dir_fd, backup_name(name).c_str(), 0);
  renamed_.clear(), staged_.clear(), backed_up_.clear(), removed_.clear();
  sync_dir(out_.dir_fd);
}

void ExportCommit::keep() {
  for (const std::string& name : backed_up_) (void)::unlinkat(out_.dir_fd, backup_name(name).c_str(), 0);
  renamed_.clear(), staged_.clear(), backed_up_.clear(), removed_.clear();
  sync_dir(out_.dir_fd);
}

ExportCommit::~ExportCommit() { undo(); }

void write_export(const std::string& dir, const ExportFiles& files) { ExportCommit(dir, files).keep(); }

}  // namespace xtrain
