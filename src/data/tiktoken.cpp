// tiktoken-format BPE: the rank file reader ("base64-token rank" per line, as tiktoken's
// load_tiktoken_bpe reads it) and the built-in encodings, whose split patterns and special tokens are
// copied from tiktoken's tiktoken_ext/openai_public.py and Meta's llama3 llama/tokenizer.py.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "bpe.h"
#include <xtrain/core/data_dir.h>
#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include "data/tiktoken.h"
#include <xtrain/data/tokenizer.h>

namespace xtrain {

namespace {

// Split patterns, verbatim (raw strings) from the sources named in each comment.
// r50k_base, p50k_base, p50k_edit: tiktoken openai_public.py (GPT-2's language, faster form).
constexpr const char* kR50kPattern = R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base: tiktoken openai_public.py.
constexpr const char* kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";
// o200k_base: tiktoken openai_public.py (its seven alternatives joined with "|").
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// llama3: Meta's llama3 llama/tokenizer.py (Tokenizer.pat_str).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using Specials = std::vector<std::pair<std::string, int32_t>>;

// llama3_specials: Meta's llama3 tokenizer.py: 256 specials from id n_ranks (128000) on: ten named
// ones, then <|reserved_special_token_5|> .. <|reserved_special_token_250|>.
Specials llama3_specials(int32_t base) {
  std::vector<std::string> names = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                                    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                                    "<|reserved_special_token_4|>", "<|eot_id|>"};
  for (int i = 5; i < 256 - 5; ++i) names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  Specials out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], base + int32_t(i));
  return out;
}

struct Builtin {
  const char* name;
  const char* file;      // rank file name under data/tokenizers (scripts/setup.sh --tokenizers)
  const char* pattern;
  int32_t n_ranks;       // expected number of ranks (a cut file is refused)
  Specials specials;     // empty for llama3: made by llama3_specials
};

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> b = {
      {"r50k_base", "r50k_base.tiktoken", kR50kPattern, 50256, {{"<|endoftext|>", 50256}}},
      // p50k_base: ranks 0..50280 without 50256
      {"p50k_base", "p50k_base.tiktoken", kR50kPattern, 50280, {{"<|endoftext|>", 50256}}},
      {"p50k_edit", "p50k_base.tiktoken", kR50kPattern, 50280,
       {{"<|endoftext|>", 50256}, {"<|fim_prefix|>", 50281}, {"<|fim_middle|>", 50282}, {"<|fim_suffix|>", 50283}}},
      {"cl100k_base", "cl100k_base.tiktoken", kCl100kPattern, 100256,
       {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}}},
      {"o200k_base", "o200k_base.tiktoken", kO200kPattern, 199998,
       {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
      {"llama3", "llama3.tiktoken", kLlama3Pattern, 128000, {}},
  };
  return b;
}

const Builtin& find_builtin(const std::string& name) {
  for (const auto& b : builtins())
    if (name == b.name) return b;
  std::string all;
  for (const auto& n : tiktoken_names()) all += (all.empty() ? "" : ", ") + n;
  throw UsageError("--tokenizer " + name + ": unknown tokenizer (known: gpt2, " + all + ")");
}

// base64_value: RFC 4648 alphabet value of c, -1 outside it.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  return c == '+' ? 62 : c == '/' ? 63 : -1;
}

// Ranks are ids; the largest vocabulary in use has ~260k. A bound keeps a typo from allocating GBs.
constexpr size_t kMaxRank = size_t{1} << 24;

}  // namespace

bool decode_base64(std::string_view in, std::string* out) {
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  uint32_t acc = 0;
  for (size_t i = 0; i < in.size() - pad; ++i) {
    const int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    if (i % 4 == 3) {
      out->push_back(char(acc >> 16)), out->push_back(char(acc >> 8)), out->push_back(char(acc));
      acc = 0;
    }
  }
  // Canonical padding only: the unused low bits of the last group must be zero.
  if (pad == 2) {
    if (acc & 0xF) return false;
    out->push_back(char(acc >> 4));
  } else if (pad == 1) {
    if (acc & 0x3) return false;
    out->push_back(char(acc >> 10)), out->push_back(char(acc >> 2));
  }
  return true;
}

std::vector<std::string> read_tiktoken_ranks(const std::string& path) { return parse_tiktoken_ranks(path, read_file(path)); }

