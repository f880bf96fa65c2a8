// Tokenizer table cache (src/data/tokenizer_cache.h): a miss builds and writes the entry, a hit restores
// a tokenizer that encodes, decodes and fingerprints as the built one (GPT-2's files, a tiktoken rank file,
// a tokenizer.json with its pipeline read again by the file's own reader); other source bytes are another
// entry; a damaged, truncated, foreign, older-format or other user's entry is ignored and rebuilt (never
// trusted), and a payload with a field out of range is refused by the reader. Part of the test_tokenizer_files
// executable (main in test_tokenizer_files.cpp); the tokenizer.json cases read GPT-2's tokenizer.json from the
// shared data and return at once without it.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include "core/json.h"
#include "data/hf_pipeline.h"
#include "data/tiktoken.h"
#include "data/tokenizer_cache.h"
#include "test_tokenizer_util.h"

using namespace xtrain;

namespace {
const std::string kText = "The jury said it's 2024!\n  Ünïcödé, 東京 <|endoftext|> tabs\tand   spaces \xff\xfe bytes";

// load: the GPT-2 files through the cache in dir; *hit says whether the entry was used
Tokenizer load(const std::string& dir, bool* hit, const std::string& encoder = test::gpt2_bpe_file("encoder.json")) {
  const std::string bpe = test::gpt2_bpe_file("vocab.bpe");
  return load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, [&](const std::vector<std::string>* b) {
    return b ? Tokenizer::from_gpt2_bytes(encoder, b->at(0), bpe, b->at(1)) : Tokenizer::from_gpt2_files(encoder, bpe);
  }, hit);
}

// the only entry in dir
std::string entry_of(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) found.push_back(e.path().string());
  REQUIRE(found.size() == 1);
  CHECK(found[0].size() > 10);
  CHECK(found[0].substr(found[0].size() - 10) == kTokenizerTablesExt);
  return found[0];
}

const TokenizerTables::Expected gpt2_want = TokenizerTables::expect("gpt2");

// WrittenEntry: a scratch cache directory holding the one valid entry of GPT-2's files, written by a
// first load (a miss), and its bytes: the start of the cases that damage or replace it
struct WrittenEntry {
  test::ScratchDir d;
  const std::string dir = d.file("cache");
  bool hit = true;
  std::string entry, good;
  WrittenEntry() {
    load(dir, &hit);
    entry = entry_of(dir);
    good = read_file(entry);
  }
};

// StderrTo: file descriptor 2 written into `path` for the scope (the cache's warnings go there at once)
struct StderrTo {
  int saved = -1;
  explicit StderrTo(const std::string& path) {
    std::fflush(stderr);
    saved = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrTo() {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
  }
};

// with_pattern: a payload of GPT-2's files (kind, name "", pattern "" first) carrying this split pattern
std::string with_pattern(const std::string& payload, const std::string& pattern) {
  const uint64_t n = pattern.size();
  return payload.substr(0, 12) + std::string(reinterpret_cast<const char*>(&n), 8) + pattern + payload.substr(20);
}

// as_entry: the entry of `payload` under the header of the valid entry `good` (its key), hash and size fixed
std::string as_entry(const std::string& good, const std::string& payload) {
  std::string e = good.substr(0, 24);
  const uint64_t n = payload.size(), h = xxh3_64(payload.data(), payload.size());
  e.append(reinterpret_cast<const char*>(&n), 8).append(reinterpret_cast<const char*>(&h), 8);
  return e + payload;
}

// check_same: b encodes and decodes as a; round_trip: kText decodes back to itself (not with a template's ids)
void check_same(const Tokenizer& a, const Tokenizer& b, bool round_trip = true) {
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.vocab_size() == b.vocab_size());
  CHECK(a.eot_id() == b.eot_id());
  CHECK(a.describe() == b.describe());
  const std::vector<int32_t> ids = a.encode(kText);
  CHECK(b.encode(kText) == ids);
  CHECK(b.decode(ids) == a.decode(ids));
  if (round_trip) CHECK(b.decode(ids) == kText);
}
}  // namespace

