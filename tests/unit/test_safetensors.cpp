// safetensors reader and writer (src/serve/safetensors.h): the writer's bytes are deterministic
// and read back exactly; every malformed file the reader must refuse is crafted into a scratch
// directory and gives one line naming the file and the cause.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include <xtrain/backend/weight_upload.h>
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/serve/safetensors.h>
#include "error_test_util.h"
#include "test_tokenizer_util.h"

using namespace xtrain;
using test::error_of;

namespace {
// file_bytes: a safetensors file from a header text and a data section, length prefix included.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t len_override = 0) {
  std::string out(8, '\0');
  const uint64_t n = len_override ? len_override : header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// tensor: one header entry, "name":{"dtype":..,"shape":..,"data_offsets":..}; shape and offsets as JSON text.
std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

// header: a JSON object of these entries.
std::string header(const std::vector<std::string>& entries) {
  std::string h = "{";
  for (const std::string& e : entries) h += (h.size() > 1 ? "," : "") + e;
  return h + "}";
}

// check_refused: SafeTensors::read of these bytes, written to a scratch file, throws one line that
// names the file and contains `cause`.
void check_refused(const test::ScratchDir& dir, const std::string& bytes, const std::string& cause) {
  INFO("expected cause: ", cause);
  const std::string path = dir.file("bad.safetensors");
  write_file_atomic(path, bytes);
  try {
    SafeTensors::read(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);  // one line
    CHECK(msg.find(path) != std::string::npos);  // names the file
    CHECK(msg.find(cause) != std::string::npos);
    return;
  }
  FAIL("no error for a malformed file");
}

const std::string k8(8, 'x');  // 8 data bytes: two F32, or one I64
}  // namespace

namespace {
// TwoBufferUpload: a WeightUpload as the CUDA backend's behaves to its caller: two buffers handed out in
// turn, each write converting the bytes of the buffer handed out just before it (checked), the other
// buffer free to fill meanwhile; converted on the host (convert_weight_part) and counted
struct TwoBufferUpload final : WeightUpload {
  explicit TwoBufferUpload(size_t capacity) : buf{std::vector<char>(capacity), std::vector<char>(capacity)} {}
  size_t capacity_bytes() const override { return buf[0].size(); }
  char* buffer() override {
    CHECK_FALSE(handed);  // one buffer per write
    handed = true;
    return buf[next].data();
  }
  void write(const WeightPart& p) override {
    REQUIRE(handed);
    CHECK((p.i1 - p.i0) * wire_bytes(p.wire) <= capacity_bytes());
    convert_weight_part(buf[next].data(), p);
    std::fill(buf[next].begin(), buf[next].end(), char(0x7f));  // a later write from it would read this
    handed = false, next ^= 1, ++parts;
  }
  void finish() override { CHECK_FALSE(handed); }
  std::vector<char> buf[2];
  int next = 0, parts = 0;
  bool handed = false;
};
}  // namespace

TEST_CASE("safetensors: the writer's bytes are deterministic and read back exactly") {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f}, b = {7.0f, 8.0f};
  const std::vector<StTensorF32> t1 = {{"z.w", {2, 3}, a.data()}, {"a.b", {2}, b.data()}};
  const std::vector<StTensorF32> t2 = {t1[1], t1[0]};  // another order: the same file
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  const std::string bytes = safetensors_bytes(t1, meta);
  CHECK(bytes == safetensors_bytes(t2, meta));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);  // the data section is 8-byte aligned
  CHECK(bytes.size() == 8 + n + 4 * (a.size() + b.size()));
  const SafeTensors st = SafeTensors::parse(bytes, "mem");
  REQUIRE(st.entries().size() == 2);
  CHECK(st.entries()[0].name == "a.b");  // name order, data in the same order
  CHECK(st.entries()[0].begin == 0);
  CHECK(st.metadata().at("format") == "pt");
  const StEntry* z = st.find("z.w");
  REQUIRE(z != nullptr);
  CHECK(z->shape == std::vector<int64_t>{2, 3});
  const std::vector<float> back = st.to_f32(*z);
  CHECK(std::memcmp(back.data(), a.data(), 4 * a.size()) == 0);  // bitwise, -0.0 included
  CHECK(st.find("missing") == nullptr);
  CHECK_THROWS_AS(safetensors_bytes({t1[0], t1[0]}, {}), Error);  // duplicate name
}

