// The checkpoint file format (<xtrain/checkpoint/checkpoint.h>): writing, parsing and checking a file.
// Layout (little-endian, native struct packing of fixed-width fields):
//   char magic[8] = "XTCKPT04" (format version in the last two characters); u32 header_bytes;
//   CheckpointMeta fields one by one (kMetaFields, checkpoint.h); float params[n]; float m[n]; float v[n];
//   float momentum[muon_count]; u64 XXH3-64 (seed 0) of all bytes before it.
// Version 03 added the schedule (lr, min_lr_frac, weight_decay, grad_clip, warmup) to the metadata; a model
// other than gpt2 adds the family's fields after them (MetaPart::family; header_bytes says whether).
// Version 04 adds the optimizer's fields (MetaPart::optim) and Muon's momentum; version 03 is still read
// (an AdamW run: no momentum). Others (01: FNV-1a 64 checksum; 02: no schedule) are refused with one line
// naming both.
#include <xtrain/checkpoint/checkpoint.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/core/log.h>
#include <xtrain/core/progress.h>

namespace xtrain {

namespace {
constexpr char kMagic[8] = {'X', 'T', 'C', 'K', 'P', 'T', '0', '4'};
constexpr char kMagic03[8] = {'X', 'T', 'C', 'K', 'P', 'T', '0', '3'};  // read: an AdamW run
constexpr size_t kMagicStem = 6;  // "XTCKPT"; the last two characters are the format version

struct Writer {
  std::string buf;
  template <typename T>
  void put(const T& x) { buf.append(reinterpret_cast<const char*>(&x), sizeof(T)); }
  void put_floats(const std::vector<float>& v) {
    buf.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
};

struct Reader {
  const std::string& buf;
  size_t pos = 0;
  const std::string& path;
  void get(void* to, size_t bytes) {
    if (pos + bytes > buf.size()) XT_FAIL("checkpoint " << path << ": truncated (header)");
    std::memcpy(to, buf.data() + pos, bytes);
    pos += bytes;
  }
  template <typename T>
  T get() {
    T x;
    get(&x, sizeof(T));
    return x;
  }
};

// The bytes of field f in m (a row of kMetaFields: its offset and size are those of the member).
const char* field_bytes(const CheckpointMeta& m, const MetaField& f) {
  return reinterpret_cast<const char*>(&m) + f.offset;
}
template <typename T>
T field_value(const CheckpointMeta& m, const MetaField& f) {
  T x;
  static_assert(std::is_trivially_copyable_v<T>);
  XT_CHECK(sizeof(T) == f.bytes(), "checkpoint field " << f.name << ": read as another type");
  std::memcpy(&x, field_bytes(m, f), sizeof(T));
  return x;
}
}  // namespace

std::string field_text(const CheckpointMeta& m, const MetaField& f) {
  std::ostringstream os;
  const bool hash = f.offset == offsetof(CheckpointMeta, data_hash) || f.offset == offsetof(CheckpointMeta, tokenizer_fingerprint);
  // the option words of the enumerations (train/optim.h's order), as the user gave them
  static const char* const optimizers[] = {"adamw", "muon"}, *const schedules[] = {"cosine", "wsd", "linear"},
                           *const adjusts[] = {"original", "match_rms_adamw"};
  const auto word = [&](const char* const* words, int n) -> const char* {
    const int32_t v = field_value<int32_t>(m, f);
    return v >= 0 && v < n ? words[v] : nullptr;
  };
  const char* w = f.offset == offsetof(CheckpointMeta, optimizer)     ? word(optimizers, 2)
                  : f.offset == offsetof(CheckpointMeta, lr_schedule) ? word(schedules, 3)
                  : f.offset == offsetof(CheckpointMeta, muon_adjust) ? word(adjusts, 2)
                                                                      : nullptr;
  if (w) return w;
  switch (f.type) {
    case MetaType::i32: os << field_value<int32_t>(m, f); break;
    case MetaType::f32: os << field_value<float>(m, f); break;
    case MetaType::u64:
      if (hash) os << std::hex << std::setw(16) << std::setfill('0');
      os << field_value<uint64_t>(m, f);
      break;
  }
  return os.str();
}
bool fields_differ(const CheckpointMeta& a, const CheckpointMeta& b, const MetaField& f) {
  switch (f.type) {
    case MetaType::i32: return field_value<int32_t>(a, f) != field_value<int32_t>(b, f);
    case MetaType::f32: return field_value<float>(a, f) != field_value<float>(b, f);
    case MetaType::u64: return field_value<uint64_t>(a, f) != field_value<uint64_t>(b, f);
  }
  return true;
}

namespace {

// writes_part: whether a format-04 header of model m holds the rows of `part` (the family's: not for gpt2).
bool writes_part(const GPTConfig& m, MetaPart part) { return part != MetaPart::family || m.arch != Arch::gpt2; }

void put_meta(Writer& w, const CheckpointMeta& m) {
  for (const MetaField& f : kMetaFields)
    if (writes_part(m.model, f.part)) w.buf.append(field_bytes(m, f), f.bytes());
}

// get_meta: the header of header_bytes bytes: the base rows, then the family's when the size says so
// (otherwise their defaults: gpt2), then the optimizer's in format 04 (v04; otherwise their defaults:
// AdamW). Another size is left to the caller's check.
CheckpointMeta get_meta(Reader& r, uint32_t header_bytes, bool v04) {
  CheckpointMeta m;
  const size_t optim = v04 ? kMetaOptimBytes : 0;
  const bool family = header_bytes == kMetaBytes + kMetaFamilyBytes + optim;
  for (const MetaField& f : kMetaFields)
    if (f.part == MetaPart::base || (f.part == MetaPart::family && family) || (f.part == MetaPart::optim && v04))
      r.get(reinterpret_cast<char*>(&m) + f.offset, f.bytes());
  return m;
}

}  // namespace

uint64_t save_checkpoint(const std::string& path, const CheckpointState& st) {
  const size_t n = st.meta.num_params;
  check_model_config(st.meta.model, "checkpoint " + path + ": not written: the model");  // none the readers refuse
  XT_CHECK(st.params.size() == n && st.m.size() == n && st.v.size() == n && st.momentum.size() == st.meta.muon_count,
           "checkpoint state sizes");
  Writer w;
  w.buf.append(kMagic, sizeof(kMagic));
  Writer meta;
  put_meta(meta, st.meta);
  w.put(static_cast<uint32_t>(meta.buf.size()));
  w.buf += meta.buf;
  w.put_floats(st.params);
  w.put_floats(st.m);
  w.put_floats(st.v);
  w.put_floats(st.momentum);
  const uint64_t checksum = xxh3_64(w.buf.data(), w.buf.size());
  w.put(checksum);
  Progress progress("write " + path, w.buf.size(), 0, long_work_options());
  write_file_atomic(path, w.buf, "checkpoint", [&](size_t done) { progress.update(done); });
  progress.finish();
  return checksum;
}

namespace {
// check_meta: the header's own fields are plausible (the checksum only proves the bytes are the ones
// written, not that a writer put sane values in them). Matching them against THIS run's model and
// options is restore_checkpoint's job.
void check_meta(const CheckpointMeta& m, const std::string& path) {
  auto bad = [&](const char* what, auto value) {
    XT_FAIL("checkpoint " << path << ": header field " << what << " = " << value << " is out of range (damaged file?)");
  };
  for (const MetaField& f : kMetaFields) {
    bool ok = true;
    switch (f.range) {
      case MetaRange::any: break;
      case MetaRange::positive:
        ok = f.type == MetaType::u64   ? field_value<uint64_t>(m, f) > 0
             : f.type == MetaType::f32 ? field_value<float>(m, f) > 0.0f
                                       : field_value<int32_t>(m, f) > 0;
        break;
      case MetaRange::step: ok = field_value<int32_t>(m, f) >= 0; break;
      case MetaRange::grad_accum: ok = field_value<int32_t>(m, f) > 0 && field_value<int32_t>(m, f) <= m.batch; break;
      case MetaRange::fraction: ok = field_value<float>(m, f) >= 0.0f && field_value<float>(m, f) < 1.0f; break;
      case MetaRange::arch:  // one of the families (kFamilyTraits: one row per Arch, in order)
        ok = field_value<int32_t>(m, f) >= 0 && size_t(field_value<int32_t>(m, f)) < std::size(kFamilyTraits);
        break;
      case MetaRange::flag: ok = field_value<int32_t>(m, f) == 0 || field_value<int32_t>(m, f) == 1; break;
      case MetaRange::schedule: ok = field_value<int32_t>(m, f) >= 0 && field_value<int32_t>(m, f) <= 2; break;
    }
    if (!ok) bad(f.name, field_text(m, f));
  }
  // the model the header describes: one that xtrain builds (check_model_config, the check of config.json and
  // of exports too), holding the parameters the header counts; so --resume, xtrain_generate and
  // xtrain_export refuse the same files with the same line
  check_model_config(m.model, "checkpoint " + path + ": the model in its header (" + m.model.describe() + ") is invalid");
  if (m.num_params != m.model.num_params())
    XT_FAIL("checkpoint " << path << ": header field num_params = " << m.num_params << " does not match its model (" << m.model.describe()
                          << (m.model.llama() ? "" : " arch=gpt2") << "), which has " << m.model.num_params()
                          << " parameters (damaged file?)");
}
// parse_header: the header of a checkpoint file of file_size bytes whose first bytes (all of them, or its
// head) are buf: magic, version, header size, and the file size against the header's parameter count.
// Returns the header; *body_at = where the parameters start.
CheckpointMeta parse_header(const std::string& buf, size_t file_size, const std::string& path, size_t* body_at) {
  if (buf.size() < sizeof(kMagic) + 4 || std::memcmp(buf.data(), kMagic, kMagicStem) != 0)
    XT_FAIL("checkpoint " << path << ": not an xtrain checkpoint (bad magic)");
  const bool v04 = std::memcmp(buf.data(), kMagic, sizeof(kMagic)) == 0;
  if (!v04 && std::memcmp(buf.data(), kMagic03, sizeof(kMagic03)) != 0)
    XT_FAIL("checkpoint " << path << ": format version " << buf.substr(kMagicStem, 2) << ", this xtrain reads version "
                          << std::string(kMagic03 + kMagicStem, 2) << " and " << std::string(kMagic + kMagicStem, 2)
                          << " only (written by another xtrain version)");
  Reader r{buf, sizeof(kMagic), path};
  const uint32_t header_bytes = r.get<uint32_t>();
  const size_t meta_start = r.pos;
  const CheckpointMeta meta = get_meta(r, header_bytes, v04);
  if (r.pos - meta_start != header_bytes)
    XT_FAIL("checkpoint " << path << ": header of " << header_bytes << " bytes, expected " << (r.pos - meta_start)
                          << " (written by another xtrain version)");
  // The size check comes before anything else reads num_params, and cannot overflow: n is compared
  // against what the file holds, not multiplied first.
  const uint64_t n = meta.num_params, k = meta.muon_count;
  // Muon's state covers some of the parameters: k <= n, so the floats (3n + k <= 4n) are bounded as n is
  if (k > n)
    XT_FAIL("checkpoint " << path << ": header field muon_count = " << k << " is out of range (more than the "
                          << n << " parameters; damaged file?)");
  const size_t body = file_size - r.pos;  // >= 0: get_meta read r.pos bytes of the file
  if (body < sizeof(uint64_t) || n > (body - sizeof(uint64_t)) / (3 * sizeof(float)) ||
      body != (3 * n + k) * sizeof(float) + sizeof(uint64_t)) {
    const bool fits = n <= (SIZE_MAX - r.pos - sizeof(uint64_t)) / (4 * sizeof(float));
    if (!fits) XT_FAIL("checkpoint " << path << ": header claims " << n << " parameters, more than any file can hold");
    const size_t expect = r.pos + (3 * n + k) * sizeof(float) + sizeof(uint64_t);
    XT_FAIL("checkpoint " << path << ": " << file_size << " bytes, expected " << expect << " for " << n
                          << " parameters" << (k ? " and " + std::to_string(k) + " Muon momentum values" : std::string())
                          << (file_size < expect ? " (truncated)" : " (trailing bytes)"));
  }
  *body_at = r.pos;
  return meta;
}

}  // namespace

CheckpointState parse_checkpoint(const std::string& buf, const std::string& path) {
  size_t at = 0;
  CheckpointState st;
  st.meta = parse_header(buf, buf.size(), path, &at);
  const uint64_t n = st.meta.num_params;
  Reader r{buf, at, path};
  uint64_t stored;
  std::memcpy(&stored, buf.data() + buf.size() - sizeof(uint64_t), sizeof(stored));
  if (stored != xxh3_64(buf.data(), buf.size() - sizeof(uint64_t)))
    XT_FAIL("checkpoint " << path << ": checksum mismatch (file is corrupt)");
  check_meta(st.meta, path);
  for (std::vector<float>* v : {&st.params, &st.m, &st.v}) {
    v->resize(n);  // n > 0 (check_meta): data() is not null, as memcpy requires
    std::memcpy(v->data(), buf.data() + r.pos, n * sizeof(float));
    r.pos += n * sizeof(float);
  }
  st.momentum.resize(st.meta.muon_count);  // <= n (parse_header)
  if (!st.momentum.empty()) std::memcpy(st.momentum.data(), buf.data() + r.pos, st.momentum.size() * sizeof(float));
  return st;
}

namespace {
// open_checkpoint: `path` opened for reading, *sb its fstat; only a regular file (open_regular_file,
// io.h), Error "checkpoint <path>: cannot read: ..." otherwise.
std::unique_ptr<std::FILE, int (*)(std::FILE*)> open_checkpoint(const std::string& path, struct stat* sb) {
  const std::string what = "checkpoint " + path + ": cannot read";
  RegularFile file = open_regular_file(path, what);
  std::FILE* f = ::fdopen(file.fd.get(), "rb");
  if (!f) XT_FAIL(what << ": " << std::strerror(errno));
  file.fd.release();  // f owns it now
  *sb = file.st;
  return std::unique_ptr<std::FILE, int (*)(std::FILE*)>(f, std::fclose);
}
}  // namespace

CheckpointState load_checkpoint(const std::string& path, int rank, const ProgressOptions& progress_options) {
  std::string buf;
  {
    struct stat sb{};
    const auto closer = open_checkpoint(path, &sb);
    std::FILE* f = closer.get();
    buf.resize(static_cast<size_t>(sb.st_size));
    Progress progress("read " + path, buf.size(), rank, progress_options);
    for (size_t done = 0; done < buf.size();) {  // chunks of kCheckpointChunkBytes, a progress report after each
      const size_t k = std::fread(&buf[done], 1, std::min(kCheckpointChunkBytes, buf.size() - done), f);
      if (k == 0) {
        if (std::ferror(f)) XT_FAIL("checkpoint " << path << ": read failed: " << std::strerror(errno));
        buf.resize(done);  // shorter than fstat said (changed while reading): the size check below names it
        break;
      }
      done += k;
      progress.update(done);
    }
    progress.finish();
  }
  return parse_checkpoint(buf, path);
}

CheckpointMeta check_checkpoint_file(const std::string& path) {
  struct stat sb{};
  const auto f = open_checkpoint(path, &sb);
  std::string head(4096, '\0');  // the header is ~150 bytes
  head.resize(std::fread(&head[0], 1, head.size(), f.get()));
  if (std::ferror(f.get())) XT_FAIL("checkpoint " << path << ": read failed: " << std::strerror(errno));
  size_t at = 0;  // the size as read if the file changed since fstat (never less than its head)
  const size_t file_size = std::max(static_cast<size_t>(sb.st_size), head.size());
  const CheckpointMeta meta = parse_header(head, file_size, path, &at);
  check_meta(meta, path);
  return meta;
}

}  // namespace xtrain
