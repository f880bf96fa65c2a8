// Small file helpers shared by every reader and writer of xtrain's files: whole-file reading, the
// one atomic writer (checkpoints, token caches, the metrics rewrite) and the start-up check that it
// can write an output, and "same file" by device and inode. The hashes are in digest.h.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace xtrain {

// UniqueFd: an owned file descriptor, closed when the owner goes (never throws). Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() {  // the descriptor, no longer owned
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);  // closes the owned descriptor, then owns fd

 private:
  int fd_ = -1;
};

// RegularFile: a regular file opened for reading and its fstat.
struct RegularFile {
  UniqueFd fd;
  struct stat st{};
};

// open_regular_file: `path` opened read-only only when it is a regular file, never blocking on a FIFO
// or opening a device: checked by path before opening and by the descriptor after (opened O_NONBLOCK,
// so a FIFO swapped in meanwhile does not block; the flag changes nothing for a regular file).
// Throws Error "<what>: <strerror>" when it cannot be stat'ed or opened, "<what>: not a regular file"
// for a FIFO, device or directory; e.g. what = "cannot read " + path.
RegularFile open_regular_file(const std::string& path, const std::string& what);

// read_file: the whole file as bytes (text or binary). Throws Error "cannot read <path>: <strerror>",
// "cannot read <path>: not a regular file" (a FIFO, device or directory: refused without blocking), or
// naming the path when its content does not fit in memory.
std::string read_file(const std::string& path);

// for_each_line: calls fn(line_no, line) for each line of `text` (1-based numbers; lines end at '\n',
// a trailing '\r' is dropped, a final line without '\n' counts, an empty text has none). The one
// line loop of the line-based file readers (GPT-2's vocab.bpe, tiktoken rank files).
void for_each_line(std::string_view text, const std::function<void(size_t line_no, std::string_view line)>& fn);

// OutputLocation: where an output file lives once every symlink on the way to it has been checked:
// the directory that holds it, opened (O_PATH) so that later steps work relative to it and cannot be
// redirected by a symlink planted meanwhile, and the file's name there. Move-only; closes dir_fd.
struct OutputLocation {
  int dir_fd = -1;
  std::string dir;   // the directory as reached, for messages ("" is the working directory)
  std::string name;  // the file's name in it (the file may not exist yet)
  OutputLocation() = default;
  OutputLocation(OutputLocation&& o) noexcept;
  OutputLocation& operator=(OutputLocation&&) = delete;
  ~OutputLocation();
  std::string path() const;
  // in: the file `name` of this directory (for a location from open_output_directory).
  OutputLocation in(const std::string& name) const;
};

// may_follow_output_symlink: an output path is resolved through a symlink only when the caller
// (effective uid euid) or root owns it. A symlink of another user is where that user, not the
// caller, chose to write: followed by a privileged job it would overwrite a file the link's owner
// may not write (the attack the kernel's fs.protected_symlinks blocks in sticky directories, when
// that sysctl is on; xtrain applies it everywhere and does not depend on the sysctl).
bool may_follow_output_symlink(uid_t link_uid, uid_t euid);

// locate_output: walks `path` one component at a time (openat with O_NOFOLLOW), following each
// symlink it meets (the final name included; at most 40 in all) only where may_follow_output_symlink
// allows, and returns the directory that holds the output and its name there. Throws Error
// "<what> <path>: <why>": a symlink of another user ("... is a symlink owned by uid U, neither this
// user (uid E) nor root; not writing through it"), a directory on the way that does not exist or is
// not a directory, a path that names a directory, a symlink loop.
OutputLocation locate_output(const std::string& path, const std::string& what);

// open_output_directory: the directory `path` as locate_output walks (name ""), each missing
// component created (mkdirat, 0777 minus the umask) when `create`, except one that a later ".." leaves
// again ("a/nx/../out" makes a/out only). Throws Error as locate_output
// does, and "<what> <path>: cannot create <dir>: <strerror>".
OutputLocation open_output_directory(const std::string& path, const std::string& what, bool create);

