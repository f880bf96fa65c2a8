// How attention_decode (attention_decode.cu) splits a position's cache rows over blocks. No CUDA header: the
// tests read it from here.
#pragma once

namespace xtrain::cuda {

// New position t's cache rows [0, t] are cut into chunks of max(kDecodeChunkRows, ceil((t + 1) / kDecodeMaxChunks))
// rows, one block each, whose partial softmax sums are combined in chunk order (Flash-Decoding); a short context
// is one chunk, with nothing to combine.
inline constexpr int kDecodeChunkRows = 128, kDecodeMaxChunks = 32;

}  // namespace xtrain::cuda
