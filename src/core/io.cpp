// File helpers (see src/core/io.h).
#include "core/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <deque>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <utility>
#include <filesystem>
#include <vector>
#include <iostream>
#include <new>
#include <stdexcept>
#include <random>

#include <xtrain/core/error.h>

namespace xtrain {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}
void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {
// regular_file: the descriptor fd (owned from here) when fstat says it is a regular file; Error
// "<what>: not a regular file" otherwise (the descriptor closed).
RegularFile regular_file(int fd, const std::string& what) {
  RegularFile f;
  f.fd.reset(fd);
  if (::fstat(fd, &f.st) != 0 || !S_ISREG(f.st.st_mode)) XT_FAIL(what << ": not a regular file");
  return f;
}

// read_open_file: the whole regular file `file` (closed here) as bytes; errors as read_file.
std::string read_open_file(RegularFile file, const std::string& path) {
  std::FILE* f = ::fdopen(file.fd.get(), "rb");
  if (!f) XT_FAIL("cannot read " << path << ": " << std::strerror(errno));
  file.fd.release();  // f owns it now
  std::string out;
  char buf[1 << 16];
  size_t n = 0;
  try {  // the whole size at once: no regrowth copies, and a file larger than memory fails here at once
    out.reserve(static_cast<size_t>(file.st.st_size));
  } catch (const std::exception&) {  // bad_alloc or length_error
    std::fclose(f);
    XT_FAIL("cannot read " << path << ": its " << file.st.st_size << " bytes do not fit in memory");
  }
  try {
    // A file larger than memory (or an endless device such as /dev/zero) is one line naming it,
    // not std::bad_alloc.
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  } catch (const std::bad_alloc&) {
    const size_t have = out.size();
    std::fclose(f);
    XT_FAIL("cannot read " << path << ": out of memory after " << have << " bytes (the file does not fit in memory)");
  } catch (const std::length_error&) {
    std::fclose(f);
    XT_FAIL("cannot read " << path << ": larger than the largest string (" << out.max_size() << " bytes)");
  }
  const bool failed = std::ferror(f) != 0;
  const int saved = errno;
  std::fclose(f);
  if (failed) XT_FAIL("cannot read " << path << ": " << std::strerror(saved));
  return out;
}
}  // namespace

RegularFile open_regular_file(const std::string& path, const std::string& what) {
  // A FIFO would block and a device such as /dev/zero never ends: refused by path before opening,
  // and by the descriptor after (what was opened may have been swapped in since the stat).
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) XT_FAIL(what << ": " << std::strerror(errno));
  if (!S_ISREG(st.st_mode)) XT_FAIL(what << ": not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) XT_FAIL(what << ": " << std::strerror(errno));
  return regular_file(fd, what);
}

void for_each_line(std::string_view text, const std::function<void(size_t, std::string_view)>& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(++line_no, line);
  }
}

std::string read_file(const std::string& path) { return read_open_file(open_regular_file(path, "cannot read " + path), path); }

namespace {

std::string this_host() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "unknown-host";
  return std::string(h).substr(0, 64);
}

// parse_temp_name: splits "<host>.<pid>.<16 hex>" (the part after "<base>.tmp."); false otherwise.
bool parse_temp_name(const std::string& rest, std::string* host, long* pid) {
  const size_t r = rest.rfind('.');
  if (r == std::string::npos || rest.size() - r - 1 != 16) return false;
  const size_t p = rest.rfind('.', r - 1);
  if (p == std::string::npos || p == 0 || p + 1 == r) return false;
  const std::string digits = rest.substr(p + 1, r - p - 1);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *host = rest.substr(0, p);
  *pid = std::stol(digits);
  return true;
}

