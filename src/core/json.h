// The one JSON reading path of every file xtrain reads (config.json, tokenizer.json, safetensors
// headers, the export registry, metrics lines): a size bound before reading and a nesting bound
// enforced while parsing, before a deep tree exists. nlohmann/json's serializer, copy and comparison
// recurse per level, so a 300,000-deep array would overflow the stack in any later .dump() or copy.
// json_echo is how an error line shows a JSON value: its type and a short prefix, never the whole.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace xtrain {

// kJsonMaxDepth: the deepest nesting of arrays and objects accepted. xtrain's files and the Hugging
// Face files it reads nest at most ~6 levels; 64 leaves room and keeps recursion shallow.
inline constexpr int kJsonMaxDepth = 64;
// kJsonMaxBytes: the largest JSON file read (a tokenizer.json of a 256k vocabulary is ~20 MB).
inline constexpr size_t kJsonMaxBytes = size_t(256) << 20;

// JsonEvent: an extra observer of parse events (nlohmann's parser_callback_t arguments: depth,
// event, the value or key parsed); it may throw Error to refuse the input.
using JsonEvent = std::function<void(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed)>;

// parse_json: text -> JSON value. Throws Error "<what>: not valid JSON (<parser's message, cut by
// echo_value>)" for a syntax error or a number out of range, and "<what>: not valid JSON (nested
// deeper than kJsonMaxDepth arrays/objects)" as soon as the parser opens level kJsonMaxDepth + 1.
// on_event, when given, sees every parse event (e.g. to refuse duplicate keys).
nlohmann::json parse_json(std::string_view text, const std::string& what, const JsonEvent& on_event = {});

// read_json_file: parse_json of a regular file's bytes, what = path. Throws Error "<path>: <n> bytes
// is over the <max_bytes> byte limit of a JSON file" before reading a larger file, read_file's errors
// for a missing or non-regular file, and parse_json's.
nlohmann::json read_json_file(const std::string& path, size_t max_bytes = kJsonMaxBytes);
// read_json_text: a JSON file's bytes with read_json_file's checks (regular file, size limit), unparsed.
std::string read_json_text(const std::string& path, size_t max_bytes = kJsonMaxBytes);
// parse_json_file_bytes: parse_json of bytes already read from the JSON file `path`, with read_json_file's
// size limit and its errors.
nlohmann::json parse_json_file_bytes(const std::string& path, std::string_view text, size_t max_bytes = kJsonMaxBytes);

// json_echo: a JSON value for an error line: a string as echo_value quotes it ("\"gpt2\""), a number,
// boolean or null as JSON, an array or object as its type and size ("an array of 3 elements").
std::string json_echo(const nlohmann::json& v);

}  // namespace xtrain
