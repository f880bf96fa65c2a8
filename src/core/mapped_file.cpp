// MappedFile (core/mapped_file.h): mmap of a regular file, read_file where no more mappings are allowed.
#include "core/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <xtrain/core/error.h>
#include "core/io.h"

namespace xtrain {

MappedFile MappedFile::map(const std::string& path, const std::string& what) {
  RegularFile file = open_regular_file(path, what);
  MappedFile m;
  const size_t size = static_cast<size_t>(file.st.st_size);
  if (size == 0) return m;  // mmap refuses a length of 0
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, file.fd.get(), 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err != ENOMEM) XT_FAIL(what << ": mmap failed: " << std::strerror(err));
    m.copy_ = new std::string(read_file(path));  // as MappedTokenCache: no mapping left to take
    m.data_ = m.copy_->data(), m.size_ = m.copy_->size();
    return m;
  }
  // the readers go through the file front to back once: read ahead (a hint; its failure changes nothing)
  ::madvise(p, size, MADV_WILLNEED);
  m.map_ = p, m.data_ = static_cast<const char*>(p), m.size_ = size;
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)), copy_(std::exchange(o.copy_, nullptr)),
      data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    map_ = std::exchange(o.map_, nullptr), copy_ = std::exchange(o.copy_, nullptr);
    data_ = std::exchange(o.data_, nullptr), size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() noexcept {
  if (map_) ::munmap(map_, size_);
  delete copy_;
  map_ = nullptr, copy_ = nullptr, data_ = nullptr, size_ = 0;
}

}  // namespace xtrain