TEST_CASE("tokenizer cache: a miss writes the entry, a hit restores the same tokenizer") {
  test::ScratchDir d;
  const std::string dir = d.file("cache");  // made by the first write
  bool hit = true;
  const Tokenizer built = load(dir, &hit);
  CHECK_FALSE(hit);
  const std::string entry = entry_of(dir);
  const Tokenizer restored = load(dir, &hit);
  CHECK(hit);
  check_same(test::gpt2(), built);
  check_same(test::gpt2(), restored);
  // other source bytes (the same vocabulary, written with a trailing newline): another entry
  write_file_atomic(d.file("encoder.json"), read_file(test::gpt2_bpe_file("encoder.json")) + "\n");
  const Tokenizer other = load(dir, &hit, d.file("encoder.json"));
  CHECK_FALSE(hit);
  CHECK(other.fingerprint() == built.fingerprint());
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 2);
}

TEST_CASE_FIXTURE(WrittenEntry, "tokenizer cache: a damaged, truncated, foreign or older entry is ignored and rebuilt") {
  std::string older = good;
  older[8] = char(kTokenizerTablesVersion + 1);
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;  // a payload byte: the hash no longer matches
  std::string wrong_size = good;
  wrong_size[24] ^= 1;
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 3), good.substr(0, 20), std::string("XTTOKENS") + good.substr(8),
                                 older, wrong_size, std::string("not a cache entry at all, some text of fifty bytes")}) {
    write_file_atomic(entry, bad);
    const Tokenizer t = load(dir, &hit);
    CHECK_FALSE(hit);
    check_same(test::gpt2(), t);
    CHECK(read_file(entry) == good);  // rewritten whole
    load(dir, &hit);
    CHECK(hit);
  }
  // a symlink at the entry's name is not followed (O_NOFOLLOW): its target is not read as the entry
  std::filesystem::remove(entry);
  std::filesystem::create_symlink(d.file("elsewhere"), entry);
  write_file_atomic(d.file("elsewhere"), good);
  load(dir, &hit);
  CHECK_FALSE(hit);
}

TEST_CASE("tokenizer cache: an entry of another user is never trusted") {
  if (::geteuid() != 0) return;  // only root can give a file to another user
  test::ScratchDir d;
  const std::string dir = d.file("cache");
  bool hit = true;
  load(dir, &hit);
  const std::string entry = entry_of(dir);
  REQUIRE(::chown(entry.c_str(), 12345, 12345) == 0);
  const Tokenizer t = load(dir, &hit);
  CHECK_FALSE(hit);
  check_same(test::gpt2(), t);
  struct stat st{};
  REQUIRE(::stat(entry.c_str(), &st) == 0);
  CHECK(st.st_uid == ::geteuid());  // replaced by this user's (rename over it)
}

TEST_CASE("tokenizer cache: the payload reader refuses a field out of range, a truncation and trailing bytes") {
  const std::string payload = TokenizerTables::save(test::gpt2());
  CHECK_NOTHROW(TokenizerTables::restore(payload, {"a", "b"}, gpt2_want));
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(payload + "x", {}, gpt2_want), doctest::Contains("1 trailing bytes"), Error);
  CHECK_THROWS_AS(TokenizerTables::restore(payload.substr(0, payload.size() - 1), {}, gpt2_want), Error);
  std::string kind = payload;
  kind[0] = 9;
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(kind, {}, gpt2_want), doctest::Contains("unknown tokenizer kind 9"), Error);
  std::string eot = payload;  // kind u32, name "" (u64 0), pattern "" (u64 0), then eot at byte 20
  const int32_t big = 1 << 30;
  std::memcpy(eot.data() + 20, &big, 4);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(eot, {}, gpt2_want), doctest::Contains("end-of-text id 1073741824"), Error);
  std::string count = payload;  // the vocabulary size (at byte 32) past what the payload holds
  const uint64_t huge = uint64_t(1) << 40;
  std::memcpy(count.data() + 32, &huge, 8);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(count, {}, gpt2_want), doctest::Contains("runs past the end"), Error);
}

