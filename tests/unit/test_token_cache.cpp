// The token cache (format, id width, refusal of damaged or foreign files, reuse by load_tokens, JSON
// lines through jsonl_recipe), the TokenStream views the sampler reads, and the --data file list and
// join rule (corpus.h). Part of the test_tokenizer_files executable (main in test_tokenizer_files.cpp).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/data/corpus.h>
#include <xtrain/data/data_format.h>
#include "data/jsonl.h"
#include "data/token_cache.h"
#include "error_test_util.h"
#include "test_tokenizer_util.h"

using namespace xtrain;
using namespace xtrain::test;
namespace fs = std::filesystem;

namespace {

constexpr int kGpt2Vocab = 50257;
constexpr size_t kHeaderBytes = 88;  // token_cache.h

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::vector<int32_t> ids_of(const MappedTokenCache& c) {
  TokenStream s;
  s.append(c.ids(), nullptr);
  return s.to_vector();
}

// set_mtime: the file's mtime to `sec` seconds since the epoch (a copy or a touch of the text).
void set_mtime(const std::string& path, time_t sec) {
  const struct timespec t[2] = {{sec, 0}, {sec, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

}  // namespace

TEST_CASE("token cache: uint16 ids when the vocabulary fits, uint32 otherwise; header round trip") {
  CHECK(token_id_bytes(kGpt2Vocab) == 2);
  CHECK(token_id_bytes(65536) == 2);  // ids 0 .. 65535 fit in uint16
  CHECK(token_id_bytes(65537) == 4);
  ScratchDir d;
  const SourceId src{99, 123456789, 0xabcdef};
  const std::vector<int32_t> ids = {0, 1, 50256, 464, 7};
  const std::string p16 = d.file("a.tokcache"), p32 = d.file("b.tokcache");
  write_token_cache(p16, ids, kGpt2Vocab, 0x1234, src);
  CHECK(fs::file_size(p16) == kHeaderBytes + 2 * ids.size());
  CHECK(std::distance(fs::directory_iterator(d.path), {}) == 1);  // no temporary file left
  auto c = MappedTokenCache::open(p16);
  CHECK(c->header().id_bytes == 2);
  CHECK(c->header().tokenizer_fingerprint == 0x1234);
  CHECK(c->header().source.bytes == 99);
  CHECK(c->header().source.mtime_ns == 123456789);
  CHECK(c->header().source.hash == 0xabcdef);
  CHECK(c->header().count == ids.size());
  CHECK(ids_of(*c) == ids);

  const std::vector<int32_t> big = {0, 65535, 65536, 99999};
  write_token_cache(p32, big, 100000, 1, src);
  CHECK(fs::file_size(p32) == kHeaderBytes + 4 * big.size());
  CHECK(MappedTokenCache::open(p32)->header().id_bytes == 4);
  CHECK(ids_of(*MappedTokenCache::open(p32)) == big);
  // an id outside the vocabulary (it would not fit the width) is refused, naming the file
  CHECK_THROWS_WITH_AS(write_token_cache(p16, {65536}, kGpt2Vocab, 1, src), doctest::Contains("a.tokcache"), Error);
  CHECK_THROWS_AS(write_token_cache(p16, {-1}, kGpt2Vocab, 1, src), Error);
  CHECK_THROWS_AS(write_token_cache(d.file("no/such/dir/x"), ids, kGpt2Vocab, 1, src), Error);
  write_token_cache(p16, {}, kGpt2Vocab, 1, src);  // an empty stream is valid
  CHECK(MappedTokenCache::open(p16)->header().count == 0);
}

TEST_CASE("token cache: truncated, corrupt and foreign files are refused on open, naming the file") {
  ScratchDir d;
  const std::string path = d.file("x.tokcache");
  write_token_cache(path, {5, 6, 7, 8}, kGpt2Vocab, 0x1234, SourceId{99, 1, 2});
  const std::string bytes = read_file(path);
  REQUIRE(bytes.substr(0, 8) == "XTTOKENS");
  for (size_t keep : {bytes.size() - 1, bytes.size() - 2, kHeaderBytes, kHeaderBytes - 1, size_t(11), size_t(0)}) {
    CAPTURE(keep);
    write_file(path, bytes.substr(0, keep));
    CHECK_THROWS_WITH_AS(MappedTokenCache::open(path), doctest::Contains(path.c_str()), Error);
  }
  // magic, version, id width, count, ids hash, the ids: each refused
  for (size_t at : {size_t(0), size_t(8), size_t(12), size_t(48), size_t(56), kHeaderBytes + 3, bytes.size() - 1}) {
    CAPTURE(at);
    std::string flipped = bytes;
    flipped[at] = char(flipped[at] ^ 0x10);
    write_file(path, flipped);
    CHECK_THROWS_AS(MappedTokenCache::open(path), Error);
  }
  std::string v1 = bytes;
  v1[8] = 1;  // the version-1 format (int32 ids) of earlier builds
  write_file(path, v1);
  CHECK_THROWS_WITH(MappedTokenCache::open(path), doctest::Contains("format version 1, expected 3"));
  CHECK_THROWS_WITH(MappedTokenCache::open(d.file("missing")), doctest::Contains("missing"));
  CHECK_THROWS_WITH(MappedTokenCache::open(d.path.string()), doctest::Contains("not a regular file"));
}

TEST_CASE("load_tokens: tokenizes and caches, reuses the cache without tokenizing, rebuilds a stale or bad one") {
  ScratchDir d;
  const std::string text_path = d.file("t.txt"), cache = d.file("t.txt.tokcache");
  const std::string text = "First Citizen:\nBefore we proceed any further, hear me speak.<|endoftext|>";
  write_file(text_path, text);
  const std::vector<int32_t> want = gpt2().encode(text);
  bool tokenized = false;
  CHECK(load_tokens(text_path, gpt2(), "", false, "", -1, &tokenized).to_vector() == want);
  CHECK(tokenized);
  CHECK(!fs::exists(cache));
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == want);
  REQUIRE(fs::exists(cache));
  CHECK(MappedTokenCache::open(cache)->header().source.hash == xxh3_64(text.data(), text.size()));
  const auto written = fs::last_write_time(cache);
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == want);
  CHECK(!tokenized);
  CHECK(fs::last_write_time(cache) == written);  // reused, not rewritten

  // A cache is believed when size and mtime match: plant one with other ids for this text.
  SourceId src = stat_source(text_path);
  src.hash = xxh3_64(text.data(), text.size());
  write_token_cache(cache, {1, 2, 3}, kGpt2Vocab, gpt2().fingerprint(), src);
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == std::vector<int32_t>{1, 2, 3});
  CHECK(!tokenized);
  // Only the mtime differs (a copy): the content hash decides, still the cache, now recording the new
  // mtime (same ids) so the next start-up needs no hash.
  set_mtime(text_path, 1000000000);
  CHECK(load_tokens(text_path, gpt2(), "", false, "", -1, &tokenized).to_vector() == std::vector<int32_t>{1, 2, 3});
  CHECK(!tokenized);
  CHECK(MappedTokenCache::open(cache)->header().source.mtime_ns != 1000000000ull * 1000000000ull);  // read only
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == std::vector<int32_t>{1, 2, 3});
  CHECK(!tokenized);
  CHECK(MappedTokenCache::open(cache)->header().source.mtime_ns == 1000000000ull * 1000000000ull);
  CHECK(ids_of(*MappedTokenCache::open(cache)) == std::vector<int32_t>{1, 2, 3});
  // Same size, other content, other mtime: stale, rebuilt from the text.
  std::string edited = text;
  edited[0] = 'f';
  write_file(text_path, edited);
  set_mtime(text_path, 1000000001);
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == gpt2().encode(edited));
  CHECK(tokenized);
  CHECK(ids_of(*MappedTokenCache::open(cache)) == gpt2().encode(edited));
  write_file(text_path, text);

  // Another tokenizer's cache is rebuilt.
  src = stat_source(text_path);
  src.hash = xxh3_64(text.data(), text.size());
  write_token_cache(cache, {1, 2, 3}, kGpt2Vocab, gpt2().fingerprint() + 1, src);
  CHECK(load_tokens(text_path, gpt2(), "", true, "", -1, &tokenized).to_vector() == want);
  CHECK(tokenized);
  CHECK(MappedTokenCache::open(cache)->header().tokenizer_fingerprint == gpt2().fingerprint());
  // A truncated cache is rebuilt (a warning on stderr names it).
  const std::string good = read_file(cache);
  write_file(cache, good.substr(0, good.size() - 1));
  CHECK(load_tokens(text_path, gpt2(), "", true).to_vector() == want);
  CHECK(read_file(cache) == good);
  // A file that is not a token cache is read around and never overwritten.
  write_file(cache, "garbage");
  CHECK(load_tokens(text_path, gpt2(), cache, true).to_vector() == want);
  CHECK(read_file(cache) == "garbage");
  CHECK_THROWS_WITH_AS(load_tokens(d.file("missing.txt"), gpt2(), "", true),
                       doctest::Contains(("cannot read " + d.file("missing.txt")).c_str()), Error);
}

