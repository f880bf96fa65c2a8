// DirLock: an exclusive advisory lock (flock) on a lock file, waited for with one line saying so and
// at most a bound, never a silent hang. Serialises writers of one registry, or of one export directory,
// and keeps a second training job off a run's outputs. The holder records its pid and host in the file.
#pragma once

#include <string>

namespace xtrain {

class DirLock {
 public:
  // Opens (creating, mode 0666 minus the umask, never through a symlink: O_NOFOLLOW) the file `name`
  // in the directory dir_fd and takes an exclusive flock on it, polling every 0.1 s; once held, writes
  // "<program> pid <pid> on host <host>" into it, which a process refused or waiting names. After 1 s of
  // waiting, prints "<program>: waiting for <what> <path> (<holder>: <recorded>)" once on stderr. Throws
  // Error "<what> <path>: <strerror>" when the file cannot be opened or locked, and "<what> <path>: held
  // by another process for <max_wait_s> s (<holder>: <recorded>; remove the lock file if none runs)"
  // after max_wait_s. With max_wait_s <= 0 a held lock is refused at once: "<what> <path>: held by
  // <holder> (<recorded>; remove the lock file if none runs)". <recorded> is the holder's line (echoed:
  // core/echo.h), or "no pid recorded" when the holder wrote none (another program's lock). path names
  // the lock file in messages.
  DirLock(int dir_fd, const std::string& name, const std::string& path, const std::string& what,
          const std::string& program, const std::string& holder, double max_wait_s = 600);
  // Removes the lock file, then closes it, which releases the flock (never throws): no lock file is
  // left in the directory; a waiter that locked the removed file sees it is no longer the named one
  // and opens and locks the new one (so only one holder at a time).
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  // recorded: what the holder of the lock file open as fd wrote into it (see the constructor).
  static std::string recorded(int fd);

  int fd_ = -1;
  int dir_fd_ = -1;
  std::string name_;
};

}  // namespace xtrain
