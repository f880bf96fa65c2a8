// safetensors reader and writer (src/serve/safetensors.h). The checks follow the reference
// implementation (huggingface/safetensors, safetensors/src/tensor.rs: header limit 100 MB, offsets
// contiguous from 0 to the end of the buffer, byte size = elements x dtype size).
#include <xtrain/serve/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include <xtrain/backend/weight_upload.h>
#include <xtrain/core/error.h>
#include "core/echo.h"
#include "core/io.h"
#include "core/json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as host floats"
#endif

namespace xtrain {

namespace {
using json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100000000;  // reference implementation's MAX_HEADER_SIZE
// the reused buffer a file's BF16/F16 tensors and transposed tensors are read through: bounds the
// reader's memory beyond its destination; a multiple of every element size
constexpr size_t kChunkBytes = size_t(16) << 20;

// dtype_bytes: bytes per element of a safetensors dtype, 0 when unknown.
size_t dtype_bytes(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

namespace {
// check_size_before_reading: a file longer than its header describes (8 + header + the end of the
// last tensor) is refused from the header alone (`head`: the file's first 8 + header-length bytes),
// so gigabytes behind a small header are never read. Every other malformation (a shorter file, a
// bad entry) is left to parse_header(), which names it.
void check_size_before_reading(std::string_view head, uint64_t size, const std::string& path) {
  uint64_t n = 0;
  if (head.size() < 8) return;  // parse_header() names it
  std::memcpy(&n, head.data(), 8);
  if (n > kMaxHeaderBytes || n > size - 8 || head.size() != 8 + n) return;
  uint64_t end = 0;
  try {
    const json h = parse_json(head.substr(8), "safetensors " + path + ": header");
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
    return;  // parse_header() gives the same error
  }
  if (size - 8 - n > end)
    XT_FAIL("safetensors " << path << ": " << size - 8 - n - end << " trailing bytes: the file has " << size
                           << " bytes, its header describes " << 8 + n + end << " (8 + a header of " << n
                           << " + tensor data of " << end << "); not reading it");
}

// changed_message: the one line for a file that changed between open and the end of a read
std::string changed_message(const std::string& path) { return "safetensors " + path + ": truncated or rewritten while it was read"; }

// read_exact: bytes [off, off + len) of the open file into dst. A read that ends early (the file is
// shorter than it was at open) is the changed file's error; a failed read names its cause.
void read_exact(int fd, char* dst, size_t len, uint64_t off, const std::string& path) {
  while (len > 0) {
    const ssize_t got = ::pread(fd, dst, len, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) XT_FAIL("safetensors " << path << ": read failed: " << std::strerror(errno));
    if (got == 0) XT_FAIL(changed_message(path));
    dst += got, len -= static_cast<size_t>(got), off += static_cast<uint64_t>(got);
  }
}
}  // namespace

// Source: where the tensor bytes are. parse(): `bytes`, the whole file in memory. read(): the open
// file, read with pread (never mapped: a mapping of a file truncated by another process ends the
// reader with SIGBUS), its fstat at open to compare with after each tensor, and one reused buffer.
struct SafeTensors::Source {
  std::string bytes;
  UniqueFd fd;
  struct stat at_open{};
  std::mutex chunk_mutex;           // conversions of one file (copies share the Source) take turns on the buffer
  std::unique_ptr<char[]> chunk;  // kChunkBytes, allocated at the first use
};

size_t StEntry::count() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

SafeTensors SafeTensors::read(const std::string& path) {
  auto src = std::make_shared<Source>();
  std::string head;
  uint64_t size = 0;
  try {
    RegularFile f = open_regular_file(path, "cannot read " + path);
    src->fd = std::move(f.fd), src->at_open = f.st;
    size = static_cast<uint64_t>(f.st.st_size);
    // the tensors are read once, front to back (a hint; its failure changes nothing)
    ::posix_fadvise(src->fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  } catch (const Error& e) {
    XT_FAIL("safetensors " << e.what());
  }
  // the length prefix, then the header when its length is within the limits (parse_header names the rest)
  head.resize(static_cast<size_t>(std::min<uint64_t>(size, 8)));
  read_exact(src->fd.get(), head.data(), head.size(), 0, path);
  uint64_t n = 0;
  if (size >= 8) std::memcpy(&n, head.data(), 8);
  if (size >= 8 && n <= kMaxHeaderBytes && n <= size - 8) {
    head.resize(8 + n);
    read_exact(src->fd.get(), head.data() + 8, n, 8, path);
  }
  check_size_before_reading(head, size, path);
  SafeTensors st = parse_header(src, head, size, path);
  st.check_unchanged();  // the header read is the file's as it was opened
  return st;
}

SafeTensors SafeTensors::parse(std::string bytes, const std::string& label) {
  auto src = std::make_shared<Source>();
  src->bytes = std::move(bytes);
  const std::string_view view(src->bytes);
  return parse_header(src, view, view.size(), label);
}

void SafeTensors::check_unchanged() const {
  if (src_->fd.get() < 0) return;  // bytes in memory
  struct stat now{};
  if (::fstat(src_->fd.get(), &now) != 0) XT_FAIL("safetensors " << label_ << ": fstat failed: " << std::strerror(errno));
  const struct stat& was = src_->at_open;
  // a truncation or an extension changes the size; a rewrite in place, the modification and change times
  // (at the file system's timestamp resolution: a rewrite within one clock tick of a write made just
  // before the open can leave both as they were)
  if (now.st_size != was.st_size || now.st_mtim.tv_sec != was.st_mtim.tv_sec || now.st_mtim.tv_nsec != was.st_mtim.tv_nsec ||
      now.st_ctim.tv_sec != was.st_ctim.tv_sec || now.st_ctim.tv_nsec != was.st_ctim.tv_nsec)
    XT_FAIL(changed_message(label_));
}

SafeTensors SafeTensors::parse_header(std::shared_ptr<Source> source, std::string_view b, uint64_t size, const std::string& label) {
  SafeTensors st;
  st.label_ = label;
  st.src_ = std::move(source);
  auto fail = [&](const std::string& why) { XT_FAIL("safetensors " << label << ": " << why); };
  if (size < 8) fail("file of " + std::to_string(size) + " bytes has no 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  if (n > kMaxHeaderBytes) fail("header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
  XT_CHECK(b.size() >= 8 + n, "safetensors " << label << ": the header was not read");  // read() and parse() pass it whole
  st.data_start_ = 8 + n;
  const size_t data_bytes = size - st.data_start_;
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
WireDType wide_of(const StEntry& e, const std::string& label) {
  if (e.dtype == "F32") return WireDType::f32;
  if (e.dtype == "BF16") return WireDType::bf16;
  if (e.dtype == "F16") return WireDType::f16;
  XT_FAIL("safetensors " << label << ": tensor \"" << e.name << "\" has dtype " << e.dtype << ", expected F32, BF16 or F16");
}
}  // namespace

std::vector<float> SafeTensors::to_f32(const StEntry& e) const {
  wide_of(e, label_);  // the dtype's error before allocating
  std::vector<float> out(e.count());
  to_f32_into(e, out.data());
  return out;
}

void SafeTensors::read_parts(const StEntry& e, size_t esize, size_t part_count,
                             const std::function<void(const char* p, size_t i0, size_t i1)>& convert) const {
  const size_t n = e.count();
  if (src_->fd.get() < 0) {  // bytes in memory: the whole tensor is one part
    convert(src_->bytes.data() + data_start_ + e.begin, 0, n);
    return;
  }
  std::lock_guard<std::mutex> lock(src_->chunk_mutex);
  if (!src_->chunk) src_->chunk.reset(new char[kChunkBytes]);
  for (size_t i0 = 0; i0 < n; i0 += part_count) {
    const size_t i1 = std::min(n, i0 + part_count);
    read_exact(src_->fd.get(), src_->chunk.get(), (i1 - i0) * esize, data_start_ + e.begin + i0 * esize, label_);
    convert(src_->chunk.get(), i0, i1);
  }
  check_unchanged();
}

void SafeTensors::to_f32_into(const StEntry& e, float* dst) const {
  const WireDType w = wide_of(e, label_);
  const size_t n = e.count();
  if (w == WireDType::f32 && src_->fd.get() >= 0) {  // F32 from the file: read straight into dst, no buffer
    read_exact(src_->fd.get(), reinterpret_cast<char*>(dst), n * 4, data_start_ + e.begin, label_);
    check_unchanged();
    return;
  }
  read_parts(e, wire_bytes(w), kChunkBytes / wire_bytes(w),
             [&](const char* p, size_t i0, size_t i1) { convert_weight_part(p, {dst, i0, i1, 1, n, w, false}); });
}

namespace {
// part_elements: elements per part of at most `bytes`: whole bands of 64 rows where a band fits and the
// tensor is transposed (convert_weight_part's tiles are then not cut)
size_t part_elements(size_t bytes, WireDType w, bool transpose, size_t B) {
  size_t part = bytes / wire_bytes(w);
  if (transpose && B > 0 && part >= 64 * B) part -= part % (64 * B);
  return part;
}
}  // namespace

void SafeTensors::to_f32_transposed_into(const StEntry& e, float* dst) const {
  const WireDType w = wide_of(e, label_);
  if (e.shape.size() != 2)
    XT_FAIL("safetensors " << label_ << ": tensor \"" << e.name << "\" has " << e.shape.size() << " dimensions, expected 2 to transpose");
  const size_t A = size_t(e.shape[0]), B = size_t(e.shape[1]);
  read_parts(e, wire_bytes(w), part_elements(kChunkBytes, w, true, B),
             [&](const char* p, size_t i0, size_t i1) { convert_weight_part(p, {dst, i0, i1, A, B, w, true}); });
}

void SafeTensors::upload_into(const StEntry& e, float* dst, bool transpose, WeightUpload& up) const {
  const WireDType w = wide_of(e, label_);
  if (transpose && e.shape.size() != 2)
    XT_FAIL("safetensors " << label_ << ": tensor \"" << e.name << "\" has " << e.shape.size() << " dimensions, expected 2 to transpose");
  const size_t n = e.count(), esize = wire_bytes(w);
  const size_t A = transpose ? size_t(e.shape[0]) : 1, B = transpose ? size_t(e.shape[1]) : n;
  const size_t part = part_elements(up.capacity_bytes(), w, transpose, B);
  XT_CHECK(part > 0, "a weight upload buffer of " << up.capacity_bytes() << " bytes");
  for (size_t i0 = 0; i0 < n; i0 += part) {
    const size_t i1 = std::min(n, i0 + part);
    char* buf = up.buffer();
    const uint64_t at = data_start_ + e.begin + i0 * esize;
    if (src_->fd.get() < 0) std::memcpy(buf, src_->bytes.data() + at, (i1 - i0) * esize);
    else read_exact(src_->fd.get(), buf, (i1 - i0) * esize, at, label_);
    up.write({dst, i0, i1, A, B, w, transpose});
  }
  if (src_->fd.get() >= 0) check_unchanged();
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
