// The one JSON reading path (core/json.h) and its readers: nesting deeper than kJsonMaxDepth is one
// error line, never a stack overflow, in every file xtrain parses (config.json, tokenizer.json,
// safetensors headers); error lines show a JSON value's type and a short prefix, never all of it.
// Run under ASan + UBSan by CI's sanitize phase.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <xtrain/core/error.h>
#include "core/json.h"
#include <xtrain/data/tokenizer.h>
#include "error_test_util.h"
#include <xtrain/serve/export.h>
#include <xtrain/serve/safetensors.h>

using namespace xtrain;
using test::error_of;

namespace {

// The depth that crashed the readers: a 600 KB config.json holding a 300,000-deep array.
constexpr int kHostileDepth = 300000;

std::string deep_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

struct Scratch {
  std::filesystem::path path;
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xtrain_json_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("parse_json: nesting is bounded while parsing, at exactly kJsonMaxDepth levels") {
  CHECK(parse_json(deep_array(kJsonMaxDepth), "t").is_array());
  const std::string e = error_of([] { parse_json(deep_array(kJsonMaxDepth + 1), "t"); });
  CHECK(e == "t: not valid JSON (nested deeper than 64 arrays/objects)");
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "{\"k\":";
  CHECK(contains(error_of([&] { parse_json(text + "1" + std::string(1000, '}'), "obj"); }), "obj: not valid JSON (nested"));
  CHECK(contains(error_of([] { parse_json(deep_array(kHostileDepth), "arr"); }), "arr: not valid JSON (nested"));
}

TEST_CASE("parse_json: a syntax error's line is short whatever the input holds") {
  // nlohmann's message quotes the last token read: a 1 MB string with a raw newline in it
  const std::string text = "[\"" + std::string(1 << 20, 'a') + "\n\"]";
  const std::string e = error_of([&] { parse_json(text, "f"); });
  CHECK(contains(e, "f: not valid JSON ("));
  CHECK(e.size() < 400);
  CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("read_json_file: size bound before reading") {
  Scratch d;
  const std::string p = d.write("big.json", "[" + std::string(100, ' ') + "]");
  CHECK(read_json_file(p).is_array());
  CHECK(error_of([&] { read_json_file(p, 50); }) == p + ": 102 bytes is over the 50 byte limit of a JSON file");
}

TEST_CASE("json_echo: type and a short prefix") {
  CHECK(json_echo(nlohmann::json("gpt2")) == "\"gpt2\"");
  CHECK(json_echo(nlohmann::json(std::string(5000, 'x'))) == "\"" + std::string(80, 'x') + "... (5000 bytes)\"");
  CHECK(json_echo(nlohmann::json::parse("[1,2,3]")) == "an array of 3 elements");
  CHECK(json_echo(nlohmann::json::parse("{\"a\":1}")) == "an object of 1 key");
  CHECK(json_echo(nlohmann::json(-7)) == "-7");
}

TEST_CASE("config.json, tokenizer.json and a safetensors header: a hostile depth is one error line") {
  Scratch d;
  d.write("config.json", "{\"model_type\":\"gpt2\",\"vocab_size\":" + deep_array(kHostileDepth) + "}");
  CHECK(error_of([&] { read_model_config(d.path.string()); }) ==
        (d.path / "config.json").string() + ": not valid JSON (nested deeper than 64 arrays/objects)");
  // an unknown tokenizer.json key used to be echoed whole with dump()
  const std::string tok = d.write("tokenizer.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"x\":" +
                                                        deep_array(kHostileDepth) + "}");
  CHECK(contains(error_of([&] { Tokenizer::from_hf_json(tok); }), "tokenizer.json: not valid JSON (nested"));
  // a shallow unknown key of any size is echoed by type and a prefix
  const std::string tok2 = d.write("tok2.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]},\"x\":[" +
                                                    std::string(10, '[') + std::string(10, ']') + "]}");
  const std::string e2 = error_of([&] { Tokenizer::from_hf_json(tok2); });
  CHECK(contains(e2, "tokenizer.x = an array of 1 element is not supported"));
  std::string header = "{\"a\":" + deep_array(kHostileDepth) + "}";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  CHECK(contains(error_of([&] { SafeTensors::parse(file + header, "m"); }), "safetensors m: header: not valid JSON (nested"));
}