// TempFile: an exclusively created temporary file in the directory `dir_fd`, named
// "<base>.tmp.<host>.<pid>.<random>" and locked (flock) by this writer until it is renamed or
// removed; removed unless keep()'d.
class TempFile {
 public:
  TempFile(int dir_fd, const std::string& base, mode_t mode = 0666) : dir_fd_(dir_fd) {
    std::random_device rd;  // unpredictable names: another user cannot plant the next one
    const std::string stem = base + ".tmp." + this_host() + "." + std::to_string(::getpid()) + ".";
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      char suffix[17];
      std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
      name_ = stem + suffix;
      fd_ = ::openat(dir_fd_, name_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) error_ = std::strerror(errno);
    created_ = fd_ >= 0;  // never unlink a name we did not create
    // Held until close (after the rename): a live writer's file is never taken for debris. Best
    // effort: a file system without flock leaves the file unlocked and it is then never removed.
    if (created_) (void)::flock(fd_, LOCK_EX | LOCK_NB);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !kept_) ::unlinkat(dir_fd_, name_.c_str(), 0);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  const std::string& error() const { return error_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void keep() { kept_ = true; }

 private:
  int dir_fd_;
  int fd_ = -1;
  std::string name_, error_;
  bool created_ = false, kept_ = false;
};

// split_path: the components of a path, without empty ones and ".".
std::deque<std::string> split_path(const std::string& path) {
  std::deque<std::string> parts;
  for (size_t i = 0; i <= path.size();) {
    const size_t j = std::min(path.find('/', i), path.size());
    std::string c = path.substr(i, j - i);
    if (!c.empty() && c != ".") parts.push_back(std::move(c));
    i = j + 1;
  }
  return parts;
}

// join_shown: "dir/name" for messages ("" is the working directory).
std::string join_shown(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// remove_stale_in: remove_stale_temp_files for the file `name` of the directory `dir_fd`.
int remove_stale_in(int dir_fd, const std::string& name) {
  const int rfd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return 0;  // a directory we may search but not list: nothing to clear
  DIR* d = ::fdopendir(rfd);
  if (!d) {
    ::close(rfd);
    return 0;
  }
  const std::string prefix = name + ".tmp.";
  const std::string host = this_host();
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    std::string writer_host;
    long pid = 0;
    if (entry.compare(0, prefix.size(), prefix) != 0 || !parse_temp_name(entry.substr(prefix.size()), &writer_host, &pid))
      continue;
    // 1. written on this host, by another process that no longer exists
    if (writer_host != host || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    // 2. a regular file of ours whose writer's lock is free (a live writer holds it until its rename)
    const int fd = ::openat(::dirfd(d), entry.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st{};
    const bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
    if (ours && ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::unlinkat(::dirfd(d), entry.c_str(), 0) == 0) ++removed;
    ::close(fd);
  }
  ::closedir(d);
  return removed;
}

// has_cap_fowner: the calling thread's effective capabilities include CAP_FOWNER (capget(2); the
// raw system call, as libcap's is a wrapper of it). When capget fails, root is taken to have it.
bool has_cap_fowner() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return ::geteuid() == 0;
  return (data[CAP_TO_INDEX(CAP_FOWNER)].effective & CAP_TO_MASK(CAP_FOWNER)) != 0;
}

}  // namespace

bool may_follow_output_symlink(uid_t link_uid, uid_t euid) { return link_uid == euid || link_uid == 0; }

OutputLocation::OutputLocation(OutputLocation&& o) noexcept
    : dir_fd(std::exchange(o.dir_fd, -1)), dir(std::move(o.dir)), name(std::move(o.name)) {}
OutputLocation::~OutputLocation() {
  if (dir_fd >= 0) ::close(dir_fd);
}
std::string OutputLocation::path() const { return join_shown(dir, name); }

namespace {
// walk_output: locate_output (want_dir false) and open_output_directory (want_dir true) in one walk.
// Each component is opened with O_PATH|O_NOFOLLOW and judged by that descriptor (fstat, readlinkat of
// the descriptor itself), so the object checked is the object used: a name swapped meanwhile is
// never followed unchecked.
OutputLocation walk_output(const std::string& path, const std::string& what, bool want_dir, bool create) {
  constexpr int kMaxSymlinks = 40;  // Linux's MAXSYMLINKS (path_resolution(7))
  auto fail = [&](const std::string& why) { XT_FAIL(what << " " << path << ": " << why); };
  OutputLocation loc;
  auto open_root = [&](bool absolute) {
    if (loc.dir_fd >= 0) ::close(loc.dir_fd);
    loc.dir_fd = ::open(absolute ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (loc.dir_fd < 0) fail(std::string("cannot open ") + (absolute ? "/" : "the working directory") + ": " + std::strerror(errno));
    loc.dir = absolute ? "/" : "";
  };
  open_root(!path.empty() && path[0] == '/');
  std::deque<std::string> rest = split_path(path);
  // "d/", "d/." and "d/..": the kernel takes these for the directory d (or its parent), never a file
  const std::string last_raw = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (!want_dir && (rest.empty() || last_raw.empty() || last_raw == "." || last_raw == ".."))
    fail("names a directory, not a file");
  const uid_t euid = ::geteuid();
  int links = 0;
  while (!rest.empty()) {
    const std::string c = rest.front();
    rest.pop_front();
    const bool last = rest.empty();
    const std::string shown = join_shown(loc.dir, c);
    int fd = ::openat(loc.dir_fd, c.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && last && !want_dir && c != "..") {
      loc.name = c;
      return loc;
    }
    if (fd < 0 && errno == ENOENT && want_dir && create && c != "..") {
      // a missing c that a later ".." leaves again ("nx/../out", "nx/a/../../out"): nothing below it exists,
      // so no link can stand there and the components up to that ".." cancel out; none of them is made
      int depth = 1;
      size_t k = 0;
      while (k < rest.size() && depth > 0) depth += rest[k++] == ".." ? -1 : 1;
      if (depth == 0) {
        rest.erase(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      if (::mkdirat(loc.dir_fd, c.c_str(), 0777) != 0 && errno != EEXIST) fail("cannot create " + shown + ": " + std::strerror(errno));
      fd = ::openat(loc.dir_fd, c.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0 && errno == ENOENT) fail("directory " + shown + " does not exist");
    if (fd < 0) fail(shown + ": " + std::strerror(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
      const int saved = errno;
      ::close(fd);
      fail(shown + ": " + std::strerror(saved));
    }
    if (S_ISLNK(st.st_mode)) {
      std::string target(PATH_MAX, '\0');
      const ssize_t n = ::readlinkat(fd, "", target.data(), target.size());  // this link, not its name's
      ::close(fd);
      if (++links > kMaxSymlinks) fail("too many levels of symbolic links");
      if (!may_follow_output_symlink(st.st_uid, euid))
        fail((shown == path ? std::string("is") : shown + " is") + " a symlink owned by uid " + std::to_string(st.st_uid) +
             ", neither this user (uid " + std::to_string(euid) + ") nor root; not writing through it (give the path it names)");
      if (n < 0 || static_cast<size_t>(n) >= target.size()) fail("cannot resolve the symlink " + shown);
      target.resize(static_cast<size_t>(n));
      std::deque<std::string> parts = split_path(target);
      rest.insert(rest.begin(), parts.begin(), parts.end());
      if (!target.empty() && target[0] == '/') open_root(true);
      if (rest.empty() && !want_dir) fail("the symlink " + shown + " names a directory");
      continue;
    }
    if (last && !want_dir && c != "..") {
      ::close(fd);
      loc.name = c;
      return loc;
    }
    if (!S_ISDIR(st.st_mode)) {
      ::close(fd);
      fail(shown + " is not a directory");
    }
    ::close(loc.dir_fd);
    loc.dir_fd = fd;
    loc.dir = shown;
  }
  if (!want_dir) fail("names a directory, not a file");
  return loc;
}
}  // namespace

OutputLocation locate_output(const std::string& path, const std::string& what) { return walk_output(path, what, false, false); }

OutputLocation open_output_directory(const std::string& path, const std::string& what, bool create) {
  return walk_output(path, what, true, create);
}

OutputLocation OutputLocation::in(const std::string& name) const {
  OutputLocation loc;
  loc.dir_fd = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  XT_CHECK(loc.dir_fd >= 0, "dup of a directory descriptor: " << std::strerror(errno));
  loc.dir = dir;
  loc.name = name;
  return loc;
}

int remove_stale_temp_files(const std::string& path) {
  try {
    const OutputLocation loc = locate_output(path, "");
    return remove_stale_in(loc.dir_fd, loc.name);
  } catch (const Error&) {
    return 0;  // no directory to clear
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what,
                       const std::function<void(size_t)>& written, mode_t create_mode) {
  write_file_atomic(locate_output(path, what), path, bytes, what, written, create_mode);
}

void write_file_atomic(const OutputLocation& loc, const std::string& path, const std::string& bytes,
                       const std::string& what, const std::function<void(size_t)>& written, mode_t create_mode) {
  constexpr size_t kChunkBytes = size_t{64} << 20;  // one write() call at most; a progress report each
  const char* name = loc.name.c_str();
  struct stat st{};
  bool exists = false;
  if (::fstatat(loc.dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) XT_FAIL(what << " " << path << ": exists and is not a regular file; not replacing it");
    exists = true;
  } else if (errno != ENOENT) {
    XT_FAIL(what << " " << path << ": " << std::strerror(errno));
  }
  remove_stale_in(loc.dir_fd, loc.name);  // debris of writers killed before their rename
  TempFile tmp(loc.dir_fd, loc.name, create_mode);
  if (tmp.fd() < 0)
    XT_FAIL(what << " " << path << ": cannot create a temporary file in " << (loc.dir.empty() ? "." : loc.dir) << ": " << tmp.error());
  auto fail = [&](const char* step) { XT_FAIL(what << " " << path << ": " << step << ": " << std::strerror(errno)); };
  // Keep the permission bits of a file of ours that we replace (never set-user/group-ID or sticky
  // bits, and never another user's bits: a world-writable mode planted by them would then be ours);
  // through the descriptor, never through a path.
  if (exists && st.st_uid == ::geteuid() && ::fchmod(tmp.fd(), st.st_mode & 0777) != 0) fail("cannot set the mode");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t k = ::write(tmp.fd(), bytes.data() + done, std::min(kChunkBytes, bytes.size() - done));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail("write failed");
    done += static_cast<size_t>(k);
    if (written) written(done);
  }
  if (::fsync(tmp.fd()) != 0) fail("fsync failed");
  // Renamed while still open and locked, so no other writer takes it for a dead writer's debris.
  if (::renameat(loc.dir_fd, tmp.name().c_str(), loc.dir_fd, name) != 0) fail("rename failed");
  tmp.keep();
  if (tmp.close() != 0) fail("close failed");
  // fsync the directory so the rename itself is durable (best effort: some file systems refuse it).
  const int dfd = ::openat(loc.dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_output_file(const OutputLocation& loc, const std::string& path) {
  const int fd = ::openat(loc.dir_fd, loc.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) XT_FAIL("cannot read " << path << ": " << std::strerror(errno));
  return read_open_file(regular_file(fd, "cannot read " + path), path);
}

namespace {
// Anchor: the deepest existing directory of a path (by device and inode) and the names below it. Two
// spellings of a file not yet created ("x", "./x", "d/../x", a symlinked or bind-mounted directory)
// have the same anchor; weakly_canonical resolves symlinks and ".." in the existing prefix first.
struct Anchor {
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<std::string> below;  // from the file up
  bool operator==(const Anchor& o) const { return dev == o.dev && ino == o.ino && below == o.below; }
};
bool anchor_of(const std::string& path, Anchor* a) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return false;
  std::filesystem::path p = std::filesystem::weakly_canonical(abs, ec);
  if (ec) return false;
  struct stat st{};
  while (::stat(p.c_str(), &st) != 0) {
    if (!p.has_relative_path()) return false;  // nothing of it exists, not even the root
    a->below.push_back(p.filename().string());
    p = p.parent_path();
  }
  a->dev = st.st_dev, a->ino = st.st_ino;
  return true;
}
}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  struct stat sa{}, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  Anchor x, y;
  return anchor_of(a, &x) && anchor_of(b, &y) && x == y;
}

void flush_stdout() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int saved = errno;
  if (!flushed || std::ferror(stdout) || !std::cout.good())
    XT_FAIL("cannot write the standard output: " << (saved ? std::strerror(saved) : "write error"));
}

bool is_non_regular(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

bool replace_forbidden_by_sticky(mode_t dir_mode, uid_t dir_uid, uid_t file_uid, uid_t euid, bool cap_fowner) {
  return (dir_mode & S_ISVTX) != 0 && euid != dir_uid && euid != file_uid && !cap_fowner;
}

void check_writable(const std::string& path, const char* option) {
  if (path.empty()) return;
  const std::string what = option;
  const OutputLocation loc = locate_output(path, what);
  const std::string dir = loc.dir.empty() ? "." : loc.dir;
  struct stat st{}, dst{};
  const bool exists = ::fstatat(loc.dir_fd, loc.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && S_ISDIR(st.st_mode)) XT_FAIL(what << " " << path << " is a directory");
  // A device node or FIFO would be replaced by (or block on) our file: never an output.
  if (exists && !S_ISREG(st.st_mode)) XT_FAIL(what << " " << path << " exists and is not a regular file; not replacing it");
  {  // the temporary file write_file_atomic will create, under its full name (a long name fails now)
    TempFile probe(loc.dir_fd, loc.name);
    if (probe.fd() < 0) XT_FAIL(what << " " << path << ": cannot create files in " << dir << ": " << probe.error());
  }  // removed
  // Creating a file is not enough to replace one: in a sticky directory (/tmp) rename(2) refuses
  // to replace another user's file, and write_file_atomic would fail only after the run.
  if (exists && ::fstat(loc.dir_fd, &dst) == 0 &&
      replace_forbidden_by_sticky(dst.st_mode, dst.st_uid, st.st_uid, ::geteuid(), has_cap_fowner()))
    XT_FAIL(what << " " << path << ": cannot replace it: " << dir
                 << " is a sticky directory and neither it nor the file belongs to this user (uid " << ::geteuid() << ")");
}

}  // namespace xtrain
