// JSON lines corpora, plain or zstd-compressed (see src/data/jsonl.h).
#include "data/jsonl.h"

#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/echo.h"
#include "core/host_memory.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include "core/json.h"

namespace xtrain {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// LineSplitter: bytes in, complete lines out (without '\n'); the last line may lack its '\n'. A line is at
// most kJsonMaxBytes (core/json.h): a longer one (a compressed run of bytes without a newline, a file
// that is not JSON lines) is refused before it grows, so a small .zst cannot make every rank hold gigabytes.
class LineSplitter {
 public:
  LineSplitter(std::string path, std::function<void(const std::string&)> on_line)
      : path_(std::move(path)), on_line_(std::move(on_line)) {}
  void feed(const char* p, size_t n) {
    for (size_t at = 0; at < n;) {
      const void* nl = std::memchr(p + at, '\n', n - at);
      const size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - p) : n;
      if (pending_.size() + (end - at) > kJsonMaxBytes)
        XT_FAIL(path_ << ":" << lines_ + 1 << ": a line longer than " << (kJsonMaxBytes >> 20)
                      << " MiB (JSON lines hold one document per line)");
      pending_.append(p + at, end - at);
      if (!nl) return;
      ++lines_;
      on_line_(pending_);
      pending_.clear();
      at = end + 1;
    }
  }
  void finish() {
    if (!pending_.empty()) on_line_(pending_);
    pending_.clear();
  }

 private:
  std::string path_;
  std::function<void(const std::string&)> on_line_;
  std::string pending_;
  size_t lines_ = 0;  // complete lines so far
};

// Chunks: a source of bytes: calls its argument with consecutive pieces, in order (a file read 1 MiB
// at a time, or bytes already in memory).
using ChunkFn = std::function<void(const char*, size_t)>;
using Chunks = std::function<void(const ChunkFn&)>;

// read_chunks: the file's bytes in order, 1 MiB at a time.
void read_chunks(const std::string& path, const ChunkFn& fn) {
  RegularFile file = open_regular_file(path, "cannot read " + path);
  std::string buf(size_t{1} << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(file.fd.get(), buf.data(), buf.size());
    if (n < 0) XT_FAIL("cannot read " << path << ": " << std::strerror(errno));
    if (n == 0) return;
    fn(buf.data(), static_cast<size_t>(n));
  }
}

// read_zstd: the decompressed bytes of zstd data (one or more frames) from `chunks`, streamed
// (ZSTD_decompressStream); path names the data in errors.
void read_zstd(const std::string& path, const Chunks& chunks, const ChunkFn& fn) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> ds(ZSTD_createDStream(), ZSTD_freeDStream);
  XT_CHECK(ds != nullptr, "ZSTD_createDStream failed");
  ZSTD_initDStream(ds.get());
  std::string out(ZSTD_DStreamOutSize(), '\0');
  size_t last = 0;  // 0 once a frame is complete (ZSTD_decompressStream's hint)
  bool any = false;
  chunks([&](const char* p, size_t n) {
    any = any || n > 0;
    ZSTD_inBuffer in{p, n, 0};
    while (in.pos < in.size) {
      ZSTD_outBuffer ob{out.data(), out.size(), 0};
      last = ZSTD_decompressStream(ds.get(), &ob, &in);
      if (ZSTD_isError(last)) XT_FAIL(path << ": corrupt zstd stream (" << ZSTD_getErrorName(last) << ")");
      fn(out.data(), ob.pos);
    }
  });
  // zstd does not consume a frame's last byte before it has flushed all of that frame's output
  // (zstd's examples/streaming_decompression.c), so the loop above loses nothing and last != 0 here
  // means the input ended inside a frame.
  if (any && last != 0) XT_FAIL(path << ": zstd stream ends mid-frame (truncated)");
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

