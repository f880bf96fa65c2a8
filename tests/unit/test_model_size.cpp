// Sizes checked before memory is taken or bytes are read: a config.json that asks for terabytes is
// one line against the host's available memory (not std::bad_alloc), and a model.safetensors whose
// size is not what its header describes is refused before it is read.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <xtrain/core/error.h>
#include "core/host_memory.h"
#include "error_test_util.h"
#include <xtrain/serve/export.h>
#include <xtrain/serve/safetensors.h>

using namespace xtrain;
using test::error_of;

namespace {

struct Scratch {
  std::filesystem::path path;
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xtrain_size_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Scratch() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream((path / name).string(), std::ios::binary) << bytes;
    return (path / name).string();
  }
};
}  // namespace

TEST_CASE("available_host_memory_bytes: a figure between 1 MB and 1 PB on a Linux host") {
  const size_t avail = available_host_memory_bytes();
  CHECK(avail > (size_t(1) << 20));
  CHECK(avail < (size_t(1) << 50));
}

TEST_CASE("config.json asking for more memory than the host has: one line, nothing allocated") {
  Scratch d;
  // ~850 TB of fp32 parameters, every size within xtrain's limits
  d.write("config.json", R"({"model_type":"xtrain-gpt","vocab_size":65536,"n_positions":1024,"n_embd":65536,)"
                         R"("n_layer":4096,"n_head":512,"n_kv_head":512,"head_dim":128,"n_inner":262144})");
  const std::string e = error_of([&] { load_model_dir(d.path.string()); });
  CHECK(e.find(": loading the model needs ") != std::string::npos);
  CHECK(e.find("GB of host memory") != std::string::npos);
}

TEST_CASE("model.safetensors larger than its header describes: refused before reading") {
  Scratch d;
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  const std::string path = d.write("m.safetensors", file + header + std::string(8, '\0') + std::string(1 << 20, 'x'));
  CHECK(error_of([&] { SafeTensors::read(path); }) ==
        "safetensors " + path + ": 1048576 trailing bytes: the file has " + std::to_string(8 + n + 8 + (1 << 20)) +
            " bytes, its header describes " + std::to_string(8 + n + 8) + " (8 + a header of " + std::to_string(n) +
            " + tensor data of 8); not reading it");
  const std::string ok = d.write("ok.safetensors", file + header + std::string(8, '\0'));
  CHECK(SafeTensors::read(ok).entries().size() == 1);
}
