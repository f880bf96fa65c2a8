// input_file: the fuzz input written to `name` in a directory made once per fuzzing process (under
// $TMPDIR, removed at exit), for the readers that take a path (tokenizer files, shards, config.json).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace xtrain::fuzz {

inline const std::string& input_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/xtrain-fuzz-input.XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    static const std::string removed = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removed, ec);
    });
    return tmpl;
  }();
  return dir;
}

inline std::string input_file(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = input_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

}  // namespace xtrain::fuzz