bool is_jsonl_name(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.zst"); }

JsonlBound jsonl_bound() {
  JsonlBound b;
  b.available = available_host_memory_bytes();
  b.bytes = b.available > 0 ? b.available / kJsonlMemoryShare : SIZE_MAX;
  return b;
}

void jsonl_too_large(const std::string& path, const std::string& what, const JsonlBound& bound) {
  XT_FAIL(echo_value(path, 1024) << ": " << what << " the JSON lines bound of " << (bound.bytes >> 20)
                                 << " MiB (a quarter of the memory available, " << (bound.available >> 20)
                                 << " MiB): split it into smaller files (each is tokenized and cached on its own)");
}

namespace {

// decompressed_size: the bytes of the JSON lines data: plain_bytes for a plain file; for a .zst the
// bytes `chunks` decompresses to, counted up to the first chunk past `stop` (nothing kept: at GB/s).
size_t decompressed_size(const std::string& path, const Chunks& chunks, size_t plain_bytes, size_t stop) {
  if (!ends_with(path, ".zst")) return plain_bytes;
  // Thrown past `stop` to end the pass early; only this function sees it.
  struct Past {};
  size_t n = 0;
  try {
    read_zstd(path, chunks, [&](const char*, size_t k) {
      n += k;
      if (n > stop) throw Past{};
    });
  } catch (const Past&) {
  }
  return n;
}

// for_each_nonblank_line: the non-blank lines of the JSON lines data that `chunks` gives (zstd-compressed when
// path ends in ".zst"), as for_each_jsonl_line documents them, after the size check against bound.
void for_each_nonblank_line(const std::string& path, const Chunks& chunks, size_t plain_bytes, const LineFn& fn,
                   const JsonlBound& bound) {
  if (bound.bytes != SIZE_MAX) {
    const size_t n = decompressed_size(path, chunks, plain_bytes, bound.bytes);
    if (n > bound.bytes)
      jsonl_too_large(path, ends_with(path, ".zst") ? "decompresses to more than" : "holds " + std::to_string(n >> 20) + " MiB, more than",
                      bound);
  }
  size_t line_no = 0;
  LineSplitter lines(path, [&](const std::string& line) {
    ++line_no;
    if (!blank(line)) fn(line, line_no);
  });
  const ChunkFn feed = [&](const char* p, size_t n) { lines.feed(p, n); };
  if (ends_with(path, ".zst")) {
    read_zstd(path, chunks, feed);
  } else {
    chunks(feed);
  }
  lines.finish();
}

// parse_documents: the documents of the lines for_each_nonblank_line gives, as for_each_jsonl_document documents them.
void parse_documents(const std::string& path, const Chunks& chunks, size_t plain_bytes, const std::string& field,
                     const DocumentFn& fn, const JsonlBound& bound) {
  // the path and the field as error lines quote them (echo_value: one line, whatever they hold)
  const std::string where = echo_value(path, 1024), field_shown = echo_value(field);
  for_each_nonblank_line(path, chunks, plain_bytes, [&](std::string_view line, size_t line_no) {
    // the one bounded JSON reader (core/json.h): a deeply nested line is refused, never recursed into
    const nlohmann::json j = parse_json(line, where + ":" + std::to_string(line_no));
    if (!j.is_object()) XT_FAIL(where << ":" << line_no << ": not a JSON object (a " << j.type_name() << ")");
    const auto it = j.find(field);
    if (it == j.end()) XT_FAIL(where << ":" << line_no << ": no \"" << field_shown << "\" field (--jsonl-field)");
    if (!it->is_string())
      XT_FAIL(where << ":" << line_no << ": \"" << field_shown << "\" is a " << it->type_name() << ", not a string");
    fn(it->get_ref<const std::string&>(), line_no);
  }, bound);
}

// file_size_or_zero: the file's size on disk; 0 when it cannot be read (read_chunks then names it)
size_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size_t(size);
}

}  // namespace

void for_each_jsonl_document(const std::string& path, const std::string& field, const DocumentFn& fn,
                             const JsonlBound& bound) {
  parse_documents(path, [&](const ChunkFn& feed) { read_chunks(path, feed); }, file_size_or_zero(path), field, fn, bound);
}

void for_each_jsonl_line(const std::string& path, const LineFn& fn, const JsonlBound& bound) {
  for_each_nonblank_line(path, [&](const ChunkFn& feed) { read_chunks(path, feed); }, file_size_or_zero(path), fn, bound);
}

void for_each_jsonl_document(const std::string& path, std::string_view bytes, const std::string& field,
                             const DocumentFn& fn, const JsonlBound& bound) {
  parse_documents(path, [&](const ChunkFn& feed) { feed(bytes.data(), bytes.size()); }, bytes.size(), field, fn, bound);
}

}  // namespace xtrain
