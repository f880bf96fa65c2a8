// MappedFile: a file's bytes mapped read-only, for readers that convert straight from them (the
// safetensors reader) instead of reading the whole file into a heap buffer and copying it again.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xtrain {

// MappedFile: the bytes of a regular file, mapped read-only (mmap PROT_READ, MAP_SHARED: processes
// reading one file share its page-cache pages, and a byte is read from disk when first touched), or
// read into memory where the process may map no more files (ENOMEM: vm.max_map_count). The file must not
// be truncated or rewritten in place while mapped (a read past its new end is SIGBUS): xtrain's writers
// replace a file by rename (write_file_atomic, io.h), which leaves a mapping of the old one intact.
// Move-only; unmapped when the owner goes.
class MappedFile {
 public:
  // map: `path` opened as open_regular_file (io.h) does; throws Error "<what>: <strerror>", "<what>: not
  // a regular file", or "<what>: mmap failed: <strerror>" (e.g. what = "cannot read " + path).
  static MappedFile map(const std::string& path, const std::string& what);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  // bytes: the file's contents (empty for an empty file); valid while this object lives, moves included.
  std::string_view bytes() const { return {data_, size_}; }
  bool mapped() const { return map_ != nullptr; }  // false: read into memory (or empty)

 private:
  void release() noexcept;
  void* map_ = nullptr;
  std::string* copy_ = nullptr;  // the bytes when they could not be mapped (owned; heap, so moves keep data_)
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xtrain
