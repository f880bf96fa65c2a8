// Token files users bring already tokenized, memory-mapped read-only without re-tokenizing: llm.c's
// shards (a 256 x int32 header, then uint16 or uint32 ids) and nanoGPT's headerless uint16 train.bin;
// and the llm.c shard writer of xtrain_tokenize --shard-tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <xtrain/data/token_stream.h>

namespace xtrain {

// llm.c's token shard (karpathy/llm.c dev/data/data_common.py, write_datafile; read by
// llmc/dataloader.h): 256 little-endian int32 (1024 bytes): header[0] magic, header[1] version,
// header[2] token count; the rest 0. Then count ids: magic 20240520 version 1 ("gpt-2"): uint16;
// magic 20240801 version 7 ("llama-3"): uint32. The file ends there.
constexpr int32_t kLlmcMagicGpt2 = 20240520, kLlmcVersionGpt2 = 1;
constexpr int32_t kLlmcMagicLlama3 = 20240801, kLlmcVersionLlama3 = 7;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

// starts_with_llmc_magic: path's first 4 bytes are one of llm.c's two magics (false for anything
// else, including a file that cannot be read).
bool starts_with_llmc_magic(const std::string& path);

// open_llmc_shard: the ids of llm.c shard `path`, memory-mapped (the stream holds the mapping).
// Throws Error naming the path, one line: "llm.c shard <path>: ..." for a file shorter than the
// header ("truncated"), an unknown magic or version, a size other than 1024 + count x id bytes, or
// an id >= vocab_size (with its index).
TokenStream open_llmc_shard(const std::string& path, int vocab_size);

// open_nanogpt_bin: nanoGPT's train.bin/val.bin (data/*/prepare.py: np.uint16 ids, no header),
// memory-mapped. Throws Error "nanoGPT token file <path>: ..." for an odd size or an id >= vocab_size.
TokenStream open_nanogpt_bin(const std::string& path, int vocab_size);

// write_llmc_shard: ids [0, count) (each in [0, vocab_size)) as an llm.c shard, written atomically:
// uint16 with the GPT-2 magic when vocab_size <= 65536 (token_id_bytes), else uint32 with the Llama 3
// magic. Throws Error naming path for an id outside the vocabulary, count >= 2^31 (llm.c's int32
// count) or a failed write.
void write_llmc_shard(const std::string& path, const int32_t* ids, size_t count, int vocab_size);

}  // namespace xtrain