std::vector<std::string> parse_tiktoken_ranks(const std::string& path, std::string_view text) {
  std::vector<std::string> by_rank;
  std::vector<bool> have;
  std::unordered_map<std::string, size_t> line_of;  // token bytes -> line (duplicates)
  for_each_line(text, [&](size_t line_no, std::string_view line) {
    if (line.empty()) return;  // load_tiktoken_bpe skips empty lines
    const size_t sp = line.find(' ');
    if (sp == line.npos || line.find(' ', sp + 1) != line.npos)
      XT_FAIL(path << ":" << line_no << ": expected \"<base64 token> <rank>\"");
    // the line's parts as error lines quote them (echo_value: a NUL or newline byte cannot cut the line)
    const std::string_view b64 = line.substr(0, sp);
    std::string bytes;
    if (!decode_base64(b64, &bytes))
      XT_FAIL(path << ":" << line_no << ": \"" << echo_value(b64) << "\" is not base64");
    if (bytes.size() > bpe::kMaxTokenBytes)
      XT_FAIL(path << ":" << line_no << ": a token of " << bytes.size() << " bytes; at most " << bpe::kMaxTokenBytes
                   << " are read (the longest of the real rank files has 128)");
    const std::string_view r = line.substr(sp + 1);
    if (r.empty() || r.size() > 9 || !std::all_of(r.begin(), r.end(), [](char c) { return c >= '0' && c <= '9'; }))
      XT_FAIL(path << ":" << line_no << ": rank \"" << echo_value(r) << "\" is not an integer in 0..999999999");
    const size_t rank = std::stoul(std::string(r));
    if (rank > kMaxRank) XT_FAIL(path << ":" << line_no << ": rank " << rank << " is above " << kMaxRank);
    if (rank >= by_rank.size()) by_rank.resize(rank + 1), have.resize(rank + 1, false);
    if (have[rank]) XT_FAIL(path << ":" << line_no << ": rank " << rank << " appears twice");
    auto [it, fresh] = line_of.emplace(bytes, line_no);
    if (!fresh) XT_FAIL(path << ":" << line_no << ": token " << echo_value(b64) << " appears twice (first on line " << it->second << ")");
    have[rank] = true;
    by_rank[rank] = std::move(bytes);
  });
  if (by_rank.empty()) XT_FAIL(path << ": no ranks (empty rank file)");
  return by_rank;
}

std::string tiktoken_hf_pattern(const std::string& name) {
  const Builtin& b = find_builtin(name);
  // cl100k_base until tiktoken 0.7 (openai_public.py), the same text as Llama 3's pattern
  return b.pattern == std::string(kCl100kPattern) ? kLlama3Pattern : b.pattern;
}

std::vector<std::string> tiktoken_names() {
  std::vector<std::string> n;
  for (const auto& b : builtins()) n.push_back(b.name);
  return n;
}

std::string tiktoken_pattern(const std::string& name) { return find_builtin(name).pattern; }

std::vector<std::pair<std::string, int32_t>> tiktoken_specials(const std::string& name) {
  const Builtin& b = find_builtin(name);
  return b.specials.empty() ? llama3_specials(b.n_ranks) : b.specials;
}

std::string tiktoken_default_file(const std::string& name) {
  return default_data_file(std::string("tokenizers/") + find_builtin(name).file);
}

Tokenizer Tokenizer::from_tiktoken(const std::string& ranks_file, const std::string& name) {
  find_builtin(name);  // an unknown name before the file is read
  return from_tiktoken_bytes(ranks_file, read_file(ranks_file), name);
}

Tokenizer Tokenizer::from_tiktoken_bytes(const std::string& ranks_file, std::string_view bytes, const std::string& name) {
  const Builtin& b = find_builtin(name);
  bpe::RankVocab v;
  v.file = ranks_file;
  v.name = b.name;
  v.token_bytes = parse_tiktoken_ranks(ranks_file, bytes);
  v.specials = tiktoken_specials(name);
  // The ranks are the ids 0..n-1 except the ids of special tokens among them (p50k_base skips 50256,
  // its <|endoftext|>): any other gap is a damaged file, which would leave an id without a token, and
  // the count catches a cut one.
  std::unordered_set<int32_t> special_ids;
  for (const auto& sp : v.specials) special_ids.insert(sp.second);
  for (size_t id = 0; id < v.token_bytes.size(); ++id)
    if (v.token_bytes[id].empty() && !special_ids.count(int32_t(id)))
      XT_FAIL(ranks_file << ": rank " << id << " is missing, and " << b.name
                         << " has no special token with that id (damaged rank file?)");
  const int64_t n = std::count_if(v.token_bytes.begin(), v.token_bytes.end(), [](const auto& t) { return !t.empty(); });
  if (n != b.n_ranks)
    XT_FAIL(ranks_file << ": " << n << " ranks, but " << b.name << " has " << b.n_ranks
                       << " (wrong or truncated rank file?)");
  v.pattern = b.pattern;
  return from_ranks(v);
}

}  // namespace xtrain
