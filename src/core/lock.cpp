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

#include "core/echo.h"
#include <xtrain/core/clock.h>
#include <xtrain/core/error.h>

namespace xtrain {

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
  const double start = host_seconds();
  bool said = false;
  for (;;) {
    fd_ = ::openat(dir_fd_, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0) {
      const int saved = errno;
      ::close(dir_fd_);
      XT_FAIL(what << " " << path << ": " << std::strerror(saved));
    }
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int saved = errno;
      if (saved != EWOULDBLOCK && saved != EINTR) {
        ::close(fd_), ::close(dir_fd_);
        XT_FAIL(what << " " << path << ": " << std::strerror(saved));
      }
      const double waited = host_seconds() - start;
      if (max_wait_s <= 0) {  // not waited for: refused at once
        const std::string who = recorded(fd_);
        ::close(fd_), ::close(dir_fd_);
        XT_FAIL(what << " " << path << ": held by " << holder << " (" << who << "; remove the lock file if none runs)");
      }
      if (waited > max_wait_s) {
        const std::string who = recorded(fd_);
        ::close(fd_), ::close(dir_fd_);
        XT_FAIL(what << " " << path << ": held by another process for " << max_wait_s << " s (" << holder << ": "
                     << who << "; remove the lock file if none runs)");
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
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::fstatat(dir_fd_, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      // who holds it, for the messages of the processes refused or waiting (best effort: the lock
      // holds without it)
      char host[256] = "?";
      if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
      host[sizeof host - 1] = '\0';
      const std::string line = program + " pid " + std::to_string(::getpid()) + " on host " + host + "\n";
      if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, line.data(), line.size(), 0);
      return;
    }
    ::close(fd_);
    fd_ = -1;
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) {
    ::unlinkat(dir_fd_, name_.c_str(), 0);  // while still held: no lock file is left behind
    ::close(fd_);
  }
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

}  // namespace xtrain
