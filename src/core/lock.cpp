// DirLock (see core/lock.h).
#include "core/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <string>
#include <string_view>

#include "core/echo.h"
#include <xtrain/core/clock.h>
#include <xtrain/core/error.h>

namespace xtrain {

namespace {

// kMaxRecordBytes: a lock file longer than this is not one of ours (its one line names a program, a
// pid and a host name of at most 255 bytes).
constexpr size_t kMaxRecordBytes = 512;

// take_word: the bytes of s before its first space or end, removed from s.
std::string_view take_word(std::string_view& s) {
  const size_t end = s.find(' ');
  const std::string_view word = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return word;
}

bool take_prefix(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// is_our_lock_file: fd is a regular file of one link whose content is_lock_record.
bool is_our_lock_file(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_size > static_cast<off_t>(kMaxRecordBytes))
    return false;
  char buf[kMaxRecordBytes + 1];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  return n >= 0 && is_lock_record(std::string_view(buf, static_cast<size_t>(n)));
}

// still_named: fd is the file `name` in dir_fd (not one removed, or replaced, since it was opened).
bool still_named(int fd, int dir_fd, const std::string& name) {
  struct stat held{}, named{};
  return ::fstat(fd, &held) == 0 && ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

}  // namespace

bool is_lock_record(std::string_view bytes) {
  if (bytes.empty()) return true;  // created, its line not yet written (or a holder that died before)
  if (bytes.back() == '\n') bytes.remove_suffix(1);
  const std::string_view program = take_word(bytes);
  bool named = program == "xtrain";
  if (program.size() > 7 && program.substr(0, 7) == "xtrain_") {
    named = true;
    for (char c : program.substr(7)) named = named && ((c >= 'a' && c <= 'z') || c == '_');
  }
  if (!named || !take_prefix(bytes, " pid ")) return false;
  const std::string_view pid = take_word(bytes);
  if (pid.empty() || pid.size() > 10 || pid.find_first_not_of("0123456789") != std::string_view::npos) return false;
  if (!take_prefix(bytes, " on host ") || bytes.empty()) return false;
  for (char c : bytes)
    if (static_cast<unsigned char>(c) <= ' ' || c == '\x7f') return false;  // one word: no space, newline or control byte
  return true;
}

std::string DirLock::recorded(int fd) {
  // The holder writes its line right after taking the lock: a file still empty is read again for up to
  // 0.5 s, so a job refused within milliseconds of the holder's start names it too.
  char buf[256];
  for (int tries = 0;; ++tries) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    if (n > 0) {
      std::string line(buf, static_cast<size_t>(n));
      if (const size_t nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
      return echo_value(line);
    }
    if (tries == 5) return "no pid recorded";
    ::usleep(100 * 1000);
  }
}

DirLock::DirLock(int dir_fd, const std::string& name, const std::string& path, const std::string& what,
                 const std::string& program, const std::string& holder, double max_wait_s)
    : name_(name) {
  dir_fd_ = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);  // kept to remove the file at the release
  if (dir_fd_ < 0) XT_FAIL(what << " " << path << ": " << std::strerror(errno));
  // refuse: closes what is open (the file stays as it was: a refused file is never written or removed)
  // and throws "<what> <path>: <why>"
  const auto refuse = [&](const std::string& why) {
    if (fd_ >= 0) ::close(fd_);
    ::close(dir_fd_);
    fd_ = dir_fd_ = -1;
    XT_FAIL(what << " " << path << ": " << why);
  };
  const std::string not_ours = "exists and is not an xtrain lock file (remove it or choose another output name)";
  const double start = host_seconds();
  bool said = false;
  for (;;) {
    // Created by this process (O_EXCL), or an existing file checked before anything is written to it:
    // a regular file (never a symlink, FIFO or device: not even opened) of one link holding a lock record.
    bool created = false, writable = true;
    int open_errno = 0;
    fd_ = ::openat(dir_fd_, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      created = true;
    } else {
      if (errno != EEXIST) refuse(std::strerror(errno));
      struct stat st{};
      if (::fstatat(dir_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // its holder removed it since: create it
        refuse(std::strerror(errno));
      }
      if (!S_ISREG(st.st_mode)) refuse(not_ours);
      fd_ = ::openat(dir_fd_, name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      if (fd_ < 0 && (errno == EACCES || errno == EPERM)) {
        // another user's lock (or a read-only one): a flock needs no write access, so whether a run
        // holds it is still known
        open_errno = errno, writable = false;
        fd_ = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
      }
      if (fd_ < 0) {
        if (errno == ENOENT) continue;
        refuse(errno == ELOOP ? not_ours : std::strerror(errno));
      }
      if (!is_our_lock_file(fd_)) refuse(not_ours);
    }
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int saved = errno;
      if (saved != EWOULDBLOCK && saved != EINTR) {
        if (created && still_named(fd_, dir_fd_, name)) ::unlinkat(dir_fd_, name.c_str(), 0);  // the empty file made above
        refuse(std::strerror(saved));
      }
      const double waited = host_seconds() - start;
      if (max_wait_s <= 0)  // not waited for: refused at once
        refuse("held by " + holder + " (" + recorded(fd_) + "; remove the lock file if none runs)");
      if (waited > max_wait_s) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", max_wait_s);
        refuse("held by another process for " + std::string(secs) + " s (" + holder + ": " + recorded(fd_) +
               "; remove the lock file if none runs)");
      }
      if (!said && waited > 1) {
        std::fprintf(stderr, "%s: waiting for %s %s (%s: %s)\n", program.c_str(), what.c_str(), path.c_str(),
                     holder.c_str(), recorded(fd_).c_str());
        said = true;
      }
      ::usleep(100 * 1000);
    }
    // the holder before us removes the file as it releases it: the lock counts only while our file is
    // still the one under that name (else open the new one and lock again)
    if (!still_named(fd_, dir_fd_, name)) {
      ::close(fd_);
      fd_ = -1;
      continue;
    }
    if (!created) {  // a stale lock, taken over only when it is this user's (checked again, now held)
      struct stat st{};
      if (!is_our_lock_file(fd_) || ::fstat(fd_, &st) != 0) refuse(not_ours);
      if (st.st_uid != ::geteuid())
        refuse("a stale lock owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " + std::to_string(::geteuid()) +
               "): remove it as its owner or root, or choose another output name");
      if (!writable)
        refuse("a stale lock that cannot be opened for writing (" + std::string(std::strerror(open_errno)) +
               "): remove it or choose another output name");
    }
    // who holds it, for the messages of the processes refused or waiting (best effort: the lock
    // holds without it)
    char host[256] = "?";
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    const std::string line = program + " pid " + std::to_string(::getpid()) + " on host " + host + "\n";
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, line.data(), line.size(), 0);
    return;
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) {
    // while still held: no lock file is left behind; and only the file this lock holds (a file put
    // under the name since is not ours to remove)
    if (still_named(fd_, dir_fd_, name_)) ::unlinkat(dir_fd_, name_.c_str(), 0);
    ::close(fd_);
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

}  // namespace xtrain
