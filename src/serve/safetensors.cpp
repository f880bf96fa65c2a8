// safetensors reader and writer (src/serve/safetensors.h). The checks follow the reference
// implementation (huggingface/safetensors, safetensors/src/tensor.rs: header limit 100 MB, offsets
// contiguous from 0 to the end of the buffer, byte size = elements x dtype size).
#include <xtrain/serve/safetensors.h>

#include <algorithm>
#include <cstring>
#include <unistd.h>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include <xtrain/core/error.h>
#include "core/echo.h"
#include "core/io.h"
#include "core/json.h"
#include "core/mapped_file.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as host floats"
#endif

namespace xtrain {

namespace {
using json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100000000;  // reference implementation's MAX_HEADER_SIZE

// dtype_bytes: bytes per element of a safetensors dtype, 0 when unknown.
size_t dtype_bytes(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE 754 binary16 -> binary32, exact (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    uint32_t m = man;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

namespace {
// check_size_before_reading: a file longer than its header describes (8 + header + the end of the
// last tensor) is refused from the header alone, so gigabytes behind a small header are never read.
// Every other malformation (a shorter file, a bad entry) is left to parse(), which names it.
void check_size_before_reading(const std::string& path) {
  RegularFile f = open_regular_file(path, "cannot read " + path);
  const uint64_t size = static_cast<uint64_t>(f.st.st_size);
  uint64_t n = 0;
  if (size < 8 || ::pread(f.fd.get(), &n, 8, 0) != 8 || n > kMaxHeaderBytes || n > size - 8) return;  // parse() names it
  std::string header(n, '\0');
  if (::pread(f.fd.get(), header.data(), n, 8) != static_cast<ssize_t>(n)) return;
  uint64_t end = 0;
  try {
    const json h = parse_json(header, "safetensors " + path + ": header");
    if (!h.is_object()) return;
    for (auto it = h.begin(); it != h.end(); ++it) {
      const json& v = it.value();
      if (it.key() == "__metadata__") continue;
      if (!v.is_object() || !v.contains("data_offsets")) return;
      const json& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[1].is_number_unsigned()) return;
      end = std::max(end, off[1].get<uint64_t>());
    }
  } catch (const Error&) {
    return;  // parse() gives the same error once the file is read (a header is at most 100 MB)
  }
  if (size - 8 - n > end)
    XT_FAIL("safetensors " << path << ": " << size - 8 - n - end << " trailing bytes: the file has " << size
                           << " bytes, its header describes " << 8 + n + end << " (8 + a header of " << n
                           << " + tensor data of " << end << "); not reading it");
}
}  // namespace

size_t StEntry::count() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

SafeTensors SafeTensors::read(const std::string& path) {
  std::shared_ptr<MappedFile> file;
  try {
    check_size_before_reading(path);
    // mapped, not read: the weights are converted from the page cache into their destination once
    // (to_f32_into), where reading the file would first copy all of it into a heap buffer
    file = std::make_shared<MappedFile>(MappedFile::map(path, "cannot read " + path));
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.rfind("safetensors ", 0) == 0) throw;
    XT_FAIL("safetensors " << what);
  }
  const std::string_view bytes = file->bytes();
  return parse_owned(std::move(file), bytes, path);
}

SafeTensors SafeTensors::parse(std::string bytes, const std::string& label) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  const std::string_view view(*owned);
  return parse_owned(std::move(owned), view, label);
}

SafeTensors SafeTensors::parse_owned(std::shared_ptr<const void> owner, std::string_view bytes, const std::string& label) {
  SafeTensors st;
  st.label_ = label;
  st.owner_ = std::move(owner);
  st.bytes_ = bytes;
  const std::string_view b = st.bytes_;
  auto fail = [&](const std::string& why) { XT_FAIL("safetensors " << label << ": " << why); };
  if (b.size() < 8) fail("file of " + std::to_string(b.size()) + " bytes has no 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > b.size() - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(b.size()) + " bytes)");
  st.data_start_ = 8 + n;
  const size_t data_bytes = b.size() - st.data_start_;
  // The header is one JSON object padded with spaces only (the format's padding): nlohmann would stop
  // at a NUL byte and accept what follows, and would take other whitespace as padding (checked below).
  if (std::memchr(b.data() + 8, '\0', n) != nullptr) fail("header contains a NUL byte");

  // Duplicate keys: nlohmann keeps the last silently, so the parser callback records them.
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) open.emplace_back();
    else if (ev == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    else if (ev == json::parse_event_t::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
             duplicate.empty())
      duplicate = parsed.get<std::string>();
  };
  // bounded in depth (core/json.h): a deep header cannot overflow the stack of a later copy or dump
  const json h = parse_json(std::string_view(b.data() + 8, n), "safetensors " + label + ": header", cb);
  if (!duplicate.empty()) fail("duplicate name \"" + echo_value(duplicate) + "\" in the header");
  if (!h.is_object()) fail("header is not a JSON object");
  const size_t last = b.find_last_not_of(' ', 8 + n - 1);
  if (last == std::string_view::npos || last < 8 || b[last] != '}') fail("header has bytes other than spaces after its JSON object");

  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("__metadata__ value of \"" + echo_value(m.key()) + "\" is not a string");
        st.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + echo_value(name) + "\": ";
    if (!v.is_object()) fail(where + "entry is not an object");
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") fail(where + "unknown field \"" + echo_value(f.key()) + "\"");
    if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(where + "needs dtype, shape and data_offsets");
    StEntry e;
    e.name = name;
    if (!v["dtype"].is_string()) fail(where + "dtype is not a string");
    e.dtype = v["dtype"].get<std::string>();
    const size_t esize = dtype_bytes(e.dtype);
    if (esize == 0) fail(where + "unknown dtype \"" + echo_value(e.dtype) + "\"");
    if (!v["shape"].is_array()) fail(where + "shape is not an array");
    size_t count = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail(where + "shape has a dimension that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && count > std::numeric_limits<size_t>::max() / esize / dim) fail(where + "shape overflows");
      count *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(where + "data_offsets is not a pair of non-negative integers");
    const uint64_t lo = off[0].get<uint64_t>(), hi = off[1].get<uint64_t>();
    if (lo > hi || hi > data_bytes)
      fail(where + "data_offsets [" + std::to_string(lo) + ", " + std::to_string(hi) + "] out of range (data section of " +
           std::to_string(data_bytes) + " bytes)");
    if (hi - lo != count * esize)
      fail(where + "shape needs " + std::to_string(count * esize) + " bytes of " + e.dtype + ", data_offsets give " +
           std::to_string(hi - lo));
    e.begin = lo, e.end = hi;
    st.entries_.push_back(std::move(e));
  }
  // The data section is covered exactly: sorted by offset, each tensor starts where the last ended.
  std::vector<const StEntry*> by_off;
  for (const StEntry& e : st.entries_) by_off.push_back(&e);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* c) { return a->begin != c->begin ? a->begin < c->begin : a->end < c->end; });
  size_t pos = 0;
  const StEntry* prev = nullptr;
  for (const StEntry* e : by_off) {
    if (e->begin < pos) fail("tensors \"" + prev->name + "\" and \"" + e->name + "\" overlap");
    if (e->begin > pos) fail("bytes [" + std::to_string(pos) + ", " + std::to_string(e->begin) + ") of the data section belong to no tensor");
    pos = e->end, prev = e;
  }
  if (pos != data_bytes) fail(std::to_string(data_bytes - pos) + " trailing bytes after the last tensor");
  return st;  // entries_ are in name order: json objects iterate sorted
}

