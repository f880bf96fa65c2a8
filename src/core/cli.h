// The command line of every front end (xtrain_mpi, xtrain_threads, xtrain_tokenize, xtrain_generate,
// xtrain_export, xtrain_eval): one parser over Boost.Program_options with one policy, one --help / --version style,
// and one mapping from exceptions to messages and exit codes. The policy: option names are never
// abbreviated (`--ste` is not `--steps`), a word that is not an option is refused unless the program
// declares positionals, and an option given twice takes its LAST value (job scripts append overrides),
// except a repeatable one (declared with a composing vector value, its --help saying "repeatable"), which
// takes every value in order.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <string>

#include <xtrain/core/stop_signal.h>  // kExitStopped

namespace xtrain {

// Exit codes of every program: 0 success, 1 runtime error, 2 usage error, kExitStopped (3) stopped by
// a signal after a completed step (stop_signal.h).
constexpr int kExitOk = 0, kExitError = 1, kExitUsage = 2;

// kCliPolicy: the policy above as --help states it, after the option groups.
extern const char* const kCliPolicy;

// cli_group: an option group as every --help lays it out (110 columns, descriptions from column 55).
boost::program_options::options_description cli_group(const std::string& title);

// CliSpec: one program's command line. usage: the first lines of --help ("Usage: <program> ..." and a
// one-line summary). options: the groups --help shows (--help, -h and --version are added by
// parse_cli). hidden: options given only as positional words, named by `positional` (by default no
// positional word is accepted).
struct CliSpec {
  std::string program;  // e.g. "xtrain_generate": the --version line and error lines
  std::string usage;
  boost::program_options::options_description options;
  boost::program_options::options_description hidden;
  boost::program_options::positional_options_description positional;
};

// CliArgs: the parsed command line. With help (or version) set, the caller prints help_text (or
// version_text) to stdout and exits 0; the options were still parsed and checked for type errors.
struct CliArgs {
  boost::program_options::variables_map vm;
  bool help = false, version = false;
  std::string help_text;     // usage, option groups with every default, kCliPolicy
  std::string version_text;  // "<program> <xtrain version>\n"
};

// parse_cli: argv under the policy above: stores and notifies spec's options (bound variables are
// set), last value of a repeated option. Throws UsageError with Boost's message for an unknown,
// abbreviated or malformed option, a bad value or a stray positional word.
CliArgs parse_cli(const CliSpec& spec, int argc, const char* const argv[]);

// reject_empty_values: throws UsageError "--NAME was given an empty value" for the first option of
// `names` (std::string values) that the command line gave as "". Such a value is what a job script's
// unset variable gives (`--resume "$CKPT"`), and an option whose default is "" would otherwise read it
// as "not given": a fresh run over the checkpoint it should have continued.
void reject_empty_values(const boost::program_options::variables_map& vm, std::initializer_list<const char*> names);

// xtrain_version: the project's version (CMakeLists.txt project(xtrain VERSION ...)), e.g. "0.1.0".
const char* xtrain_version();

// CliFailure: what a program prints for an exception leaving it and the code it exits with.
struct CliFailure {
  int exit_code;
  std::string message;  // "usage error: <what> (see --help)" or "error: <what>"
};

// kCliMessageBytes: the longest message cli_failure passes on (echo_value cuts a longer one).
inline constexpr size_t kCliMessageBytes = 2000;

// cli_failure: UsageError and boost::program_options::error -> kExitUsage, "usage error: ... (see
// --help)"; any other std::exception -> kExitError, "error: ...". The message is one line: control
// characters escaped and cut at kCliMessageBytes (echo_value, core/echo.h); the values Boost quotes
// are cut to kEchoChars each. AgreedFailure is the caller's (its message was printed already).
CliFailure cli_failure(const std::exception& e);

// report_options_failure: the trainers' (xtrain_mpi, xtrain_threads) line for an exception from reading
// the command line, which every rank reads alike: printed once, as rank 0's line (log.h)
// "rank 0 (<host>): <cli_failure message>" on stderr; returns its exit code.
int report_options_failure(const std::exception& e, const std::string& host);

// run_cli: the main of a single-process tool: returns body()'s code after flushing stdout (a lost
// write is an error), or, for an exception, prints "<program>: <cli_failure message>" as one line on
// stderr and returns its exit code.
int run_cli(const std::string& program, const std::function<int()>& body);

// parse_seed: a --seed value: decimal digits only, 0 .. 2^64-1; UsageError "--seed must be an integer in
// [0, 2^64-1], got '<text>'" otherwise (e.g. "-1", which strtoull would take as 2^64-1).
uint64_t parse_seed(const std::string& text);

}  // namespace xtrain