TEST_CASE("safetensors: BF16 and F16 widen to fp32 exactly") {
  // bf16 0x3fc0 = 1.5; f16 0x3e00 = 1.5, 0x0001 = 2^-24 (subnormal), 0xfc00 = -inf
  const uint16_t bf[2] = {0x3fc0, 0xc000}, hf[3] = {0x3e00, 0x0001, 0xfc00};
  std::string data(reinterpret_cast<const char*>(bf), 4);
  data.append(reinterpret_cast<const char*>(hf), 6);
  data.append(6, '\0');
  const std::string h =
      header({tensor("b", "BF16", "[2]", "[0,4]"), tensor("h", "F16", "[3]", "[4,10]"), tensor("p", "U8", "[6]", "[10,16]")});
  const SafeTensors st = SafeTensors::parse(file_bytes(h, data), "mem");
  CHECK(st.to_f32(*st.find("b")) == std::vector<float>{1.5f, -2.0f});
  const std::vector<float> f = st.to_f32(*st.find("h"));
  CHECK(f[0] == 1.5f);
  CHECK(f[1] == std::ldexp(1.0f, -24));
  CHECK((std::isinf(f[2]) && f[2] < 0));
  CHECK_THROWS_WITH_AS(st.to_f32(*st.find("p")), doctest::Contains("dtype U8"), Error);
}

TEST_CASE("safetensors: into the caller's memory, transposed or not, from a mapped file or bytes in memory") {
  // a (2, 3) tensor in each dtype: element (a, b) = 10a + b + 0.5 (exact in bf16 and f16)
  const float vals[6] = {0.5f, 1.5f, 2.5f, 10.5f, 11.5f, 12.5f};
  std::string data(reinterpret_cast<const char*>(vals), 24);
  for (int k = 0; k < 2; ++k)  // BF16: the top halves; F16: 0.5 = 0x3800, ... by the format's encoding
    for (float v : vals) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      uint16_t h = uint16_t(bits >> 16);
      if (k == 1) {  // binary16: sign 0, exponent e+15, the top 10 bits of the mantissa (these are exact)
        const int e = int((bits >> 23) & 0xff) - 127;
        h = uint16_t(((e + 15) << 10) | ((bits >> 13) & 0x3ff));
      }
      data.append(reinterpret_cast<const char*>(&h), 2);
    }
  const std::string h = header({tensor("f", "F32", "[2,3]", "[0,24]"), tensor("b", "BF16", "[2,3]", "[24,36]"),
                                tensor("h", "F16", "[2,3]", "[36,48]"), tensor("v", "F32", "[0]", "[48,48]")});
  const std::string bytes = file_bytes(h, data);
  test::ScratchDir dir;
  write_file_atomic(dir.file("m.safetensors"), bytes);
  const SafeTensors mapped = SafeTensors::read(dir.file("m.safetensors"));
  const SafeTensors moved = SafeTensors::parse(bytes, "mem");
  const SafeTensors in_memory = SafeTensors(moved);  // a copy shares the bytes
  for (const SafeTensors* st : {&mapped, &in_memory})
    for (const char* name : {"f", "b", "h"}) {
      CAPTURE(name);
      const StEntry& e = *st->find(name);
      float out[6], t[6];
      st->to_f32_into(e, out);
      CHECK(std::memcmp(out, vals, 24) == 0);
      CHECK(st->to_f32(e) == std::vector<float>(vals, vals + 6));
      st->to_f32_transposed_into(e, t);  // (3, 2): t[b*2 + a] = element (a, b)
      CHECK(std::vector<float>(t, t + 6) == std::vector<float>{0.5f, 10.5f, 1.5f, 11.5f, 2.5f, 12.5f});
    }
  // through a WeightUpload (xtrain_generate on CUDA): parts of 8 bytes (2 F32 or 4 BF16/F16 elements), so
  // parts end mid-row, each written from the buffer handed out just before it
  for (const SafeTensors* st : {&mapped, &in_memory})
    for (const char* name : {"f", "b", "h"}) {
      CAPTURE(name);
      TwoBufferUpload up(8);
      float out[6], t[6];
      st->upload_into(*st->find(name), out, false, up);
      st->upload_into(*st->find(name), t, true, up);
      up.finish();
      CHECK(std::memcmp(out, vals, 24) == 0);
      CHECK(std::vector<float>(t, t + 6) == std::vector<float>{0.5f, 10.5f, 1.5f, 11.5f, 2.5f, 12.5f});
      CHECK(up.parts == (std::string(name) == "f" ? 6 : 4));
    }
  float none = 7.0f;
  mapped.to_f32_into(*mapped.find("v"), &none);  // an empty tensor writes nothing
  CHECK(none == 7.0f);
  CHECK_THROWS_WITH_AS(mapped.to_f32_transposed_into(*mapped.find("v"), &none), doctest::Contains("1 dimensions, expected 2"), Error);
}