TEST_CASE("load_cached_ids with jsonl_recipe: the ids of the documents, a cache per field, nothing left by a bad line") {
  ScratchDir d;
  const std::string path = d.file("docs.jsonl"), cache = d.file("docs.jsonl.tokcache");
  write_file(path, "{\"text\": \"Hello world\", \"title\": \"A\"}\n\n{\"text\": \"Second one.\", \"title\": \"B\"}\n");
  std::vector<int32_t> want = gpt2().encode("Hello world");  // the documents, <|endoftext|> between them
  want.push_back(gpt2().eot_id());
  for (int32_t id : gpt2().encode("Second one.")) want.push_back(id);
  CHECK(load_pretokenized_or_jsonl(path, DataFormat::jsonl, gpt2(), "text").to_vector() == want);
  bool tokenized = false;
  CHECK(load_cached_ids(path, jsonl_recipe(gpt2(), "text", path), kGpt2Vocab, "", true, "", &tokenized).to_vector() == want);
  CHECK(tokenized);
  REQUIRE(fs::exists(cache));
  const std::string bytes = read_file(path);
  CHECK(MappedTokenCache::open(cache)->header().source.hash == xxh3_64(bytes.data(), bytes.size()));
  CHECK(MappedTokenCache::open(cache)->header().tokenizer_fingerprint == jsonl_fingerprint(gpt2().fingerprint(), "text"));
  CHECK(load_cached_ids(path, jsonl_recipe(gpt2(), "text", path), kGpt2Vocab, "", true, "", &tokenized).to_vector() == want);
  CHECK(!tokenized);
  // the field, the tokenizer and the kind of file each change the fingerprint
  CHECK(jsonl_fingerprint(gpt2().fingerprint(), "title") != jsonl_fingerprint(gpt2().fingerprint(), "text"));
  CHECK(jsonl_fingerprint(gpt2().fingerprint() + 1, "text") != jsonl_fingerprint(gpt2().fingerprint(), "text"));
  CHECK(jsonl_fingerprint(gpt2().fingerprint(), "text") != gpt2().fingerprint());
  // another field: same bytes, same stat, so only the fingerprint tells the cache is not this one's
  std::vector<int32_t> titles = gpt2().encode("A");
  titles.push_back(gpt2().eot_id());
  titles.push_back(gpt2().encode("B").at(0));
  CHECK(load_cached_ids(path, jsonl_recipe(gpt2(), "title", path), kGpt2Vocab, "", true, "", &tokenized).to_vector() == titles);
  CHECK(tokenized);
  // a line that is not JSON: the parser's error, naming file and line, and no cache nor temporary file
  const std::string bad = d.file("bad.jsonl");
  write_file(bad, "{\"text\": \"a\"}\n{\"text\": \"b\"\n");
  CHECK_THROWS_WITH_AS(load_cached_ids(bad, jsonl_recipe(gpt2(), "text", bad), kGpt2Vocab, "", true),
                       doctest::Contains((bad + ":2: not valid JSON").c_str()), Error);
  std::vector<std::string> names;  // docs.jsonl, its cache and bad.jsonl: nothing else
  for (const auto& e : fs::directory_iterator(d.path)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"bad.jsonl", "docs.jsonl", "docs.jsonl.tokcache"});
}

