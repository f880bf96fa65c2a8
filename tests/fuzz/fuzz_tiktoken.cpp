// libFuzzer target for tiktoken rank files: read_tiktoken_ranks ends every input with token bytes by
// rank or one xtrain::Error; ranks that give every single byte then build the byte-pair Merger as
// Tokenizer::from_ranks does (the step whose work grows with a token's length), which merges a few
// pieces into ids of tokens whose bytes are the piece's.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <xtrain/core/error.h>
#include "data/bpe.h"
#include "data/tiktoken.h"
#include "fuzz_input_file.h"

namespace {
const char* const kPieces[] = {"hello", " world", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "\xff\xfe\x01", "ab"};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = xtrain::fuzz::input_file(data, size, "ranks.tiktoken");
  std::vector<std::string> ranks;
  try {
    ranks = xtrain::read_tiktoken_ranks(path);
  } catch (const xtrain::Error&) {
    return 0;
  }
  std::array<int32_t, 256> byte_ids;
  byte_ids.fill(-1);
  std::vector<std::array<int32_t, 3>> merges;
  std::vector<int32_t> ranked;
  for (int32_t id = 0; id < int32_t(ranks.size()); ++id) {
    const std::string& t = ranks[size_t(id)];
    if (t.size() > xtrain::bpe::kMaxTokenBytes) __builtin_trap();  // the reader's bound
    if (t.size() == 1) byte_ids[uint8_t(t[0])] = id;
    else if (t.size() > 1) merges.push_back({-1, -1, id});
    if (!t.empty()) ranked.push_back(id);
  }
  for (int32_t id : byte_ids)
    if (id < 0) return 0;  // from_ranks refuses it
  const xtrain::bpe::Merger merger(byte_ids, merges, ranks, xtrain::bpe::PairRule::kAnySplit, ranked);
  for (const std::string piece : kPieces) {
    if (piece.empty()) continue;
    std::vector<int32_t> ids;
    merger.merge(piece, &ids);
    std::string back;
    for (int32_t id : ids) {
      if (id < 0 || id >= int32_t(ranks.size())) __builtin_trap();
      back += ranks[size_t(id)];
    }
    if (back != piece) __builtin_trap();
  }
  return 0;
}
