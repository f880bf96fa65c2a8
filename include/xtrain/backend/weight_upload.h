// Weights from a file into a backend's parameter memory in parts, with no host copy of the whole model:
// the reader fills one host buffer (pinned on CUDA) while the part before it is copied and converted on
// the device (double-buffered). convert_weight_part is the host conversion: the CPU backend's, the
// safetensors reader's (src/serve/safetensors.cpp) and the oracle of the device's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <xtrain/backend/backend.h>

namespace xtrain {

// WireDType: an element type as a weights file stores it (safetensors F32, F16, BF16), each widened to
// fp32 exactly.
enum class WireDType { f32, f16, bf16 };
inline size_t wire_bytes(WireDType w) { return w == WireDType::f32 ? 4 : 2; }

// kWeightUploadBytes: the host buffer of make_weight_upload's parts (two of them on CUDA): large enough
// that a part's fixed costs (a copy's and a kernel's launch, a pread) are small beside it.
inline constexpr size_t kWeightUploadBytes = size_t(16) << 20;

// WeightPart: elements [i0, i1) of a row-major (A, B) tensor of dtype `wire` (its bytes in a host
// buffer, element i0 first), written into the fp32 tensor at dst as they are (dst[i] = element i) or,
// with transpose, as the (B, A) transpose (dst[b*A + a] = element (a, b): a Conv1D weight (in, out)
// of GPT-2's files into xtrain's (out, in)). A part may start and end mid-row.
struct WeightPart {
  float* dst = nullptr;  // the tensor's first element (count A*B)
  size_t i0 = 0, i1 = 0, A = 0, B = 0;
  WireDType wire = WireDType::f32;
  bool transpose = false;
};

// convert_weight_part: the part at `src` written on the host (dst is host memory).
void convert_weight_part(const char* src, const WeightPart& part);

// WeightUpload: the parts of a model's weights, in any order, into a backend's parameter memory.
// buffer(): the host buffer of capacity_bytes() to fill with the next part (on CUDA: pinned; waits until
// the device has taken what this buffer held two parts ago). write(part): the part's bytes at the start
// of the buffer last returned go to part.dst (CUDA: copied and converted on the device, asynchronously,
// in the backend's stream order). finish(): waits until every part is written; a device error is
// thrown there (or by the next buffer()). Destroying it unfinished waits too, never throws.
class WeightUpload {
 public:
  virtual ~WeightUpload() = default;
  virtual size_t capacity_bytes() const = 0;
  virtual char* buffer() = 0;
  virtual void write(const WeightPart& part) = 0;
  virtual void finish() = 0;
};

// make_weight_upload: be's WeightUpload (src/backend/registry.cpp: the one file that knows the
// backends): the CPU backend converts each part on the host into its parameters; the CUDA backend
// as above, with two pinned buffers; parts of kWeightUploadBytes.
std::unique_ptr<WeightUpload> make_weight_upload(Backend& be);

// make_host_weight_upload: the host implementation (one buffer, convert_weight_part): for backends
// whose parameter memory is host memory.
std::unique_ptr<WeightUpload> make_host_weight_upload(size_t capacity_bytes);

}  // namespace xtrain
