// tiktoken-format tokenizers: rank-file errors and the --tokenizer options always; with --vectors,
// exact ids against the reference vectors of tests/vectors/make_tokenizer_vectors.py (tiktoken
// itself) for each encoding whose rank file ($XTRAIN_DATA_DIR/tokenizers) and vector file
// ($XTRAIN_TOKENIZER_VECTORS, default tests/vectors) are both present; with --hf-vectors, the same for
// the tokenizer.json files (`tokenizers` itself); exits 77 (skipped) when none is.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include <xtrain/core/data_dir.h>
#include <xtrain/core/error.h>
#include "core/io.h"
#include "data/bpe.h"
#include "data/tiktoken.h"
#include "data/tokenizer_options.h"
#include "error_test_util.h"
#include "test_tokenizer_util.h"

namespace xt = xtrain;
using xtrain::test::error_of;

namespace {

std::string write(const xt::test::ScratchDir& d, const std::string& name, const std::string& text) {
  std::ofstream(d.file(name), std::ios::binary) << text;
  return d.file(name);
}

}  // namespace

TEST_CASE("base64: RFC 4648 test vectors, canonical padding only") {
  std::string out;
  const std::pair<const char*, const char*> ok[] = {{"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"},
                                                    {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"}, {"Zm9vYmFy", "foobar"}};
  for (const auto& [in, want] : ok) {
    CHECK(xt::decode_base64(in, &out));
    CHECK(out == want);
  }
  for (const char* bad : {"", "Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm 9", "Zm9v\r", "Zm-_"}) CHECK_FALSE(xt::decode_base64(bad, &out));
}

TEST_CASE("rank files: gaps allowed, every malformed line refused with file:line") {
  xt::test::ScratchDir d;
  // "IQ==" = "!", "Ig==" = "\"", "ISI=" = "!\""
  const auto ranks = xt::read_tiktoken_ranks(write(d, "ok.tiktoken", "IQ== 0\n\nISI= 3\nIg== 1\n"));
  REQUIRE(ranks.size() == 4);
  CHECK(ranks[0] == "!");
  CHECK(ranks[1] == "\"");
  CHECK(ranks[2].empty());  // skipped rank: unassigned id
  CHECK(ranks[3] == "!\"");
  const std::pair<const char*, const char*> bad[] = {
      {"IQ== 0\nIg== 0\n", "bad.tiktoken:2: rank 0 appears twice"},
      {"IQ== 0\nIQ== 1\n", "bad.tiktoken:2: token IQ== appears twice (first on line 1)"},
      {"IQ== 0\nI*== 1\n", "bad.tiktoken:2: \"I*==\" is not base64"},
      {"IQ==0\n", "bad.tiktoken:1: expected \"<base64 token> <rank>\""},
      {"IQ== 0 1\n", "bad.tiktoken:1: expected"},
      {"IQ== -1\n", "bad.tiktoken:1: rank \"-1\" is not an integer"},
      {"IQ== 99999999\n", "bad.tiktoken:1: rank 99999999 is above 16777216"},
      {"\n\n", "bad.tiktoken: no ranks (empty rank file)"},
  };
  for (const auto& entry : bad) {  // not a structured binding: clang 14 cannot capture one in the lambda
    const char* text = entry.first;
    const char* want = entry.second;
    const std::string msg = error_of([&] { xt::read_tiktoken_ranks(write(d, "bad.tiktoken", text)); });
    INFO(text);
    CHECK(msg.find(want) != std::string::npos);
  }
}

TEST_CASE("from_tiktoken: a rank file of the wrong size or an unknown name is refused by name") {
  xt::test::ScratchDir d;
  const std::string f = write(d, "small.tiktoken", "IQ== 0\nIg== 1\n");
  CHECK(error_of([&] { xt::Tokenizer::from_tiktoken(f, "cl100k_base"); }).find("2 ranks, but cl100k_base has 100256") !=
        std::string::npos);
  CHECK(error_of([&] { xt::Tokenizer::from_tiktoken(f, "cl100k"); }) ==
        "--tokenizer cl100k: unknown tokenizer (known: gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base, llama3)");
}

// base64: RFC 4648 with padding (the test writes rank files with it; decode_base64 reads them back).
std::string base64(const std::string& in) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint8_t(in[i + 2]);
    out += abc[v >> 18], out += abc[(v >> 12) & 63];
    out += i + 1 < in.size() ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? abc[v & 63] : '=';
  }
  return out;
}

