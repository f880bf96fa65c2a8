// echo_value: the one way an error line quotes a value it was given (an option's argument, a JSON
// string, a config field): short, on one line, whatever the value holds, so that a 5 MB value or a
// newline in it cannot flood or split the line a user (or a log scanner) reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace xtrain {

// kEchoChars: how many bytes of a value an error line shows before "... (N bytes)".
inline constexpr size_t kEchoChars = 80;
// kEchoPathChars: the same for a path: whole up to PATH_MAX (4096 bytes on Linux).
inline constexpr size_t kEchoPathChars = 4096;

// echo_value: `value` for an error line: control bytes (< 0x20, 0x7f) written as \n, \t, \r or \xNN
// (a backslash stays as it is, so a message echoed twice is not escaped twice), and a value longer than max_bytes cut at a UTF-8 character boundary at or below
// max_bytes and followed by "... (N bytes)" (N: the whole value's size). Never throws for any bytes.
std::string echo_value(std::string_view value, size_t max_bytes = kEchoChars);

}  // namespace xtrain
