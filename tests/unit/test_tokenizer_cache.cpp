// Tokenizer table cache (src/data/tokenizer_cache.h): a miss builds and writes the entry, a hit restores
// a tokenizer that encodes, decodes and fingerprints as the built one; other source bytes are another
// entry; a damaged, truncated, foreign, older-format or other user's entry is ignored and rebuilt (never
// trusted), and a payload with a field out of range is refused by the reader.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <xtrain/core/error.h>
#include "core/io.h"
#include "data/tiktoken.h"
#include "data/tokenizer_cache.h"
#include "test_tokenizer_util.h"

using namespace xtrain;

namespace {
const std::string kText = "The jury said it's 2024!\n  Ünïcödé, 東京 <|endoftext|> tabs\tand   spaces \xff\xfe bytes";

// load: the GPT-2 files through the cache in dir; *hit says whether the entry was used
Tokenizer load(const std::string& dir, bool* hit, const std::string& encoder = test::gpt2_file("encoder.json")) {
  const std::string bpe = test::gpt2_file("vocab.bpe");
  return load_tokenizer_cached(dir, "gpt2", {encoder, bpe}, [&] { return Tokenizer::from_gpt2_files(encoder, bpe); }, hit);
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

void check_same(const Tokenizer& a, const Tokenizer& b) {
  CHECK(a.fingerprint() == b.fingerprint());
  CHECK(a.vocab_size() == b.vocab_size());
  CHECK(a.eot_id() == b.eot_id());
  CHECK(a.describe() == b.describe());
  const std::vector<int32_t> ids = a.encode(kText);
  CHECK(b.encode(kText) == ids);
  CHECK(b.decode(ids) == kText);
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
  write_file_atomic(d.file("encoder.json"), read_file(test::gpt2_file("encoder.json")) + "\n");
  const Tokenizer other = load(dir, &hit, d.file("encoder.json"));
  CHECK_FALSE(hit);
  CHECK(other.fingerprint() == built.fingerprint());
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 2);
}

TEST_CASE("tokenizer cache: a damaged, truncated, foreign or older entry is ignored and rebuilt") {
  test::ScratchDir d;
  const std::string dir = d.file("cache");
  bool hit = true;
  load(dir, &hit);
  const std::string entry = entry_of(dir);
  const std::string good = read_file(entry);
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
  CHECK_NOTHROW(TokenizerTables::restore(payload, {"a", "b"}));
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(payload + "x", {}), doctest::Contains("1 trailing bytes"), Error);
  CHECK_THROWS_AS(TokenizerTables::restore(payload.substr(0, payload.size() - 1), {}), Error);
  std::string kind = payload;
  kind[0] = 9;
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(kind, {}), doctest::Contains("unknown tokenizer kind 9"), Error);
  std::string eot = payload;  // kind u32, name "" (u64 0), pattern "" (u64 0), then eot at byte 20
  const int32_t big = 1 << 30;
  std::memcpy(eot.data() + 20, &big, 4);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(eot, {}), doctest::Contains("end-of-text id 1073741824"), Error);
  std::string count = payload;  // the vocabulary size (at byte 32) past what the payload holds
  const uint64_t huge = uint64_t(1) << 40;
  std::memcpy(count.data() + 32, &huge, 8);
  CHECK_THROWS_WITH_AS(TokenizerTables::restore(count, {}), doctest::Contains("runs past the end"), Error);
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