TEST_CASE("rank files: a gap is allowed only at a special token's id (p50k_base's 50256 is <|endoftext|>)") {
  xt::test::ScratchDir d;
  // 50280 ranks (p50k_base's count): ids 0..50280 without 50256 and, when `gap` is set, 0..50281
  // without 50256 and `gap`; rank r >= 256 is a distinct 3-byte token.
  auto p50k_like = [&](size_t gap) {
    std::string text;
    for (size_t r = 0; r <= (gap ? 50281u : 50280u); ++r) {
      if ((gap && r == gap) || r == 50256) continue;
      const std::string tok = r < 256 ? std::string(1, char(r)) : std::string{'\x01', char(r >> 8), char(r & 0xff)};
      text += base64(tok) + " " + std::to_string(r) + "\n";
    }
    return write(d, "p50k_gap" + std::to_string(gap) + ".tiktoken", text);
  };
  CHECK(base64("ab") == "YWI=");
  const auto ok = xt::Tokenizer::from_tiktoken(p50k_like(0), "p50k_base");
  CHECK(ok.eot_id() == 50256);
  CHECK(ok.vocab_size() == 50281);
  CHECK(ok.encode("<|endoftext|>") == std::vector<int32_t>{50256});
  // The same count of ranks with a second gap: id 100 would have no token (a count alone misses it).
  const std::string f = p50k_like(100);
  CHECK(error_of([&] { xt::Tokenizer::from_tiktoken(f, "p50k_base"); }) ==
        f + ": rank 100 is missing, and p50k_base has no special token with that id (damaged rank file?)");
}

// The Merger finds every split of every token, work quadratic in a token's length (a 64 KiB token took
// 1.7 s, 1 MiB over a minute): a token longer than kMaxTokenBytes is refused by file:line as it is read.
TEST_CASE("rank files: a token longer than kMaxTokenBytes is refused; a NUL byte in a line is echoed escaped") {
  xt::test::ScratchDir d;
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  const std::string longest(xt::bpe::kMaxTokenBytes, 'a');
  CHECK(xt::read_tiktoken_ranks(write(d, "longest.tiktoken", text + base64(longest) + " 256\n"))[256] == longest);
  const std::string f = write(d, "long.tiktoken", text + base64(std::string(64 << 10, 'a')) + " 256\n");
  CHECK(error_of([&] { xt::read_tiktoken_ranks(f); }) ==
        f + ":257: a token of 65536 bytes; at most " + std::to_string(xt::bpe::kMaxTokenBytes) +
            " are read (the longest of the real rank files has 128)");
  // the line's bytes are quoted escaped, so a NUL cannot cut the message where a C string ends
  const std::string nul = write(d, "nul.tiktoken", text + std::string("IQ\0= 256\n", 9));
  CHECK(error_of([&] { xt::read_tiktoken_ranks(nul); }) == nul + ":257: \"IQ\\x00=\" is not base64");
  const std::string rank = write(d, "rank.tiktoken", text + std::string("YWI= 2\0\n", 8));
  CHECK(error_of([&] { xt::read_tiktoken_ranks(rank); }) == rank + ":257: rank \"2\\x00\" is not an integer in 0..999999999");
}

TEST_CASE("--tokenizer options: names, default rank file, conflicts") {
  const auto parse = xt::test::parse_tokenizer_options;
  xt::TokenizerFiles f;
  parse({"--tokenizer", "o200k_base"}, f);
  CHECK(xt::tokenizer_ranks_path(f) == xt::default_data_file("tokenizers/o200k_base.tiktoken"));
  xt::TokenizerFiles g;
  parse({"--tokenizer", "llama3", "--tokenizer-ranks", "/x/tokenizer.model"}, g);
  CHECK(xt::tokenizer_ranks_path(g) == "/x/tokenizer.model");
  xt::TokenizerFiles h;
  parse({}, h);
  CHECK(xt::tokenizer_ranks_path(h).empty());  // gpt2: the encoder.json/vocab.bpe pair
  xt::TokenizerFiles e;
  CHECK_THROWS_AS(parse({"--tokenizer", "nope"}, e), xt::UsageError);
  CHECK_THROWS_AS(parse({"--tokenizer", "cl100k_base", "--tokenizer-json", "t.json"}, e), xt::UsageError);
  CHECK_THROWS_AS(parse({"--tokenizer", "cl100k_base", "--vocab-bpe", "v.bpe"}, e), xt::UsageError);
  CHECK_THROWS_AS(parse({"--tokenizer-ranks", "r.tiktoken"}, e), xt::UsageError);
  xt::TokenizerFiles m;
  m.tokenizer = "cl100k_base";
  m.tokenizer_ranks = "/nonexistent/cl100k_base.tiktoken";
  // a missing input file is exit 1 (Error, not UsageError); given, it is named as the option given
  CHECK_THROWS_AS(xt::load_tokenizer(m), xt::Error);
  try {
    xt::load_tokenizer(m);
  } catch (const xt::UsageError&) {
    FAIL("a missing --tokenizer-ranks file is a usage error");
  } catch (const xt::Error& e) {
    CHECK(std::string(e.what()).find("--tokenizer-ranks /nonexistent/cl100k_base.tiktoken: no such file") != std::string::npos);
  }
  xt::TokenizerFiles d;  // the default file missing: the way to get it
  d.tokenizer = "cl100k_base";
  if (!std::filesystem::exists(xt::tokenizer_ranks_path(d))) {
    CHECK(error_of([&] { xt::load_tokenizer(d); }).find("is missing (run scripts/setup.sh --tokenizers") != std::string::npos);
  }
}

