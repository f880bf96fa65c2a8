// DirLock (see core/lock.h).
#include "core/lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"

namespace xtrain {

DirLock::DirLock(int dir_fd, const std::string& name, const std::string& path, const std::string& what,
                 const std::string& program, const std::string& holder, double max_wait_s) {
  fd_ = ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd_ < 0) XT_FAIL(what << " " << path << ": " << std::strerror(errno));
  const double start = host_seconds();
  bool said = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    if (saved != EWOULDBLOCK && saved != EINTR) {
      ::close(fd_);
      XT_FAIL(what << " " << path << ": " << std::strerror(saved));
    }
    const double waited = host_seconds() - start;
    if (waited > max_wait_s) {
      ::close(fd_);
      XT_FAIL(what << " " << path << ": held by another process for " << max_wait_s << " s (" << holder
                   << "; remove the lock file if none runs)");
    }
    if (!said && waited > 1) {
      std::fprintf(stderr, "%s: waiting for %s %s (%s)\n", program.c_str(), what.c_str(), path.c_str(), holder.c_str());
      said = true;
    }
    ::usleep(100 * 1000);
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace xtrain