TEST_CASE("safetensors: a large mapped file converts in tiles, element for element") {
  // 70 x 130: more than one 64 x 64 tile each way, with partial tiles at both edges
  const int A = 70, B = 130;
  std::vector<float> v(size_t(A) * B);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  test::ScratchDir dir;
  write_file_atomic(dir.file("big.safetensors"), safetensors_bytes({{"w", {A, B}, v.data()}}, {}));
  const SafeTensors st = SafeTensors::read(dir.file("big.safetensors"));
  std::vector<float> t(v.size(), -1.0f);
  st.to_f32_transposed_into(*st.find("w"), t.data());
  bool same = true;
  for (int a = 0; a < A; ++a)
    for (int b = 0; b < B; ++b) same = same && t[size_t(b) * A + a] == v[size_t(a) * B + b];
  CHECK(same);
}

TEST_CASE("safetensors: tensors larger than the read buffer convert part by part, element for element") {
  // read() converts through a 16 MiB buffer: 4 Mi F32 or 8 Mi BF16 elements a part. (1000, 5000) F32: parts
  // of whole 64-row bands; (3, 3000001) F32 and (3, 5000001) BF16: a band does not fit, parts end mid-row.
  struct Case {
    int64_t A, B;
    bool bf16;
  };
  for (const Case c : {Case{1000, 5000, false}, Case{3, 3000001, false}, Case{3, 5000001, true}}) {
    INFO("shape (", c.A, ", ", c.B, ") ", c.bf16 ? "BF16" : "F32");
    const size_t n = size_t(c.A * c.B), esize = c.bf16 ? 2 : 4;
    std::string data(n * esize, '\0');
    for (size_t i = 0; i < n; ++i) {  // element i = i mod 251 (exact in BF16: an integer under 256)
      const float f = float(i % 251);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (c.bf16) {
        const uint16_t h = uint16_t(bits >> 16);
        std::memcpy(&data[2 * i], &h, 2);
      } else {
        std::memcpy(&data[4 * i], &f, 4);
      }
    }
    const std::string shape = "[" + std::to_string(c.A) + "," + std::to_string(c.B) + "]";
    test::ScratchDir dir;
    write_file_atomic(dir.file("big.safetensors"),
                      file_bytes(header({tensor("w", c.bf16 ? "BF16" : "F32", shape, "[0," + std::to_string(data.size()) + "]")}), data));
    const SafeTensors st = SafeTensors::read(dir.file("big.safetensors"));
    std::vector<float> out(n, -1.0f), t(n, -1.0f), up_t(n, -1.0f);
    st.to_f32_into(*st.find("w"), out.data());
    st.to_f32_transposed_into(*st.find("w"), t.data());
    TwoBufferUpload up(kWeightUploadBytes);  // the parts make_weight_upload's buffers take
    st.upload_into(*st.find("w"), up_t.data(), true, up);
    up.finish();
    size_t wrong = 0, wrong_t = 0;
    for (size_t a = 0; a < size_t(c.A); ++a)
      for (size_t b = 0; b < size_t(c.B); ++b) {
        const float want = float((a * size_t(c.B) + b) % 251);
        wrong += out[a * size_t(c.B) + b] != want;
        wrong_t += t[b * size_t(c.A) + a] != want;
      }
    CHECK(wrong == 0);
    CHECK(wrong_t == 0);
    CHECK(up_t == t);
    CHECK(up.parts > 1);
  }
}