// check_vectors: every case of the vector file `vec` against `tok`, and decode(encode(x)) == x when
// `round_trip` (not for tokenizer.json files: a normalizer and a post-processor change the text);
// returns the number of mismatches.
int check_vectors(const std::string& name, const xt::Tokenizer& tok, const nlohmann::json& j, bool round_trip) {
    int bad = 0;
    size_t n_ids = 0;
    for (const auto& c : j.at("cases")) {
      const std::string text = c.at("text").get<std::string>();
      const auto want = c.at("ids").get<std::vector<int32_t>>();
      const auto got = tok.encode(text);
      n_ids += want.size();
      if (got != want && bad++ < 3) std::printf("%s: MISMATCH on %s\n", name.c_str(), nlohmann::json(text).dump().c_str());
      if (round_trip && tok.decode(got) != text && bad++ < 3) std::printf("%s: decode(encode(x)) != x on %s\n", name.c_str(), nlohmann::json(text).dump().c_str());
    }
    std::printf("%s: %zu cases, %zu ids, %d mismatches (reference: %s)\n", name.c_str(), j.at("cases").size(), n_ids, bad,
                j.value("made_by", "?").c_str());
    return bad;
}

std::filesystem::path vector_dir() {
  const char* v = std::getenv("XTRAIN_TOKENIZER_VECTORS");
  return v ? v : XTRAIN_TEST_VECTORS_DIR;
}
std::filesystem::path data_dir() {
  const char* r = std::getenv("XTRAIN_DATA_DIR");
  return r ? r : xtrain::default_data_dir().path;
}

// run_vectors: each tests/vectors/tiktoken_<name>.json against its rank file; returns 0 (all equal),
// 1 (a mismatch, printed), 77 (no encoding had both files).
int run_vectors() {
  const std::filesystem::path rank_dir = data_dir() / "tokenizers";
  int checked = 0, failed = 0;
  for (const std::string& name : xt::tiktoken_names()) {
    const auto vec = vector_dir() / ("tiktoken_" + name + ".json");
    const auto ranks = rank_dir / (name == "p50k_edit" ? "p50k_base.tiktoken" : name + ".tiktoken");
    if (!std::filesystem::exists(vec) || !std::filesystem::exists(ranks)) {
      std::printf("%s: skipped (%s or %s missing)\n", name.c_str(), vec.c_str(), ranks.c_str());
      continue;
    }
    const auto tok = xt::Tokenizer::from_tiktoken(ranks.string(), name);
    failed += check_vectors(name, tok, nlohmann::json::parse(xt::read_file(vec.string())), true) > 0;
    ++checked;
  }
  return failed ? 1 : checked ? 0 : 77;
}

// run_hf_vectors: each tests/vectors/hf_<name>.json against its tokenizer.json (scripts/setup.sh
// --tokenizers puts them under data/tokenizers; GPT-2's is in $XTRAIN_SHARED_DATA), which must be the
// file the vectors were made from (its sha256); returns as run_vectors.
int run_hf_vectors() {
  const char* shared = std::getenv("XTRAIN_SHARED_DATA");
  const std::pair<std::string, std::filesystem::path> files[] = {
      {"gpt2", std::filesystem::path(shared ? shared : "/nonexistent") / "gpt2" / "tokenizer.json"},
      {"llama3", data_dir() / "tokenizers" / "llama3_1" / "tokenizer.json"},
      {"qwen2", data_dir() / "tokenizers" / "qwen2_5" / "tokenizer.json"},
      {"qwen3", data_dir() / "tokenizers" / "qwen3" / "tokenizer.json"},
  };
  int checked = 0, failed = 0;
  for (const auto& [name, file] : files) {
    const auto vec = vector_dir() / ("hf_" + name + ".json");
    if (!std::filesystem::exists(vec) || !std::filesystem::exists(file)) {
      std::printf("%s: skipped (%s or %s missing)\n", name.c_str(), vec.c_str(), file.c_str());
      continue;
    }
    const auto j = nlohmann::json::parse(xt::read_file(vec.string()));
    const std::string sha = xt::sha256_hex(xt::read_file(file.string()));
    if (sha != j.value("source_sha256", "")) {
      std::printf("%s: %s has sha256 %s, but the vectors were made from %s\n", name.c_str(), file.c_str(), sha.c_str(),
                  j.value("source_sha256", "?").c_str());
      ++failed;
      continue;
    }
    failed += check_vectors(name, xt::Tokenizer::from_hf_json(file.string()), j, false) > 0;
    ++checked;
  }
  return failed ? 1 : checked ? 0 : 77;
}

