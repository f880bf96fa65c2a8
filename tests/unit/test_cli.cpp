// core/cli: parse_cli's one policy (no abbreviations, no undeclared positional words, the last value
// of a repeated option, switches included, and every value of a repeatable one), --help and --version texts, and the mapping of
// exceptions to messages and exit codes that every main uses.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/cli.h"
#include <xtrain/core/error.h>

using namespace xtrain;
namespace po = boost::program_options;

namespace {
// Options of a small program: --steps N (default 10), --name S, --quiet; the positional word, if
// `with_input`, is --input.
struct Program {
  int steps = 0;
  std::string name, input;
  bool quiet = false;
  std::vector<std::string> sets;  // --set, repeatable
  CliSpec spec{"prog", "Usage: prog [options]\nDoes little.", cli_group("Options"), {}, {}};
  explicit Program(bool with_input = false) {
    spec.options.add_options()
      ("steps", po::value(&steps)->default_value(10), "steps")
      ("name", po::value(&name), "a name (default: none)")
      ("quiet", po::bool_switch(&quiet), "say less")
      ("set", po::value(&sets)->composing(), "repeatable");
    if (with_input) {
      spec.hidden.add_options()("input", po::value(&input));
      spec.positional.add("input", 1);
    }
  }
  CliArgs parse(std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return parse_cli(spec, static_cast<int>(args.size()), args.data());
  }
};
}  // namespace

TEST_CASE("an option given twice takes its last value; others keep theirs") {
  Program p;
  const CliArgs a = p.parse({"--steps", "3", "--name", "a", "--steps=7", "--quiet", "--quiet"});
  CHECK(p.steps == 7);
  CHECK(a.vm["steps"].as<int>() == 7);
  CHECK(p.name == "a");
  CHECK(p.quiet);
  CHECK_FALSE(a.help);
  Program q;
  q.parse({});
  CHECK(q.steps == 10);  // the default
}

TEST_CASE("a repeatable option takes every value, in order; the others still their last") {
  Program p;
  p.parse({"--set", "a=1", "--steps", "3", "--set", "b=2", "--steps", "4", "--set", "a=1"});
  CHECK(p.sets == std::vector<std::string>{"a=1", "b=2", "a=1"});
  CHECK(p.steps == 4);
  Program q;
  q.parse({"--steps", "5"});
  CHECK(q.sets.empty());
}

TEST_CASE("abbreviations, unknown options and stray words are usage errors") {
  CHECK_THROWS_WITH_AS(Program().parse({"--ste", "3"}), doctest::Contains("'--ste'"), UsageError);
  CHECK_THROWS_WITH_AS(Program().parse({"--q"}), doctest::Contains("'--q'"), UsageError);
  CHECK_THROWS_AS(Program().parse({"--bogus"}), UsageError);
  CHECK_THROWS_AS(Program().parse({"--steps", "many"}), UsageError);
  CHECK_THROWS_AS(Program().parse({"word"}), UsageError);
  Program p(true);
  p.parse({"in.ckpt", "--steps", "2"});
  CHECK(p.input == "in.ckpt");
  CHECK_THROWS_AS(Program(true).parse({"a", "b"}), UsageError);  // one positional declared
}

TEST_CASE("--help and --version") {
  Program p;
  const CliArgs h = p.parse({"-h"});
  CHECK(h.help);
  CHECK(h.help_text.rfind("Usage: prog [options]\nDoes little.\n\n", 0) == 0);
  CHECK(h.help_text.find("--steps arg (=10)") != std::string::npos);
  CHECK(h.help_text.find("--version") != std::string::npos);
  CHECK(h.help_text.find(kCliPolicy) != std::string::npos);
  const CliArgs v = Program().parse({"--version"});
  CHECK(v.version);
  CHECK(v.version_text == std::string("prog ") + xtrain_version() + "\n");
  CHECK(std::string(xtrain_version()).find('.') != std::string::npos);
}

TEST_CASE("exceptions map to one message and exit code") {
  const CliFailure u = cli_failure(UsageError("--x must be positive"));
  CHECK(u.exit_code == 2);
  CHECK(u.message == "usage error: --x must be positive (see --help)");
  const CliFailure b = cli_failure(po::unknown_option("--y"));
  CHECK(b.exit_code == 2);
  CHECK(b.message.rfind("usage error: ", 0) == 0);
  const CliFailure e = cli_failure(Error("cannot read f"));
  CHECK(e.exit_code == 1);
  CHECK(e.message == "error: cannot read f");
  CHECK(run_cli("prog", [] { return 3; }) == kExitStopped);
  CHECK(run_cli("prog", []() -> int { throw UsageError("bad"); }) == kExitUsage);
  CHECK(run_cli("prog", []() -> int { throw std::runtime_error("boom"); }) == kExitError);
}
