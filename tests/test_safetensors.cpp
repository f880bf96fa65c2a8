// safetensors reader and writer (include/xtrain/safetensors.h): the writer's bytes are deterministic
// and read back exactly; every malformed file the reader must refuse is crafted into a scratch
// directory and gives one line naming the file and the cause.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>

#include "test_tokenizer_util.h"
#include "xtrain/io.h"
#include "xtrain/error.h"
#include "xtrain/safetensors.h"

using namespace xtrain;

namespace {
// file_bytes: a safetensors file from a header text and a data section, length prefix included.
std::string file_bytes(const std::string& header, const std::string& data, uint64_t len_override = 0) {
  std::string out(8, '\0');
  const uint64_t n = len_override ? len_override : header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

// read_error: the message SafeTensors::read throws for these bytes written to a scratch file.
std::string read_error(const test::ScratchDir& dir, const std::string& bytes) {
  const std::string path = dir.file("bad.safetensors");
  write_file_atomic(path, bytes);
  try {
    SafeTensors::read(path);
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find('\n') == std::string::npos);  // one line
    CHECK(msg.find(path) != std::string::npos);  // names the file
    return msg;
  }
  FAIL("no error for a malformed file");
  return "";
}

const std::string k8(8, 'x');  // 8 data bytes: two F32, or one I64
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
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"h":{"dtype":"F16","shape":[3],"data_offsets":[4,10]},)"
      R"("p":{"dtype":"U8","shape":[6],"data_offsets":[10,16]}})";
  const SafeTensors st = SafeTensors::parse(file_bytes(h, data), "mem");
  CHECK(st.to_f32(*st.find("b")) == std::vector<float>{1.5f, -2.0f});
  const std::vector<float> f = st.to_f32(*st.find("h"));
  CHECK(f[0] == 1.5f);
  CHECK(f[1] == std::ldexp(1.0f, -24));
  CHECK((std::isinf(f[2]) && f[2] < 0));
  CHECK_THROWS_WITH_AS(st.to_f32(*st.find("p")), doctest::Contains("dtype U8"), Error);
}

TEST_CASE("safetensors: every malformed file is one line naming the file and the cause") {
  test::ScratchDir dir;
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  CHECK_NOTHROW(SafeTensors::parse(file_bytes(ok, k8), "mem"));  // the base case is valid

  CHECK(read_error(dir, "abc").find("no 8-byte header length") != std::string::npos);
  CHECK(read_error(dir, file_bytes(ok, k8, 4096)).find("runs past the end of the file") != std::string::npos);
  CHECK(read_error(dir, file_bytes(ok, k8, 200000000)).find("exceeds the 100 MB limit") != std::string::npos);
  CHECK(read_error(dir, file_bytes("{\"a\": [1, 2", k8)).find("not valid JSON") != std::string::npos);
  CHECK(read_error(dir, file_bytes("[1, 2]", k8)).find("not a JSON object") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", k8))
            .find("duplicate name \"a\"") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", k8))
            .find("unknown dtype \"F33\"") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", k8))
            .find("shape needs 12 bytes of F32, data_offsets give 8") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", k8))
            .find("not a non-negative integer") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", k8))
            .find("out of range") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", k8))
            .find("overlap") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", k8))
            .find("belong to no tensor") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", k8))
            .find("4 trailing bytes") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", k8))
            .find("unknown field \"x\"") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", k8))
            .find("is not a string") != std::string::npos);
  CHECK(read_error(dir, file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", k8)).find("needs dtype, shape and data_offsets") !=
        std::string::npos);
  // nothing but spaces may follow the header's JSON object: not a NUL and garbage, not other whitespace
  CHECK(read_error(dir, file_bytes(ok + std::string(1, '\0') + "garbage", k8)).find("header contains a NUL byte") !=
        std::string::npos);
  CHECK(read_error(dir, file_bytes(ok + "\n  ", k8)).find("bytes other than spaces after its JSON object") !=
        std::string::npos);
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
