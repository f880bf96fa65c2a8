// safetensors files (the Hugging Face format, https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin,
// end]}, optional "__metadata__": {string: string}}, then the tensor bytes (offsets relative to the
// end of the header). A strict reader (every malformed case is a one-line Error) and a deterministic
// writer (same tensors -> same bytes, whatever the machine or build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xtrain {

class WeightUpload;  // xtrain/backend/weight_upload.h

// One tensor entry of a safetensors header. Bytes are [begin, end) of the data section.
struct StEntry {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "I64", ... (the format's names)
  std::vector<int64_t> shape;  // row-major; {} is a scalar
  size_t begin = 0, end = 0;   // bytes, relative to the start of the data section
  size_t count() const;        // elements = product of shape (1 for a scalar)
};

// A parsed file, header validated: read() reads the header and keeps the file open (each conversion
// below reads its tensor's bytes then, with pread, in bounded parts), parse() keeps the bytes it is given.
class SafeTensors {
 public:
  // read: parses `path`. Throws Error "safetensors <path>: <cause>" for a missing/unreadable file, a
  // header length past the end of the file or over 100 MB (the reference implementation's limit), a
  // header that is not a JSON object, a duplicate name, an entry without/with unknown fields, an
  // unknown dtype, a negative or non-integer dimension, data_offsets out of range, overlapping, not
  // covering the data section exactly (no gaps, no trailing bytes), or a byte size that does not
  // equal count x dtype size, or __metadata__ values that are not strings.
  static SafeTensors read(const std::string& path);
  // parse: the same checks on bytes already in memory; `label` names them in errors.
  static SafeTensors parse(std::string bytes, const std::string& label);

  const std::vector<StEntry>& entries() const { return entries_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StEntry* find(const std::string& name) const;  // nullptr when absent
  // to_f32: the tensor's elements converted to fp32 (from F32 exactly, or from F16/BF16 exactly;
  // Error naming the tensor for other dtypes). Row-major, count() elements.
  std::vector<float> to_f32(const StEntry& e) const;
  // to_f32_into: the same elements written to dst (count() floats), converted straight from the file's
  // bytes: F32 read into dst, BF16/F16 through one reused 16 MiB buffer (so memory stays bounded). to_f32_transposed_into: a 2-D tensor of shape [A, B] written to dst as its (B, A) transpose,
  // dst[b*A + a] = element (a, b) (a Conv1D weight (in, out) of GPT-2's files into xtrain's (out, in)).
  // Both throw the Error of to_f32 for another dtype; the transposed one also for a tensor that is not 2-D.
  // For a read() file, all three throw "safetensors <path>: truncated or rewritten while it was read"
  // when a read ends before the tensor does, or when the file's size, modification or change time
  // (fstat) differ after the read from those at open; a failed read is "safetensors <path>: read
  // failed: <strerror>". What dst holds after an Error is unspecified.
  void to_f32_into(const StEntry& e, float* dst) const;
  void to_f32_transposed_into(const StEntry& e, float* dst) const;
  // upload_into: the tensor written to dst (a backend's parameter memory) through `up`, as to_f32_into
  // (transpose: to_f32_transposed_into) writes it: read in parts of up.capacity_bytes() into up's
  // buffers, each part converted where up converts (the CUDA backend: on the device). The errors of
  // those two; the write of the last parts may still be in flight (up.finish() waits).
  void upload_into(const StEntry& e, float* dst, bool transpose, WeightUpload& up) const;
  const std::string& label() const { return label_; }

 private:
  struct Source;  // the bytes parse() was given, or read()'s open file (copies of a SafeTensors share it)
  // parse_header: the checks above on `head` (the file's first bytes, its header whole) and its size
  static SafeTensors parse_header(std::shared_ptr<Source> source, std::string_view head, uint64_t size, const std::string& label);
  // read_parts: convert(p, i0, i1) for consecutive element ranges [i0, i1) of e (at most part_count
  // elements of esize bytes each), p pointing at element i0's bytes; then check_unchanged()
  void read_parts(const StEntry& e, size_t esize, size_t part_count,
                  const std::function<void(const char* p, size_t i0, size_t i1)>& convert) const;
  void check_unchanged() const;  // Error when read()'s file differs from what it was at open
  std::string label_;
  std::shared_ptr<Source> src_;
  size_t data_start_ = 0;  // 8 + header length
  std::vector<StEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// One fp32 tensor to write; data points at count(shape) floats that outlive the call.
struct StTensorF32 {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// safetensors_bytes: the file's bytes. Deterministic: tensors in name order with consecutive offsets,
// the header JSON compact with sorted keys, padded with spaces to a multiple of 8 bytes (so the data
// section is 8-byte aligned, as the reference writer does). Throws Error for duplicate names, the
// reserved name "__metadata__", or a null data pointer.
std::string safetensors_bytes(std::vector<StTensorF32> tensors, const std::map<std::string, std::string>& metadata);

}  // namespace xtrain
