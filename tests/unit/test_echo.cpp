// Echoed values in error lines (core/echo.h): cut to kEchoChars with "... (N bytes)", control
// characters escaped, never a split UTF-8 character; and the command line (core/cli.h) quoting an
// argument of any size or content on one short line.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/cli.h"
#include "core/echo.h"
#include <xtrain/core/error.h>

using namespace xtrain;
namespace po = boost::program_options;

TEST_CASE("echo_value: short values pass, long ones are cut, control characters escaped") {
  CHECK(echo_value("gpt2") == "gpt2");
  CHECK(echo_value(std::string(80, 'a')) == std::string(80, 'a'));
  CHECK(echo_value(std::string(81, 'a')) == std::string(80, 'a') + "... (81 bytes)");
  CHECK(echo_value(std::string(5 << 20, 'a')) == std::string(80, 'a') + "... (5242880 bytes)");
  CHECK(echo_value("a\nb\tc\rd\x01" "e\x7f") == "a\\nb\\tc\\rd\\x01e\\x7f");
  CHECK(echo_value("back\\slash") == "back\\slash");
  // "é" is 2 bytes: a cut at 3 bytes would split the second one, so 2 bytes are kept
  CHECK(echo_value("\xc3\xa9\xc3\xa9", 3) == "\xc3\xa9... (4 bytes)");
}

namespace {
// usage_error: the message parse_cli + cli_failure give for argv (one --name option of type string)
std::string usage_error(std::vector<std::string> words) {
  CliSpec spec{"prog", "Usage: prog", cli_group("Options"), {}, {}};
  int steps = 0;
  spec.options.add_options()("steps", po::value(&steps), "steps");
  std::vector<const char*> argv = {"prog"};
  for (const std::string& w : words) argv.push_back(w.c_str());
  try {
    parse_cli(spec, static_cast<int>(argv.size()), argv.data());
  } catch (const std::exception& e) {
    const CliFailure f = cli_failure(e);
    CHECK(f.exit_code == kExitUsage);
    return f.message;
  }
  return "";
}
}  // namespace

TEST_CASE("parse_cli: a huge or multi-line argument is quoted short, on one line") {
  const std::string e = usage_error({"--steps", std::string(5 << 20, '7') + "x"});
  CHECK(e == "usage error: the argument ('" + std::string(80, '7') + "... (5242881 bytes)') for option '--steps' is invalid (see --help)");
  const std::string nl = usage_error({"--steps", "1\n2"});
  CHECK(nl == "usage error: the argument ('1\\n2') for option '--steps' is invalid (see --help)");
  const std::string opt = usage_error({"--" + std::string(1000, 'z')});
  CHECK(opt.size() < 200);
  CHECK(opt.find("unrecognised option '--zzz") != std::string::npos);
}

TEST_CASE("cli_failure: any message is one line of at most kCliMessageBytes") {
  const CliFailure f = cli_failure(Error("a\nb" + std::string(10000, 'c')));
  CHECK(f.message.find('\n') == std::string::npos);
  CHECK(f.message.rfind("error: a\\nb", 0) == 0);
  CHECK(f.message.size() < kCliMessageBytes + 40);
  CHECK(parse_seed("5") == 5);
  try {
    parse_seed(std::string(1000, '9') + "\n");
    FAIL("parse_seed accepted a non-number");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).size() < 200);
  }
}

TEST_CASE("parse_cli: a stray word is named (Boost's message names none)") {
  CHECK(usage_error({"--steps", "3", "stray"}) ==
        "usage error: unexpected argument 'stray' (prog takes no arguments other than options) (see --help)");
  CHECK(usage_error({std::string(300, 'w')}).find("unexpected argument '" + std::string(80, 'w') + "... (300 bytes)'") !=
        std::string::npos);
}
