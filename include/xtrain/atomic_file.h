// Atomic file writes: a reader sees the old file or the whole new one, never a partial file.
#pragma once

#include <string>

namespace xtrain {

// write_file_atomic: writes bytes to <path>.tmp.<pid>, fsyncs it, renames it over path and fsyncs
// the directory (POSIX rename is atomic within a file system). On failure the temporary file is
// removed and Error "<path>: <what failed>: <OS error>" is thrown; an existing file is untouched.
void write_file_atomic(const std::string& path, const std::string& bytes);

// read_file: the whole file. Throws Error "<path>: cannot open: <OS error>".
std::string read_file(const std::string& path);

}  // namespace xtrain
