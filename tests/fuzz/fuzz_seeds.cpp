// fuzz_seeds DIR: writes valid starting inputs for the fuzz targets into DIR/<target>/ (a checkpoint
// of a tiny model written by save_checkpoint; a safetensors file; the binary
// token files and a .jsonl.zst), so the fuzzer starts from the real format instead of discovering the
// magic and layout byte by byte. The text formats' seeds are files in tests/fuzz/seeds/<target>/.
#include <sys/stat.h>

#include <zstd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/io.h"
#include <xtrain/checkpoint/checkpoint.h>
#include "data/token_shard.h"
#include <xtrain/serve/safetensors.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  ::mkdir((dir + "/checkpoint").c_str(), 0755);
  xtrain::CheckpointState st;
  st.meta.model.V = 4, st.meta.model.maxT = 2, st.meta.model.C = 2, st.meta.model.L = 1;
  st.meta.model.NH = 1, st.meta.model.KVH = 1, st.meta.model.HS = 2, st.meta.model.F = 8;
  st.meta.step = 1, st.meta.batch = 2, st.meta.grad_accum = 1, st.meta.total_steps = 3;
  st.meta.num_params = st.meta.model.num_params();  // the reader refuses a count that is not its model's
  st.params.assign(st.meta.num_params, 0.5f), st.m.assign(st.meta.num_params, 0.0f), st.v.assign(st.meta.num_params, 1.0f);
  xtrain::save_checkpoint(dir + "/checkpoint/tiny.ckpt", st);
  ::mkdir((dir + "/safetensors").c_str(), 0755);
  const float w[6] = {1, 2, 3, 4, 5, 6};
  xtrain::write_file_atomic(dir + "/safetensors/tiny.safetensors",
                            xtrain::safetensors_bytes({{"w", {2, 3}, w}, {"b", {}, w}}, {{"format", "pt"}}),
                            "safetensors seed");
  // JSON lines compressed (the plain ones are in tests/fuzz/seeds/jsonl/)
  ::mkdir((dir + "/jsonl").c_str(), 0755);
  const std::string lines = "{\"text\": \"Hello world.\"}\n\n{\"text\": \"a second doc\\n\", \"id\": 2}\n";
  std::string zst(ZSTD_compressBound(lines.size()), '\0');
  const size_t zn = ZSTD_compress(zst.data(), zst.size(), lines.data(), lines.size(), 3);
  if (ZSTD_isError(zn)) return 1;
  zst.resize(zn);
  xtrain::write_file_atomic(dir + "/jsonl/docs.jsonl.zst", zst, "jsonl seed");
  // llm.c shards (uint16 for GPT-2's vocabulary, uint32 past 65536 ids) and a nanoGPT uint16 file
  ::mkdir((dir + "/token_shard").c_str(), 0755);
  const std::vector<int32_t> ids = {0, 1, 50256, 464, 3290, 7, 50000};
  xtrain::write_llmc_shard(dir + "/token_shard/gpt2.bin", ids.data(), ids.size(), 50257);
  xtrain::write_llmc_shard(dir + "/token_shard/llama3.bin", ids.data(), ids.size(), 128256);
  std::string raw;
  for (int32_t id : ids) raw += char(id & 0xff), raw += char(id >> 8);
  xtrain::write_file_atomic(dir + "/token_shard/train.bin", raw, "nanoGPT seed");
  return 0;
}