// A small .zst can hold gigabytes of valid lines (62 KB held 2 GB, and the tokenizing rank went past
// 5.5 GB of memory): the decompressed size is checked against the bound before the first document.
TEST_CASE("JSON lines: a file past the memory bound is refused before its first document") {
  ScratchDir d;
  std::string lines;
  size_t line_count = 0;
  for (; lines.size() < (size_t(8) << 20); ++line_count) lines += "{\"text\": \"a a a a a a a a a a a a a a a a a a a a\"}\n";
  std::string zst(ZSTD_compressBound(lines.size()), '\0');
  const size_t n = ZSTD_compress(zst.data(), zst.size(), lines.data(), lines.size(), 19);
  REQUIRE(!ZSTD_isError(n));
  zst.resize(n);
  CHECK(zst.size() < lines.size() / 1000);  // the shape of the hostile file: a thousandfold and more
  const std::string packed = d.file("bomb.jsonl.zst"), plain = d.file("big.jsonl");
  write_file(packed, zst);
  write_file(plain, lines);
  JsonlBound bound;
  bound.bytes = size_t(1) << 20, bound.available = size_t(4) << 20;
  size_t docs = 0;
  const DocumentFn count = [&](const std::string&, size_t) { ++docs; };
  const std::string tail = " the JSON lines bound of 1 MiB (a quarter of the memory available, 4 MiB): split it into "
                           "smaller files (each is tokenized and cached on its own)";
  CHECK(error_of([&] { for_each_jsonl_document(packed, "text", count, bound); }) == packed + ": decompresses to more than" + tail);
  CHECK(error_of([&] { for_each_jsonl_document(packed, zst, "text", count, bound); }) ==
        packed + ": decompresses to more than" + tail);
  CHECK(error_of([&] { for_each_jsonl_document(plain, "text", count, bound); }) == plain + ": holds 8 MiB, more than" + tail);
  CHECK(docs == 0);
  // within the bound: every document
  bound.bytes = lines.size();
  for_each_jsonl_document(packed, "text", count, bound);
  CHECK(docs == line_count);
  // the bound taken from the host: a quarter of MemAvailable
  const JsonlBound host = jsonl_bound();
  CHECK(host.available > 0);
  CHECK(host.bytes == host.available / kJsonlMemoryShare);
}