TEST_CASE("safetensors: a file truncated or rewritten in place between the header and the tensors is one line") {
  // read() takes the header and keeps the file open; the file is changed before the conversions (no
  // timing involved), then each conversion path must refuse it rather than return the changed bytes
  const int A = 70, B = 130;
  std::vector<float> v(size_t(A) * B);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 256);  // exact in BF16
  std::string bf16;
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t h = uint16_t(bits >> 16);
    bf16.append(reinterpret_cast<const char*>(&h), 2);
  }
  const size_t f_bytes = v.size() * 4;
  const std::string bytes =
      file_bytes(header({tensor("f", "F32", "[70,130]", "[0," + std::to_string(f_bytes) + "]"),
                         tensor("h", "BF16", "[70,130]", "[" + std::to_string(f_bytes) + "," + std::to_string(f_bytes + bf16.size()) + "]")}),
                 std::string(reinterpret_cast<const char*>(v.data()), f_bytes) + bf16);
  const size_t data_start = bytes.size() - f_bytes - bf16.size();
  test::ScratchDir dir;
  const std::string path = dir.file("m.safetensors");
  // fresh: the file written, its modification time set a day back, so that a rewrite within the clock's
  // resolution of the write still changes it
  auto fresh = [&] {
    write_file_atomic(path, bytes);
    struct timespec times[2] = {{0, UTIME_OMIT}, {::time(nullptr) - 86400, 0}};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
    return SafeTensors::read(path);
  };
  const std::string changed = "safetensors " + path + ": truncated or rewritten while it was read";
  std::vector<float> out(v.size());
  using Convert = std::function<void(const SafeTensors&)>;
  const std::vector<std::pair<std::string, Convert>> paths = {
      {"F32 into", [&](const SafeTensors& st) { st.to_f32_into(*st.find("f"), out.data()); }},
      {"BF16 into", [&](const SafeTensors& st) { st.to_f32_into(*st.find("h"), out.data()); }},
      {"F32 transposed", [&](const SafeTensors& st) { st.to_f32_transposed_into(*st.find("f"), out.data()); }},
      {"BF16 transposed", [&](const SafeTensors& st) { st.to_f32_transposed_into(*st.find("h"), out.data()); }},
      {"to_f32", [&](const SafeTensors& st) { st.to_f32(*st.find("h")); }}};
  for (const auto& path_case : paths) {  // (no structured binding: lambdas below capture convert)
    const std::string& name = path_case.first;
    const Convert& convert = path_case.second;
    CAPTURE(name);
    {  // unchanged: every path converts
      const SafeTensors st = fresh();
      CHECK_NOTHROW(convert(st));
    }
    {  // truncated into the tensors' bytes: a read ends early
      const SafeTensors st = fresh();
      REQUIRE(::truncate(path.c_str(), off_t(data_start + 100)) == 0);
      CHECK(error_of([&] { convert(st); }) == changed);
    }
    {  // truncated to one byte short of the end: F32 "f" reads whole, the size differs
      const SafeTensors st = fresh();
      REQUIRE(::truncate(path.c_str(), off_t(bytes.size() - 1)) == 0);
      CHECK(error_of([&] { convert(st); }) == changed);
    }
    {  // rewritten in place, same size (other bytes in the tensors): the modification time differs
      const SafeTensors st = fresh();
      const int fd = ::open(path.c_str(), O_WRONLY);
      REQUIRE(fd >= 0);
      const std::string junk(64, '\x7f');
      CHECK(::pwrite(fd, junk.data(), junk.size(), off_t(data_start + 8)) == ssize_t(junk.size()));
      ::close(fd);
      struct stat now{};
      REQUIRE(::stat(path.c_str(), &now) == 0);
      CHECK(size_t(now.st_size) == bytes.size());
      CHECK(error_of([&] { convert(st); }) == changed);
    }
  }
  {  // a copy shares the open file, and the check: the first conversion after the change refuses it
    const SafeTensors st = fresh();
    const SafeTensors copy = st;
    CHECK_NOTHROW(copy.to_f32_into(*copy.find("f"), out.data()));
    REQUIRE(::truncate(path.c_str(), off_t(bytes.size() - 2)) == 0);
    CHECK(error_of([&] { st.to_f32_into(*st.find("f"), out.data()); }) == changed);
    CHECK(error_of([&] { copy.to_f32_into(*copy.find("f"), out.data()); }) == changed);
  }
}