TEST_CASE("tokenizer cache: the reader requires the loader's kind, name and split pattern, and re-derives eot and fingerprint") {
  const std::string payload = TokenizerTables::save(test::gpt2());
  // a split pattern the loader does not use (one that backtracks without end on "aaaa...b"): refused
  // before it is compiled
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(with_pattern(payload, "(a+)+$"), {}, gpt2_want),
                       doctest::Contains("split pattern is not the loader's"), Error);
  TokenizerTables::Expected tiktoken = gpt2_want;
  tiktoken.kind = Tokenizer::Kind::Tiktoken;
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(payload, {}, tiktoken), doctest::Contains("the loader builds kind 2"), Error);
  TokenizerTables::Expected named = gpt2_want;
  named.name = "r50k_base";
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(payload, {}, named), doctest::Contains("the loader's is \"r50k_base\""), Error);
  std::string eot = payload;  // eot at byte 20: an id in range that is not <|endoftext|>'s
  const int32_t zero = 0;
  std::memcpy(eot.data() + 20, &zero, 4);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(eot, {}, gpt2_want), doctest::Contains("end-of-text id 0, its specials give 50256"), Error);
  std::string fp = payload;  // the fingerprint at byte 24
  fp[24] ^= 1;
  const std::string derived = "its tables give " + hex64(test::gpt2().fingerprint());
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(fp, {}, gpt2_want), doctest::Contains(derived.c_str()), Error);
  std::string token = payload;  // a byte of an id's token (the first id's, "!", after the count at byte 32 and its length)
  REQUIRE(token[48] == '!');
  token[48] = '?';
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(token, {}, gpt2_want), doctest::Contains("its tables give"), Error);
}

