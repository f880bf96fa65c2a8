// tiktoken-format BPE vocabularies: the rank file reader and the names of the built-in encodings
// (cl100k_base, o200k_base, r50k_base, p50k_base, p50k_edit, llama3). Tokenizer::from_tiktoken
// (tokenizer.h) builds a tokenizer from them; docs/tokenizers.md lists the commands.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace xtrain {

// read_tiktoken_ranks: a rank file (tiktoken's load_tiktoken_bpe format: one "<base64 bytes> <rank>"
// per line, empty lines skipped) -> token bytes by rank. Stricter than tiktoken, which keeps the last
// of two equal entries: throws Error naming file:line for bad base64, a malformed line, a token or a
// rank given twice or above 2^24. Ranks are ids; a rank the file skips comes back as an empty string
// (p50k_base skips 50256, its <|endoftext|>).
std::vector<std::string> read_tiktoken_ranks(const std::string& path);
// parse_tiktoken_ranks: read_tiktoken_ranks of the file's bytes already read (path names it in messages).
std::vector<std::string> parse_tiktoken_ranks(const std::string& path, std::string_view text);

// decode_base64: RFC 4648 base64 with canonical '=' padding -> bytes; false for anything else.
bool decode_base64(std::string_view in, std::string* out);

// tiktoken_hf_pattern: the split pattern of encoding `name` as an export's tokenizer.json writes it for
// `tokenizers` (Oniguruma, Ruby syntax), which reads tiktoken's possessive `{1,3}+` as a repeat of the
// group and `$` as the end of a line: cl100k_base's earlier form without them (the one transformers'
// TikTokenConverter uses, equal in its splits), the others as tiktoken writes them.
std::string tiktoken_hf_pattern(const std::string& name);

// tiktoken_pattern, tiktoken_specials: encoding `name`'s split pattern in tiktoken's syntax and its
// special tokens (content, id) in the encoding's order, as Tokenizer::from_tiktoken uses them. UsageError
// for an unknown name.
std::string tiktoken_pattern(const std::string& name);
std::vector<std::pair<std::string, int32_t>> tiktoken_specials(const std::string& name);

// tiktoken_names: the built-in encodings --tokenizer accepts besides gpt2, in a fixed order.
std::vector<std::string> tiktoken_names();

// tiktoken_default_file: where scripts/setup.sh --tokenizers puts the rank file of `name`
// (<data directory>/tokenizers/<name>.tiktoken, core/data_dir.h; p50k_edit shares p50k_base's). UsageError
// for an unknown name.
std::string tiktoken_default_file(const std::string& name);

}  // namespace xtrain