TEST_CASE("safetensors: every malformed file is one line naming the file and the cause") {
  test::ScratchDir dir;
  const std::string ok = header({tensor("a", "F32", "[2]", "[0,8]")});
  CHECK(ok == R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  CHECK_NOTHROW(SafeTensors::parse(file_bytes(ok, k8), "mem"));  // the base case is valid
  auto refused = [&](const std::string& h, const std::string& cause) { check_refused(dir, file_bytes(h, k8), cause); };

  check_refused(dir, "abc", "no 8-byte header length");
  check_refused(dir, file_bytes(ok, k8, 4096), "runs past the end of the file");
  check_refused(dir, file_bytes(ok, k8, 200000000), "exceeds the 100 MB limit");
  refused("{\"a\": [1, 2", "not valid JSON");
  refused("[1, 2]", "not a JSON object");
  refused(header({tensor("a", "F32", "[1]", "[0,4]"), tensor("a", "F32", "[1]", "[4,8]")}), "duplicate name \"a\"");
  refused(header({tensor("a", "F33", "[2]", "[0,8]")}), "unknown dtype \"F33\"");
  refused(header({tensor("a", "F32", "[3]", "[0,8]")}), "shape needs 12 bytes of F32, data_offsets give 8");
  refused(header({tensor("a", "F32", "[-2]", "[0,8]")}), "not a non-negative integer");
  refused(header({tensor("a", "F32", "[4]", "[0,16]")}), "out of range");
  refused(header({tensor("a", "F32", "[2]", "[0,8]"), tensor("b", "F32", "[1]", "[4,8]")}), "overlap");
  refused(header({tensor("a", "F32", "[1]", "[4,8]")}), "belong to no tensor");
  refused(header({tensor("a", "F32", "[1]", "[0,4]")}), "4 trailing bytes");
  refused(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", "unknown field \"x\"");
  refused(header({R"("__metadata__":{"k":1})", tensor("a", "F32", "[2]", "[0,8]")}), "is not a string");
  refused(R"({"a":{"dtype":"F32","shape":[2]}})", "needs dtype, shape and data_offsets");
  // nothing but spaces may follow the header's JSON object: not a NUL and garbage, not other whitespace
  refused(ok + std::string(1, '\0') + "garbage", "header contains a NUL byte");
  refused(ok + "\n  ", "bytes other than spaces after its JSON object");
  CHECK_NOTHROW(SafeTensors::parse(file_bytes(ok + "    ", k8), "mem"));  // space padding is the format's
  const std::string missing = dir.file("absent.safetensors");
  CHECK_THROWS_WITH_AS(SafeTensors::read(missing), doctest::Contains("cannot read"), Error);
}

TEST_CASE("safetensors: any single corrupted header byte is a clean Error or a valid file, never a crash") {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::string good = safetensors_bytes({{"x", {2, 3}, a.data()}, {"y", {2}, a.data()}}, {{"format", "pt"}});
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  int refused = 0;
  for (size_t i = 0; i < 8 + n; ++i)
    for (const char c : {'\0', '\xff', '"', '9', '-', '}', ','}) {
      std::string bad = good;
      bad[i] = c;
      try {
        SafeTensors::parse(bad, "mem");
      } catch (const Error&) {
        ++refused;
      }
    }
  CHECK(refused > 0);
  MESSAGE(refused << " of " << 7 * (8 + n) << " corrupted files refused");
}
