// ScratchDir: the unit tests' scratch directory, a fresh one under the system temp dir removed with
// everything in it; standard C++ and POSIX only, so a test of any layer (core's included) may use it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <iterator>
#include <stdexcept>
#include <string>

namespace xtrain::test {

struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xtrain_test_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path = tmpl;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // entries: how many names the directory holds (a writer's leftovers show here)
  size_t entries() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
  }
};

}  // namespace xtrain::test