const StEntry* SafeTensors::find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name, [](const StEntry& e, const std::string& n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

namespace {
enum class Wide { f32, bf16, f16 };

// element: element i of a tensor of dtype w at p, as fp32 (exact for each of the three)
inline float element(const char* p, size_t i, Wide w) {
  float f;
  if (w == Wide::f32) {
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  if (w == Wide::f16) return half_to_float(h);
  const uint32_t bits = uint32_t(h) << 16;  // bfloat16 is the top half of a binary32
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace

namespace {
Wide wide_of(const StEntry& e, const std::string& label) {
  if (e.dtype == "F32") return Wide::f32;
  if (e.dtype == "BF16") return Wide::bf16;
  if (e.dtype == "F16") return Wide::f16;
  XT_FAIL("safetensors " << label << ": tensor \"" << e.name << "\" has dtype " << e.dtype << ", expected F32, BF16 or F16");
}
}  // namespace

std::vector<float> SafeTensors::to_f32(const StEntry& e) const {
  wide_of(e, label_);  // the dtype's error before allocating
  std::vector<float> out(e.count());
  to_f32_into(e, out.data());
  return out;
}

void SafeTensors::to_f32_into(const StEntry& e, float* dst) const {
  const Wide w = wide_of(e, label_);
  const char* p = bytes_.data() + data_start_ + e.begin;
  const size_t n = e.count();
  if (w == Wide::f32) {
    if (n) std::memcpy(dst, p, n * 4);
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = element(p, i, w);
}

void SafeTensors::to_f32_transposed_into(const StEntry& e, float* dst) const {
  const Wide w = wide_of(e, label_);
  if (e.shape.size() != 2)
    XT_FAIL("safetensors " << label_ << ": tensor \"" << e.name << "\" has " << e.shape.size() << " dimensions, expected 2 to transpose");
  const size_t A = size_t(e.shape[0]), B = size_t(e.shape[1]);
  const char* p = bytes_.data() + data_start_ + e.begin;
  // in tiles of kTile x kTile elements: both the rows read and the rows written stay in cache
  constexpr size_t kTile = 64;
  for (size_t a0 = 0; a0 < A; a0 += kTile)
    for (size_t b0 = 0; b0 < B; b0 += kTile) {
      const size_t a1 = std::min(A, a0 + kTile), b1 = std::min(B, b0 + kTile);
      for (size_t a = a0; a < a1; ++a)
        for (size_t b = b0; b < b1; ++b) dst[b * A + a] = element(p, a * B + b, w);
    }
}

std::string safetensors_bytes(std::vector<StTensorF32> tensors, const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(), [](const StTensorF32& a, const StTensorF32& b) { return a.name < b.name; });
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const StTensorF32& t = tensors[i];
    XT_CHECK(t.name != "__metadata__" && (i == 0 || tensors[i - 1].name != t.name), "bad or duplicate tensor name " << t.name);
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    XT_CHECK(t.data != nullptr || n == 0, "tensor " << t.name << " has no data");
    h[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  std::string header = h.dump();  // compact; std::map keys: sorted
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  out.reserve(8 + header.size() + off);
  out += header;
  for (const StTensorF32& t : tensors) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    out.append(reinterpret_cast<const char*>(t.data), 4 * n);
  }
  return out;
}

}  // namespace xtrain
