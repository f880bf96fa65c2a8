// File helpers (see include/xtrain/io.h).
#include "xtrain/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "xtrain/error.h"

namespace xtrain {

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  // FNV-1a: xor the byte in, then multiply by the 64-bit FNV prime 2^40 + 2^8 + 0xb3.
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) XT_FAIL("cannot read " << path << ": " << std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int saved = errno;
  std::fclose(f);
  if (failed) XT_FAIL("cannot read " << path << ": " << std::strerror(saved));
  return out;
}

namespace {

// TempFile: an exclusively created temporary file, removed unless release()d.
class TempFile {
 public:
  explicit TempFile(const std::string& dir, const std::string& base) {
    std::random_device rd;  // unpredictable names: another user cannot plant the next one
    for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
      char suffix[17];
      std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
      path_ = dir + "/" + base + ".tmp." + suffix;
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) error_ = std::strerror(errno);
    created_ = fd_ >= 0;  // never unlink a name we did not create
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (created_ && !kept_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }
  int close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }
  void keep() { kept_ = true; }

 private:
  int fd_ = -1;
  std::string path_, error_;
  bool created_ = false, kept_ = false;
};

}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes, const std::string& what) {
  namespace fs = std::filesystem;
  std::string target = path;
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (!real) XT_FAIL(what << " " << path << ": cannot resolve the symlink: " << std::strerror(errno));
    target = real;
    std::free(real);
  }
  bool exists = false;
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) XT_FAIL(what << " " << path << ": exists and is not a regular file; not replacing it");
    exists = true;
  } else if (errno != ENOENT) {
    XT_FAIL(what << " " << path << ": " << std::strerror(errno));
  }
  const fs::path tp(target);
  const std::string dir = tp.has_parent_path() ? tp.parent_path().string() : ".";
  TempFile tmp(dir, tp.filename().string());
  if (tmp.fd() < 0) XT_FAIL(what << " " << path << ": cannot create a temporary file in " << dir << ": " << tmp.error());
  auto fail = [&](const char* step) { XT_FAIL(what << " " << path << ": " << step << ": " << std::strerror(errno)); };
  // Keep the mode of the file we replace; through the descriptor, never through a path.
  if (exists && ::fchmod(tmp.fd(), st.st_mode & 07777) != 0) fail("cannot set the mode");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t k = ::write(tmp.fd(), bytes.data() + done, bytes.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail("write failed");
    done += static_cast<size_t>(k);
  }
  if (::fsync(tmp.fd()) != 0) fail("fsync failed");
  if (tmp.close() != 0) fail("close failed");
  if (::rename(tmp.path().c_str(), target.c_str()) != 0) fail("rename failed");
  tmp.keep();
  // fsync the directory so the rename itself is durable (best effort: some file systems refuse it).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  struct stat sa{}, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

bool is_non_regular(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

}  // namespace xtrain
