// Atomic file writes and whole-file reads (include/xtrain/atomic_file.h).
#include "xtrain/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "xtrain/error.h"

namespace xtrain {

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](const char* what, int fd) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    XT_FAIL(path << ": " << what << ": " << std::strerror(e));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    const int e = errno;
    XT_FAIL(path << ": cannot create " << tmp << ": " << std::strerror(e));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t k = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("write failed", fd);
    }
    done += static_cast<size_t>(k);
  }
  if (::fsync(fd) != 0) fail("fsync failed", fd);
  if (::close(fd) != 0) fail("close failed", -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename failed", -1);
  // fsync the directory so that the rename itself survives a crash
  std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) XT_FAIL(path << ": is a directory, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    const int e = errno;
    XT_FAIL(path << ": cannot open: " << std::strerror(e));
  }
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) XT_FAIL(path << ": read failed");
  return s;
}

}  // namespace xtrain
