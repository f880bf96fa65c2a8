// ExportCommit: a model directory's files replaced all together or not at all, under the directory's
// lock (xtrain_export's and the trainer's writer of exports; the public face is make_export, export.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/lock.h"
#include <xtrain/serve/export.h>

namespace xtrain {

// kExportLockName: the lock file of a model directory, held by ExportCommit from before its first file is
// staged until after the last rename; a reader (load_model_dir) refuses a directory whose lock is held.
inline constexpr const char* kExportLockName = ".xtrain-export.lock";

// ExportCommit: replaces the files of a model directory all together or not at all. The constructor
// opens dir (created if absent; never through another user's symlink, open_output_directory), takes
// an exclusive lock on dir/.xtrain-export.lock (DirLock: waited for with a line, at most 600 s),
// writes every file completely under a staging name (.xtrain-export.new.<name>, each atomically),
// keeps the previous files as hard links (.xtrain-export.prev.<name>) and renames the new files into
// place; a previous export's file that this export does not hold (the tokenizer files of an export of
// another tokenizer) is removed the same way, so the directory never pairs one model with another's
// tokenizer. Until keep(), the destructor undoes it: the previous files return (a name that had none is
// removed), so a caller whose next step fails (the registry update) leaves the directory as it was.
// Throws Error "<path>: <cause>" (nothing changed in dir then) for an unwritable directory, a full
// disk or a file size limit, an output name that is a symlink or not a regular file (refused before
// anything is written). A model file of kLongWorkBytes or more gets progress lines (progress.h).
class ExportCommit {
 public:
  ExportCommit(const std::string& dir, const ExportFiles& files);
  ~ExportCommit();  // undo() unless keep() was called; the lock is released after it
  ExportCommit(const ExportCommit&) = delete;
  ExportCommit& operator=(const ExportCommit&) = delete;
  void keep();  // the new files stay; the backups are removed

 private:
  void undo() noexcept;
  OutputLocation out_;
  std::string dir_;
  std::unique_ptr<DirLock> lock_;
  std::vector<std::string> staged_, backed_up_, renamed_, removed_;  // file names in dir
};

// write_export: ExportCommit(dir, files).keep(): the files of an export, all or nothing.
void write_export(const std::string& dir, const ExportFiles& files);

}  // namespace xtrain