TEST_CASE("load_tokens: a new cache is readable by no one who cannot read its text") {
  ScratchDir d;
  const std::string text_path = d.file("private.txt"), cache = d.file("private.txt.tokcache");
  write_file(text_path, "password=hunter2");
  REQUIRE(::chmod(text_path.c_str(), 0600) == 0);
  const mode_t old_umask = ::umask(022);
  load_tokens(text_path, gpt2(), "", true, "", -1, nullptr);
  ::umask(old_umask);
  REQUIRE(fs::exists(cache));
  CHECK((fs::status(cache).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
}

TEST_CASE("load_tokens: a cache identifies its text by device and inode too; old, empty and unreadable caches") {
  ScratchDir d;
  // Two texts of the same size and mtime (tar gives same-size files the same whole-second mtime).
  const std::string a = d.file("a.txt"), b = d.file("b.txt"), shared = d.file("one.tokcache");
  const std::string ta = "First Citizen: speak.", tb = "Second Citizen: hear.";
  REQUIRE(ta.size() == tb.size());
  write_file(a, ta), write_file(b, tb);
  set_mtime(a, 1000000000), set_mtime(b, 1000000000);
  bool tokenized = false;
  CHECK(load_tokens(a, gpt2(), shared, true).to_vector() == gpt2().encode(ta));
  // The same --tokens-cache for the other text: same size and mtime, another inode, so hashed and rebuilt.
  CHECK(load_tokens(b, gpt2(), shared, true, "", -1, &tokenized).to_vector() == gpt2().encode(tb));
  CHECK(tokenized);
  // Each text's own cache, then the texts swapped with mv (mtimes kept): each cache is stale.
  CHECK(load_tokens(a, gpt2(), "", true).to_vector() == gpt2().encode(ta));
  CHECK(load_tokens(b, gpt2(), "", true).to_vector() == gpt2().encode(tb));
  REQUIRE(::rename(a.c_str(), d.file("t").c_str()) == 0);
  REQUIRE(::rename(b.c_str(), a.c_str()) == 0);
  REQUIRE(::rename(d.file("t").c_str(), b.c_str()) == 0);
  CHECK(load_tokens(a, gpt2(), "", true, "", -1, &tokenized).to_vector() == gpt2().encode(tb));
  CHECK(tokenized);
  CHECK(MappedTokenCache::open(a + ".tokcache")->header().source.inode == stat_source(a).inode);
  CHECK(load_tokens(b, gpt2(), "", true).to_vector() == gpt2().encode(ta));
  // Only the inode changed (a copy over the same name): the hash matches, the cache records the new
  // identity and is reused without tokenizing.
  fs::copy_file(b, d.file("copy"));
  REQUIRE(::rename(d.file("copy").c_str(), b.c_str()) == 0);
  set_mtime(b, 1000000000);
  CHECK(load_tokens(b, gpt2(), "", true, "", -1, &tokenized).to_vector() == gpt2().encode(ta));
  CHECK(!tokenized);
  CHECK(MappedTokenCache::open(b + ".tokcache")->header().source.same_stat(stat_source(b)));

  // A cache of format version 2 (64-byte header, no device/inode/ctime) is rebuilt.
  const std::string cache = a + ".tokcache";
  std::string v2 = read_file(cache).substr(0, 64);
  v2[8] = 2;
  write_file(cache, v2);
  CHECK_THROWS_WITH(MappedTokenCache::open(cache), doctest::Contains("format version 2, expected 3"));
  CHECK(load_tokens(a, gpt2(), "", true, "", -1, &tokenized).to_vector() == gpt2().encode(tb));
  CHECK(tokenized);
  CHECK(MappedTokenCache::open(cache)->header().count == gpt2().encode(tb).size());
  // An empty cache (e.g. truncated by a crash) is rebuilt, not taken for a foreign file.
  write_file(cache, "");
  CHECK(load_tokens(a, gpt2(), "", true).to_vector() == gpt2().encode(tb));
  CHECK(ids_of(*MappedTokenCache::open(cache)) == gpt2().encode(tb));
  // An unreadable cache is tokenized around, named as unreadable, and not overwritten. Root reads any
  // file, so the case runs in a child process that redirects its stderr and, as root, takes the uid
  // of nobody (65534).
  const std::string kept = read_file(cache), err = d.file("err");
  write_file(err, "");
  fs::permissions(d.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(a, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(err, fs::perms::all);
  REQUIRE(::chmod(cache.c_str(), 0) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY);
    bool ok = fd >= 0 && ::dup2(fd, 2) == 2 && (::geteuid() != 0 || ::setuid(65534) == 0);
    bool tok_now = false;
    ok = ok && load_tokens(a, gpt2(), "", true, "", -1, &tok_now).to_vector() == gpt2().encode(tb) && tok_now;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(read_file(err).find("token cache " + cache + " is unreadable (Permission denied)") != std::string::npos);
  REQUIRE(::chmod(cache.c_str(), 0600) == 0);
  CHECK(read_file(cache) == kept);
}

TEST_CASE("TokenStream: copies across views of both widths; chunks cover the stream in order") {
  const std::vector<uint16_t> a = {1, 2, 3};
  const std::vector<uint32_t> b = {70000, 5};
  TokenStream s;
  s.append(TokenView{a.data(), a.size(), 2}, nullptr);
  s.append(TokenStream(std::vector<int32_t>{}));  // empty parts add nothing
  s.append(TokenView{b.data(), b.size(), 4}, nullptr);
  s.append(TokenStream(std::vector<int32_t>{9}));
  REQUIRE(s.size() == 6);
  CHECK(s.to_vector() == std::vector<int32_t>{1, 2, 3, 70000, 5, 9});
  int32_t w[4] = {};
  s.copy(2, 4, w);  // spans three views
  CHECK(std::vector<int32_t>(w, w + 4) == std::vector<int32_t>{3, 70000, 5, 9});
  CHECK(s.at(3) == 70000);
  CHECK_THROWS_AS(s.copy(3, 4, w), Error);
  CHECK_THROWS_AS(s.append(TokenView{a.data(), 1, 3}, nullptr), Error);

  std::vector<int32_t> big(200000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = int32_t(i * 7 % 50000);
  const TokenStream t(big);
  std::vector<int32_t> seen;
  t.for_each_chunk([&](const int32_t* ids, size_t n) { seen.insert(seen.end(), ids, ids + n); });
  CHECK(seen == big);
}

TEST_CASE("join_files: <|endoftext|> between files gives the stream of the joined text") {
  const std::string a = "First Citizen:\nBefore we proceed", b = " any further, hear me speak.\n", c = "\nSpeak, speak.";
  const int eot = gpt2().eot_id();
  REQUIRE(eot == 50256);
  const auto enc = [](const std::string& t) { return TokenStream(gpt2().encode(t)); };
  CHECK(join_files({enc(a)}, eot).to_vector() == gpt2().encode(a));  // one file: its own stream
  CHECK(join_files({enc(a), enc(b), enc(c)}, eot).to_vector() ==
        gpt2().encode(a + "<|endoftext|>" + b + "<|endoftext|>" + c));
  std::vector<int32_t> plain = gpt2().encode(a);
  const std::vector<int32_t> eb = gpt2().encode(b);
  plain.insert(plain.end(), eb.begin(), eb.end());
  CHECK(join_files({enc(a), enc(b)}, -1).to_vector() == plain);  // no <|endoftext|> in the vocabulary
}

TEST_CASE("list_data_files: files and directories, sorted, caches and hidden files left out; clear errors") {
  ScratchDir d;
  fs::create_directory(d.path / "shards");
  for (const char* n : {"b.txt", "a.txt", "c", ".hidden", "a.txt.tokcache", "a.txt.tokcache.tmp.h.1.ab"})
    write_file((d.path / "shards" / n).string(), "x");
  const std::string dir = d.file("shards");
  CHECK(list_data_files(dir) == std::vector<std::string>{dir + "/a.txt", dir + "/b.txt", dir + "/c"});
  write_file(d.file("one.txt"), "y");
  CHECK(list_data_files(d.file("one.txt")) == std::vector<std::string>{d.file("one.txt")});
  CHECK(list_data_files(d.file("one.txt") + "," + dir) ==
        std::vector<std::string>{d.file("one.txt"), dir + "/a.txt", dir + "/b.txt", dir + "/c"});

  fs::create_directory(d.path / "empty");
  write_file(d.file("empty/.x"), "");
  CHECK_THROWS_WITH_AS(list_data_files(d.file("empty")), doctest::Contains("no data files in the directory"), Error);
  CHECK_THROWS_WITH_AS(list_data_files(d.file("nope.txt")),
                       doctest::Contains(("cannot read " + d.file("nope.txt")).c_str()), Error);
  CHECK_THROWS_WITH_AS(list_data_files(d.file("one.txt") + ","), doctest::Contains("an empty path"), Error);
  fs::create_directory(d.path / "shards" / "sub");
  CHECK_THROWS_WITH_AS(list_data_files(dir), doctest::Contains("sub: cannot read: not a regular file"), Error);
  fs::remove(d.path / "shards" / "sub");
  REQUIRE(::mkfifo(d.file("shards/fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(list_data_files(dir), doctest::Contains("fifo: cannot read: not a regular file"), Error);
  fs::remove(d.path / "shards" / "fifo");
  fs::create_symlink(d.file("gone"), d.path / "shards" / "dangling");
  CHECK_THROWS_WITH_AS(list_data_files(dir), doctest::Contains("dangling: No such file"), Error);
  // every error names the option that gave the list (--data unless told: xtrain_eval's --loss, --eval NAME)
  CHECK_THROWS_WITH_AS(list_data_files(d.file("empty"), "--loss"),
                       ("--loss " + d.file("empty") + ": no data files in the directory").c_str(), Error);
  CHECK_THROWS_WITH_AS(list_data_files(d.file("nope.txt"), "--loss"),
                       ("--loss: cannot read " + d.file("nope.txt") + ": No such file or directory").c_str(), Error);
  CHECK_THROWS_WITH_AS(list_data_files(d.file("one.txt") + ",", "--eval wiki"),
                       ("--eval wiki \"" + d.file("one.txt") + ",\": an empty path in the list").c_str(), UsageError);
  CHECK_THROWS_WITH_AS(list_data_files(d.file("one.txt") + "," + d.file("one.txt"), "--loss"),
                       doctest::Contains("--loss lists one file twice"), UsageError);
  CHECK_THROWS_WITH_AS(list_data_files("/dev/null", "--loss"), doctest::Contains("--loss /dev/null: cannot read: not a regular file"),
                       Error);
}

TEST_CASE("load_cached_ids owned_only: a cache in a cache directory that is not this user's own file is neither read nor replaced") {
  ScratchDir d;
  const std::string text = d.file("a.txt"), other = d.file("other.txt"), err = d.file("err");
  const std::string t = "Of all the tokens in this text, none are the planted ones.";
  write_file(text, t), write_file(other, "planted");
  const std::vector<int32_t> want = gpt2().encode(t);
  SourceId source = stat_source(text);
  source.hash = xxh3_64(t.data(), t.size());
  const std::string cache = keyed_cache_path(d.path, source.hash, gpt2().fingerprint());
  const std::vector<int32_t> planted = {7, 7, 7};
  // load: the ids through the keyed cache, owned_only; *log gets its stderr
  const auto load = [&](bool* tokenized, std::string* log) {
    std::fflush(stderr);
    const int saved = ::dup(2), fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2), ::close(fd);
    std::vector<int32_t> ids = load_cached_ids(text, text_recipe(gpt2(), text, -1), kGpt2Vocab, cache, true, "rank 0 (h): ",
                                               tokenized, false, true).to_vector();
    std::fflush(stderr);
    ::dup2(saved, 2), ::close(saved);
    *log = read_file(err);
    return ids;
  };
  bool tokenized = false;
  std::string log;
  // this user's cache with other ids (a valid header for this text): reused, as ever
  write_token_cache(cache, planted, kGpt2Vocab, gpt2().fingerprint(), source);
  CHECK(load(&tokenized, &log) == planted);
  CHECK_FALSE(tokenized);
  // a hard link to it: another name could change it underneath
  REQUIRE(::link(cache.c_str(), d.file("second_name").c_str()) == 0);
  CHECK(load(&tokenized, &log) == want);
  CHECK(tokenized);
  CHECK(log == "rank 0 (h): warning: token cache " + cache + " has 2 hard links; not reading or replacing it, tokenizing " +
                   text + " in memory\n");
  REQUIRE(::unlink(d.file("second_name").c_str()) == 0);
  // a symbolic link to a cache elsewhere: its target is not read or written
  fs::rename(cache, d.file("elsewhere.tokcache"));
  fs::create_symlink(d.file("elsewhere.tokcache"), cache);
  CHECK(load(&tokenized, &log) == want);
  CHECK(log.find(cache + " is a symbolic link; not reading or replacing it") != std::string::npos);
  CHECK(ids_of(*MappedTokenCache::open(d.file("elsewhere.tokcache"))) == planted);
  CHECK(fs::is_symlink(cache));
  fs::remove(cache);
  if (::geteuid() != 0) return;  // only root can give a file to another user
  // another user's cache (one planted in a sticky directory): never this run's tokens
  write_token_cache(cache, planted, kGpt2Vocab, gpt2().fingerprint(), source);
  REQUIRE(::chown(cache.c_str(), 65534, 65534) == 0);
  CHECK(load(&tokenized, &log) == want);
  CHECK(tokenized);
  CHECK(log.find(cache + " is owned by uid 65534, not this user (uid 0); not reading or replacing it") != std::string::npos);
  struct stat st{};
  REQUIRE(::stat(cache.c_str(), &st) == 0);
  CHECK(st.st_uid == 65534u);  // left as it was
  CHECK(ids_of(*MappedTokenCache::open(cache)) == planted);
  CHECK_THROWS_WITH_AS(MappedTokenCache::open(cache, true), doctest::Contains("is owned by uid 65534"), Error);
}

TEST_CASE("check_cache_dir_owner: another user's directory is refused whatever chose it, named by its origin") {
  ScratchDir d;
  const std::string dir = d.file("xtrain");
  CHECK_NOTHROW(check_cache_dir_owner(dir, "$XDG_CACHE_HOME/xtrain"));  // absent: made by this user later
  fs::create_directory(dir);
  CHECK_NOTHROW(check_cache_dir_owner(dir, "$XDG_CACHE_HOME/xtrain"));
  if (::geteuid() != 0) return;
  REQUIRE(::chown(dir.c_str(), 65534, 65534) == 0);
  CHECK_THROWS_WITH_AS(check_cache_dir_owner(dir, "$XDG_CACHE_HOME/xtrain"),
                       doctest::Contains(("$XDG_CACHE_HOME/xtrain " + dir + ": owned by uid 65534").c_str()), Error);
  const char* was = std::getenv("XDG_CACHE_HOME");
  const std::string saved = was ? was : "";
  ::setenv("XDG_CACHE_HOME", "/some/where", 1);
  CHECK(token_cache_dir_origin("") == "$XDG_CACHE_HOME/xtrain");
  CHECK(token_cache_dir_origin("/x") == "--cache-dir");
  ::setenv("XDG_CACHE_HOME", "relative", 1);  // ignored by the XDG spec: $HOME chose it
  CHECK(token_cache_dir_origin("") == "$HOME/.cache/xtrain");
  if (was) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
}

TEST_CASE("check_directory_outside_cache_dirs: a cache directory and any directory below it are refused, beside it not") {
  ScratchDir d;
  const std::string cache = d.file("cache");
  fs::create_directories(cache + "/models");
  fs::create_directory_symlink(cache, d.file("cache-link"));
  const std::string tail = " the token cache directory " + cache + " (--cache-dir: ";
  auto refusal = [&](const std::string& dir) { return error_of([&] { check_directory_outside_cache_dirs(dir, "--out", cache); }); };
  CHECK(refusal(cache).rfind("--out " + cache + " is" + tail, 0) == 0);
  CHECK(refusal(cache + "/").rfind("--out " + cache + "/ is" + tail, 0) == 0);
  CHECK(refusal(cache + "/models").rfind("--out " + cache + "/models is inside" + tail, 0) == 0);
  CHECK(refusal(cache + "/not/made/yet").rfind("--out " + cache + "/not/made/yet is inside" + tail, 0) == 0);
  CHECK(refusal(d.file("cache-link/models")).find("is inside" + tail) != std::string::npos);  // through a link
  CHECK(refusal(d.file("elsewhere/../cache/x")).find("is inside" + tail) != std::string::npos);
  CHECK(refusal(d.file("cache/models/../../out")) == "(no error)");  // beside the cache, spelt through it
  CHECK(refusal(d.file("cache-and-more")) == "(no error)");  // a name that only starts like the cache's
  CHECK(refusal(d.file("out")) == "(no error)");
  CHECK(refusal(d.path.string()) == "(no error)");  // the cache's own parent holds it, is not in it
  CHECK_NOTHROW(check_directory_outside_cache_dirs("", "--out", cache));
}

TEST_CASE("check_directory_outside_cache_dirs: every symbolic link on the way is followed, dangling ones too") {
  ScratchDir d;
  const std::string cache = d.file("cache");
  fs::create_directories(cache);
  auto refused = [&](const std::string& dir, const std::string& cache_dir) {
    return error_of([&] { check_directory_outside_cache_dirs(dir, "--out", cache_dir); }).find(" the token cache directory " + cache_dir) !=
           std::string::npos;
  };
  // a link to a directory not made yet inside the cache: a write through "link/" makes it there
  fs::create_symlink(cache + "/new", d.file("link1"));
  CHECK(refused(d.file("link1"), cache));
  CHECK(refused(d.file("link1/"), cache));
  CHECK(refused(d.file("link1/m"), cache));
  CHECK(refused(d.file("link1/m/"), cache));
  // a dangling link deeper on the way, and one with a relative target
  fs::create_directories(d.file("sub"));
  fs::create_symlink(cache + "/nd2", d.file("sub/dl"));
  CHECK(refused(d.file("sub/dl/x/y"), cache));
  fs::create_symlink("../cache/nd3", d.file("sub/rel"));
  CHECK(refused(d.file("sub/rel/x"), cache));
  // a chain of links, the first one dangling only at its end
  fs::create_symlink(d.file("link1"), d.file("chain"));
  CHECK(refused(d.file("chain/z/"), cache));
  // a link to a cache directory that does not exist yet
  const std::string later = d.file("later-cache");
  fs::create_symlink(later, d.file("link-later"));
  CHECK(refused(d.file("link-later/"), later));
  CHECK(refused(d.file("link-later/m"), later));
  // the cache spelt through a dangling link, the output as the path the link names
  fs::create_symlink(d.file("later2"), d.file("cache-via-link"));
  CHECK(refused(d.file("later2/m"), d.file("cache-via-link")));
  // beside the cache: a dangling link out of it, and ".." past a link's directory
  fs::create_symlink(d.file("elsewhere/new"), d.file("out-link"));
  CHECK(!refused(d.file("out-link/"), cache));
  CHECK(refused(d.file("link1/../x"), cache));  // ".." of the link's target (cache/new): the cache, as the kernel does
  CHECK(!refused(d.file("link1/../../side"), cache));
  // a loop is left to the write, which fails there (too many levels of symbolic links)
  fs::create_symlink(d.file("loop"), d.file("loop"));
  CHECK(!refused(d.file("loop/x"), cache));
}
