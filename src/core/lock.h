// DirLock: an exclusive advisory lock (flock) on a lock file, waited for with one line saying so and
// at most a bound, never a silent hang. Serialises writers of one registry, or of one export directory,
// and keeps a second training job off a run's outputs. The holder records its pid and host in the file.
// A file already under the lock's name is used only when it is a lock of ours; anything else there is
// refused and left exactly as it was (never written to, truncated or removed).
#pragma once

#include <string>
#include <string_view>

namespace xtrain {

// is_lock_record: whether `bytes` (a lock file's whole content) is what a DirLock holder leaves:
// nothing, or one line "<program> pid <pid> on host <host>" (program xtrain or xtrain_<word>, pid
// decimal digits, host one word) with or without its newline.
bool is_lock_record(std::string_view bytes);

class DirLock {
 public:
  // Takes an exclusive flock on the file `name` in the directory dir_fd, polling every 0.1 s; once held,
  // writes "<program> pid <pid> on host <host>" into it, which a process refused or waiting names.
  // The file is created when absent (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0666 minus the umask). One that
  // exists is a lock of another run (held) or a stale one, and is used only when it is a regular file of
  // one link whose content is_lock_record; one of another user (opened read-only when it cannot be opened
  // for writing) is waited for while held, never taken over. Throws Error, naming the lock file by `path`:
  //   "<what> <path>: exists and is not an xtrain lock file (remove it or choose another output name)"
  //     for a symlink, FIFO, device, directory, a file with other hard links or other content;
  //   "<what> <path>: a stale lock owned by uid <u>, not this user (uid <me>): remove it as its owner or
  //     root, or choose another output name";
  //   "<what> <path>: a stale lock that cannot be opened for writing (<strerror>): remove it ...";
  //   "<what> <path>: <strerror>" when the file cannot be created, opened or locked;
  //   "<what> <path>: held by another process for <max_wait_s> s (<holder>: <recorded>; remove the lock
  //     file if none runs)" after max_wait_s, having printed "<program>: waiting for <what> <path>
  //     (<holder>: <recorded>)" once on stderr after 1 s; with max_wait_s <= 0 a held lock is refused at
  //     once: "<what> <path>: held by <holder> (<recorded>; remove the lock file if none runs)".
  // <recorded> is the holder's line (echoed: core/echo.h), or "no pid recorded" when the holder wrote none.
  // A refused file is left as it was; a file this constructor created and could not lock is removed.
  DirLock(int dir_fd, const std::string& name, const std::string& path, const std::string& what,
          const std::string& program, const std::string& holder, double max_wait_s = 600);
  // Removes the lock file (only while its name still names the file this lock holds), then closes it,
  // which releases the flock (never throws): no lock file is left in the directory; a waiter that locked
  // the removed file sees it is no longer the named one and opens and locks the new one (so only one
  // holder at a time).
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