TEST_CASE_FIXTURE(WrittenEntry, "tokenizer cache: an entry whose hash checks out but whose tables are not the loader's is rebuilt, one warning line") {
  std::string eot = good.substr(40);
  const int32_t zero = 0;
  std::memcpy(eot.data() + 20, &zero, 4);
  for (const std::string& bad : {with_pattern(good.substr(40), "(a+)+$"), eot}) {
    write_file_atomic(entry, as_entry(good, bad));
    {
      StderrTo err(d.file("err"));
      check_same(test::gpt2(), load(dir, &hit));
    }
    CHECK_FALSE(hit);
    CHECK(read_file(entry) == good);  // rebuilt
    const std::string err = read_file(d.file("err"));
    CHECK(err.rfind("warning: tokenizer cache " + entry + ": ", 0) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE_FIXTURE(WrittenEntry, "tokenizer cache: a forged Merger table row behind a recomputed payload hash is rebuilt, the ids stay right") {
  // the pair row that makes " hello" (rank = id - 256 in GPT-2's files) set to give " world"'s id instead
  const int32_t hello = test::gpt2().encode(" hello").at(0), world = test::gpt2().encode(" world").at(0), rank = hello - 256;
  REQUIRE(test::gpt2().encode(" hello").size() == 1);
  std::string row(8, '\0');
  std::memcpy(row.data(), &rank, 4), std::memcpy(row.data() + 4, &hello, 4);
  std::string forged = good.substr(40);
  int rows = 0;  // every split of " hello" that is two mergeable tokens is a row (kAnySplit)
  for (size_t at = forged.find(row); at != std::string::npos; at = forged.find(row, at + 8), ++rows)
    std::memcpy(forged.data() + at + 4, &world, 4);
  REQUIRE(rows >= 1);
  // a byte id of the letter 'a' set to that of 'b'
  std::string bytes = good.substr(40);
  const int32_t a = test::gpt2().encode("a").at(0), b = test::gpt2().encode("b").at(0);
  std::string a_row(4, '\0'), b_row(4, '\0');
  std::memcpy(a_row.data(), &a, 4), std::memcpy(b_row.data(), &b, 4);
  const size_t byte_ids = bytes.rfind(a_row + b_row);  // byte ids 97, 98: the last such run (before the pairs)
  REQUIRE(byte_ids != std::string::npos);
  bytes.replace(byte_ids, 4, b_row);
  for (const std::string& bad : {forged, bytes}) {
    CHECK_THROWS_AS(TokenizerTables::restore(bad, {test::gpt2_bpe_file("encoder.json"), test::gpt2_bpe_file("vocab.bpe")}, gpt2_want), Error);
    write_file_atomic(entry, as_entry(good, bad));
    Tokenizer t = [&] {
      StderrTo err(d.file("err"));
      return load(dir, &hit);
    }();
    CHECK_FALSE(hit);
    CHECK(t.encode(" hello") == std::vector<int32_t>{hello});
    CHECK(t.encode("a") == std::vector<int32_t>{a});
    check_same(test::gpt2(), t);
    CHECK(read_file(entry) == good);  // rebuilt
    const std::string err = read_file(d.file("err"));
    CHECK(err.rfind("warning: tokenizer cache " + entry + ": ", 0) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE("tokenizer cache: a source replaced between hashing and building leaves the entry of the bytes it was built from") {
  // vocab.bpe replaced (an atomic rename, A -> B) after load_tokenizer_cached read and hashed it: the
  // build gets the bytes of the key (A), so the entry named key(A) holds A's tables, and B is its own entry
  test::ScratchDir d;
  const std::string dir = d.file("cache"), encoder = test::gpt2_bpe_file("encoder.json"), bpe = d.file("vocab.bpe");
  const std::string a = read_file(test::gpt2_bpe_file("vocab.bpe"));
  const size_t l1 = a.find('\n') + 1, l2 = a.find('\n', l1) + 1, l3 = a.find('\n', l2) + 1;
  const std::string b = a.substr(0, l1) + a.substr(l2, l3 - l2) + a.substr(l1, l2 - l1) + a.substr(l3);  // merges 0, 1 swapped
  write_file_atomic(bpe, b);
  const uint64_t fp_b = Tokenizer::from_gpt2_files(encoder, bpe).fingerprint();
  write_file_atomic(bpe, a);
  const uint64_t fp_a = Tokenizer::from_gpt2_files(encoder, bpe).fingerprint();
  REQUIRE(fp_a != fp_b);
  const TokenizerBuild build = [&](const std::vector<std::string>* got) {  // as load_tokenizer's
    return got ? Tokenizer::from_gpt2_bytes(encoder, got->at(0), bpe, got->at(1)) : Tokenizer::from_gpt2_files(encoder, bpe);
  };
  const TokenizerBuild replace_then_build = [&](const std::vector<std::string>* got) {
    write_file_atomic(bpe, b);  // the rename lands after the read, before the build
    REQUIRE(got != nullptr);
    CHECK(got->at(1) == a);  // the bytes hashed, not the file as it is now
    return build(got);
  };
  bool hit = true;
  CHECK(load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, replace_then_build, &hit).fingerprint() == fp_a);
  CHECK_FALSE(hit);
  CHECK(entry_of(dir) == tokenizer_tables_path(dir, "gpt2", {read_file(encoder), a}));
  // B, the file now, is another entry with its own tables; A again finds its entry holding A's tables
  CHECK(load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, build, &hit).fingerprint() == fp_b);
  CHECK_FALSE(hit);
  write_file_atomic(bpe, a);
  CHECK(load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, build, &hit).fingerprint() == fp_a);
  CHECK(hit);
  write_file_atomic(bpe, b);
  CHECK(load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, build, &hit).fingerprint() == fp_b);
  CHECK(hit);
}

TEST_CASE("tokenizer cache: a symbolic link at the entry's name is neither read nor written through") {
  test::ScratchDir d;
  const std::string dir = d.file("cache"), encoder = test::gpt2_bpe_file("encoder.json"), bpe = test::gpt2_bpe_file("vocab.bpe");
  bool hit = true;
  load(dir, &hit);
  const std::string entry = entry_of(dir);
  std::filesystem::remove(entry);
  write_file_atomic(d.file("elsewhere"), "a file outside the cache directory\n");
  std::filesystem::create_symlink(d.file("elsewhere"), entry);
  {
    StderrTo err(d.file("err"));
    check_same(test::gpt2(), load_tokenizer_cached({dir, "$XDG_CACHE_HOME/xtrain", "rank 1 (node7): "}, "gpt2", {encoder, bpe},
                                                   [&](auto*) { return Tokenizer::from_gpt2_files(encoder, bpe); }, &hit));
  }
  CHECK_FALSE(hit);
  CHECK(read_file(d.file("elsewhere")) == "a file outside the cache directory\n");  // its target is untouched
  CHECK(std::filesystem::is_symlink(entry));
  CHECK(read_file(d.file("err")) == "rank 1 (node7): warning: tokenizer cache " + entry + ": is a symbolic link; rebuilding it\n" +
                                        "rank 1 (node7): warning: tokenizer cache " + entry + " is a symbolic link; not writing through it\n");
}

TEST_CASE("tokenizer cache: a directory that cannot be made is named as its origin names it") {
  test::ScratchDir d;
  write_file_atomic(d.file("file"), "x");
  const std::string encoder = test::gpt2_bpe_file("encoder.json"), bpe = test::gpt2_bpe_file("vocab.bpe");
  bool hit = true;
  {
    StderrTo err(d.file("err"));
    load_tokenizer_cached({d.file("file/xtrain"), "$XDG_CACHE_HOME/xtrain"}, "gpt2", {encoder, bpe},
                          [&](auto*) { return Tokenizer::from_gpt2_files(encoder, bpe); }, &hit);
  }
  // one line for the one cause (not a failed read, then a failed write)
  CHECK_FALSE(hit);
  CHECK(read_file(d.file("err")) == "warning: tokenizer cache not used ($XDG_CACHE_HOME/xtrain " + d.file("file/xtrain") + ": " +
                                        d.file("file") + " is not a directory)\n");
  // the directory itself a file: the same one line
  {
    StderrTo err(d.file("err"));
    load_tokenizer_cached({d.file("file"), "--cache-dir"}, "gpt2", {encoder, bpe}, [&](auto*) { return Tokenizer::from_gpt2_files(encoder, bpe); });
  }
  CHECK(read_file(d.file("err")) == "warning: tokenizer cache not used (--cache-dir " + d.file("file") + ": " + d.file("file") +
                                        " is not a directory)\n");
}

TEST_CASE("tokenizer cache: a tiktoken rank file through load_tokenizer's cache directory") {
  const std::string ranks = tiktoken_default_file("r50k_base");
  if (!std::filesystem::exists(ranks)) return;  // scripts/setup.sh --tokenizers installs it
  test::ScratchDir d;
  TokenizerFiles files;
  files.tokenizer = "r50k_base";
  files.cache_dir = d.file("cache");
  const Tokenizer built = load_tokenizer(files), restored = load_tokenizer(files);
  entry_of(files.cache_dir);
  check_same(Tokenizer::from_tiktoken(ranks, "r50k_base"), built);
  check_same(built, restored);
  CHECK(restored.kind() == Tokenizer::Kind::Tiktoken);
}

namespace {
// hf_variant: GPT-2's tokenizer.json with a pipeline other than GPT-2's: an NFC normalizer, a template
// putting <|endoftext|> before the text, and an added token matched with lstrip (the pipeline's own
// matching and the fingerprint's pipeline description both in play)
nlohmann::json hf_variant() {
  nlohmann::json root = read_json_file(test::gpt2_file("tokenizer.json"));
  root["normalizer"] = {{"type", "NFC"}};
  root["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single", {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                            {"pair", nullptr},
                            {"special_tokens", {{"<|endoftext|>", {{"id", "<|endoftext|>"}, {"ids", {50256}}, {"tokens", {"<|endoftext|>"}}}}}}};
  root["added_tokens"].push_back({{"id", 50257}, {"content", "<|jury|>"}, {"single_word", false}, {"lstrip", true},
                                  {"rstrip", false}, {"normalized", false}, {"special", true}});
  return root;
}

// with_source: a tokenizer.json payload whose pipeline source (the last fields: source, added ids)
// is `source` instead of `old`
std::string with_source(const std::string& payload, const std::string& old, const std::string& source) {
  const size_t at = payload.rfind(old);
  REQUIRE(at != std::string::npos);
  const uint64_t n = source.size();
  return payload.substr(0, at - 8) + std::string(reinterpret_cast<const char*>(&n), 8) + source + payload.substr(at + old.size());
}
}  // namespace

TEST_CASE("tokenizer cache: a tokenizer.json through load_tokenizer: a hit restores its tables and its pipeline") {
  if (!std::filesystem::exists(test::gpt2_file("tokenizer.json"))) return;  // the shared data's (XTRAIN_SHARED_DATA)
  test::ScratchDir d;
  const std::string variant = d.file("tokenizer.json");
  write_file_atomic(variant, hf_variant().dump());
  const std::string text = kText + " x  <|jury|>\u0065\u0301 e\xcc\x81 and <|jury|><|endoftext|>";
  for (const std::string& file : {test::gpt2_file("tokenizer.json"), variant}) {
    CAPTURE(file);
    TokenizerFiles files;
    files.tokenizer_json = file;
    files.cache_dir = d.file("cache-" + std::to_string(file == variant));
    const Tokenizer direct = Tokenizer::from_hf_json(file);
    const Tokenizer built = load_tokenizer(files);
    const std::string entry = entry_of(files.cache_dir);
    bool hit = false;
    const Tokenizer restored = load_tokenizer_cached(files.cache_dir, kHfJsonLoader, {file}, [&](auto*) { return Tokenizer::from_hf_json(file); }, &hit);
    CHECK(hit);
    check_same(direct, built, file != variant);
    check_same(direct, restored, file != variant);
    CHECK(restored.kind() == Tokenizer::Kind::HfJson);
    const std::vector<int32_t> ids = direct.encode(text);
    CHECK(restored.encode(text) == ids);
    CHECK(restored.decode(ids) == built.decode(ids));
    if (file == variant) {  // the template's prefix and the lstripped added token survive the round trip
      REQUIRE(ids.size() > 2);
      CHECK(ids[0] == 50256);
      CHECK(std::count(ids.begin(), ids.end(), 50257) == 2);
      CHECK(restored.fingerprint() != test::hf().fingerprint());
    } else {
      CHECK(restored.fingerprint() == test::gpt2().fingerprint());
    }
  }
}

TEST_CASE("tokenizer cache: a tokenizer.json entry's pipeline passes only what the file's reader passes") {
  if (!std::filesystem::exists(test::gpt2_file("tokenizer.json"))) return;  // the shared data's (XTRAIN_SHARED_DATA)
  const nlohmann::json root = hf_variant();
  test::ScratchDir d;
  write_file_atomic(d.file("tokenizer.json"), root.dump());
  const std::string f = d.file("tokenizer.json");
  const Tokenizer t = Tokenizer::from_hf_json(f);
  const std::string payload = TokenizerTables::save(t);
  const TokenizerTables::Expected want = TokenizerTables::expect(kHfJsonLoader);
  CHECK(want.kind == Tokenizer::Kind::HfJson);
  check_same(t, TokenizerTables::restore(payload, {f}, want), false);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(payload, {"a", "b"}, gpt2_want), doctest::Contains("the loader builds kind 1"), Error);
  const std::string source = bpe::hf_pipeline_source(root).dump();
  CHECK(source.find("\"merges\"") == std::string::npos);
  CHECK(source.size() < 2000);  // the vocabulary is not in it
  nlohmann::json refused = bpe::hf_pipeline_source(root);
  refused["normalizer"] = {{"type", "Lowercase"}};  // a normalizer the reader refuses
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(with_source(payload, source, refused.dump()), {f}, want),
                       doctest::Contains("normalizer = an object of 1 key of type \"Lowercase\" is not supported"), Error);
  nlohmann::json other = bpe::hf_pipeline_source(root);
  other["normalizer"] = {{"type", "NFKC"}};  // one it reads, not the tables' (the fingerprint covers the pipeline)
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(with_source(payload, source, other.dump()), {f}, want),
                       doctest::Contains("its tables give"), Error);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(with_source(payload, source, "[1, 2"), {f}, want),
                       doctest::Contains("not valid JSON"), Error);
  nlohmann::json no_template = bpe::hf_pipeline_source(root);
  no_template["post_processor"]["special_tokens"]["<|endoftext|>"]["ids"] = {60000};  // outside the vocabulary
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(with_source(payload, source, no_template.dump()), {f}, want),
                       doctest::Contains("post-processor id 60000 outside [0, 50258)"), Error);
}
