// DirLock (see core/lock.h).
#include "core/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <xtrain/core/clock.h>
#include <xtrain/core/error.h>

namespace xtrain {

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
        ::close(fd_), ::close(dir_fd_);
        XT_FAIL(what << " " << path << ": held by " << holder << " (remove the lock file if none runs)");
      }
      if (waited > max_wait_s) {
        ::close(fd_), ::close(dir_fd_);
        XT_FAIL(what << " " << path << ": held by another process for " << max_wait_s << " s (" << holder
                     << "; remove the lock file if none runs)");
      }
      if (!said && waited > 1) {
        std::fprintf(stderr, "%s: waiting for %s %s (%s)\n", program.c_str(), what.c_str(), path.c_str(), holder.c_str());
        said = true;
      }
      ::usleep(100 * 1000);
    }
    // the holder before us removes the file as it releases it: the lock counts only while our file is
    // still the one under that name (else open the new one and lock again)
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::fstatat(dir_fd_, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      return;
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