// read_output_file: the bytes of the output file at loc (opened in loc's directory, never through a
// symlink at its name, without blocking on a FIFO); Error "cannot read <path>: <why>" otherwise,
// also when it is not a regular file. For outputs read back before they are rewritten (metrics).
std::string read_output_file(const OutputLocation& loc, const std::string& path);

// write_file_atomic: replaces `path` with `bytes` so that a crash leaves either the old file or the
// new one, never a mix (POSIX rename). The path is resolved by locate_output (symlinks only of this
// user or root; every later step is relative to the directory found). The temporary file is created
// exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, name "<name>.tmp.<host>.<pid>.<16 random hex>") in that
// directory, so a planted file or symlink is never written through; it is locked (flock), written,
// fsync'd, renamed over the target while still locked, and the directory is fsync'd so the rename is
// durable. Before that, remove_stale_temp_files(path) clears what killed writers left behind. A
// target of this user's that exists keeps its permission bits (0777 of them: never set-user/group-ID;
// fchmod on the temporary file's descriptor); a new one, or one of another user's, gets create_mode
// minus the umask (a token cache: at most its text's bits, so it discloses no more than the text). Throws Error "<what> <path>: <why>" as locate_output does, when the
// target exists and is not a regular file (a device, FIFO, directory: refused, left untouched) or
// when any step fails (the temporary file is removed then). `written`, when set, is called with the
// bytes written so far after each write of at most 64 MB (a progress line for large files, progress.h).
void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what = "cannot write",
                       const std::function<void(size_t)>& written = {}, mode_t create_mode = 0666);
// write_file_atomic at a location already found (locate_output, OutputLocation::in); `path` names it
// in messages.
void write_file_atomic(const OutputLocation& loc, const std::string& path, const std::string& bytes,
                       const std::string& what = "cannot write", const std::function<void(size_t)>& written = {},
                       mode_t create_mode = 0666);

// remove_stale_temp_files: removes the temporary files of write_file_atomic(path) whose writer is
// provably dead, and returns how many. A file "<name>.tmp.<host>.<pid>.<random>" next to path is
// removed only when all hold: <host> is this host's name; no process <pid> exists here
// (kill(pid, 0) fails with ESRCH); it is a regular file owned by this user; and its flock, which a
// live writer holds until after its rename, can be taken now. Anything else (another host's writer,
// a live or reused pid, names of another form, a file system without flock) is left alone.
int remove_stale_temp_files(const std::string& path);

// same_file: true when a and b name the same file: the same device and inode when both exist,
// otherwise the same deepest existing directory (device and inode, after resolving symlinks and "..")
// and the same names below it, so two spellings of an output not yet created compare equal, also
// through a symlinked or bind-mounted directory.
bool same_file(const std::string& a, const std::string& b);

// flush_stdout: flushes standard output (C stdio and std::cout) and throws Error "cannot write the
// standard output: <strerror>" when any write to it failed (a full disk, /dev/full, a closed pipe): a
// tool's last step, so that lost output is exit 1, not 0.
void flush_stdout();

// is_non_regular: true when path exists and is not a regular file (after following symlinks).
bool is_non_regular(const std::string& path);

// check_writable: throws Error "<option> <path>: <cause>" unless write_file_atomic(path) can create
// or replace path, so an output that cannot be written is refused before the work that makes it:
// its directory exists and a file can be created there (a probe file, created and removed); path is
// not a directory, FIFO or device; and an existing path may be replaced (replace_forbidden_by_sticky).
// The path is resolved as write_file_atomic resolves it (locate_output). "" (no output) passes.
void check_writable(const std::string& path, const char* option);

// replace_forbidden_by_sticky: rename(2)'s EPERM rule for replacing an existing file: its directory
// has the sticky bit (S_ISVTX) and the caller (effective uid euid), unless it has CAP_FOWNER, owns
// neither the directory nor the file (rename(2) and unlink(2), "EPERM"; e.g. another user's file in /tmp).
bool replace_forbidden_by_sticky(mode_t dir_mode, uid_t dir_uid, uid_t file_uid, uid_t euid, bool cap_fowner);

}  // namespace xtrain