// run_export_vectors: each tokenizer an export writes as tokenizer.json (GPT-2's files, every tiktoken
// encoding, a tokenizer.json) written by hf_tokenizer_json and read back by from_hf_json must give the
// reference ids of its vector file, special tokens included, and decode them back to the text; GPT-2's
// and a tokenizer.json's keep their fingerprint (the same vocabulary, merges and pipeline). Returns as
// run_vectors.
int run_export_vectors() {
  const char* shared = std::getenv("XTRAIN_SHARED_DATA");
  const std::filesystem::path gpt2 = std::filesystem::path(shared ? shared : "/nonexistent") / "gpt2";
  struct Case {
    std::string name, vectors;
    std::filesystem::path file;
  };
  std::vector<Case> cases = {{"gpt2", "hf_gpt2.json", gpt2 / "encoder.json"},
                             {"qwen2", "hf_qwen2.json", data_dir() / "tokenizers" / "qwen2_5" / "tokenizer.json"}};
  for (const std::string& name : xt::tiktoken_names())
    if (name != "p50k_edit")  // p50k_base's ranks with more specials: p50k_base covers the ranks
      cases.push_back({name, "tiktoken_" + name + ".json", data_dir() / "tokenizers" / (name + ".tiktoken")});
  xt::test::ScratchDir d;
  int checked = 0, failed = 0;
  for (const Case& c : cases) {
    const auto vec = vector_dir() / c.vectors;
    if (!std::filesystem::exists(vec) || !std::filesystem::exists(c.file)) {
      std::printf("%s: skipped (%s or %s missing)\n", c.name.c_str(), vec.c_str(), c.file.c_str());
      continue;
    }
    const xt::Tokenizer orig = c.name == "gpt2"    ? xt::Tokenizer::from_gpt2_files(c.file.string(), (gpt2 / "vocab.bpe").string())
                               : c.name == "qwen2" ? xt::Tokenizer::from_hf_json(c.file.string())
                                                   : xt::Tokenizer::from_tiktoken(c.file.string(), c.name);
    const std::string json_file = write(d, c.name + ".json", orig.hf_tokenizer_json());
    const xt::Tokenizer back = xt::Tokenizer::from_hf_json(json_file);
    int bad = check_vectors(c.name + " (exported tokenizer.json)", back, nlohmann::json::parse(xt::read_file(vec.string())),
                            c.name != "qwen2");
    if (back.vocab_size() != orig.vocab_size() && ++bad)
      std::printf("%s: %d ids read back, %d written\n", c.name.c_str(), back.vocab_size(), orig.vocab_size());
    const bool same_fingerprint = orig.kind() != xt::Tokenizer::Kind::Tiktoken;
    if (same_fingerprint && back.fingerprint() != orig.fingerprint() && ++bad)
      std::printf("%s: fingerprint %s read back, %s written\n", c.name.c_str(), xt::hex64(back.fingerprint()).c_str(),
                  xt::hex64(orig.fingerprint()).c_str());
    failed += bad > 0;
    ++checked;
  }
  return failed ? 1 : checked ? 0 : 77;
}

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--export-vectors") == 0) {
    try {
      return run_export_vectors();
    } catch (const std::exception& e) {
      std::printf("error: %s\n", e.what());
      return 1;
    }
  }
  if (argc == 2 && (std::strcmp(argv[1], "--vectors") == 0 || std::strcmp(argv[1], "--hf-vectors") == 0)) {
    try {
      return std::strcmp(argv[1], "--vectors") == 0 ? run_vectors() : run_hf_vectors();
    } catch (const std::exception& e) {
      std::printf("error: %s\n", e.what());
      return 1;
    }
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
