// The command line of every front end (see core/cli.h): parse_cli's one policy, --help and --version,
// and the exception -> message -> exit code mapping.
#include "core/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/echo.h"
#include <xtrain/core/error.h>
#include "core/io.h"
#include <xtrain/core/log.h>

namespace po = boost::program_options;

namespace xtrain {

const char* const kCliPolicy =
    "Option names are never abbreviated; an option given twice takes its last value\n"
    "(a job script may append overrides), except the options marked repeatable, which take every value.\n";

po::options_description cli_group(const std::string& title) { return po::options_description(title, 110, 55); }

void reject_empty_values(const po::variables_map& vm, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!vm.count(name) || vm[name].defaulted()) continue;
    const auto* value = boost::any_cast<std::string>(&vm[name].value());
    if (value && value->empty())
      throw UsageError(std::string("--") + name + " was given an empty value (leave the option out to give none)");
  }
}

const char* xtrain_version() { return XTRAIN_VERSION; }

namespace {
// keep_last: of the options given more than once, only the last occurrence (in command-line order
// otherwise), except the repeatable ones (a composing value, e.g. --eval NAME=FILES), which keep every one.
// "-h" and "--help" share their key.
void keep_last(std::vector<po::option>& options, const po::options_description& all) {
  std::vector<po::option> last;
  for (auto it = options.rbegin(); it != options.rend(); ++it) {
    const po::option_description* d = all.find_nothrow(it->string_key, false);
    bool seen = false;
    if (d && d->semantic()->is_composing()) {
      last.insert(last.begin(), *it);
      continue;
    }
    for (const po::option& o : last) seen = seen || o.string_key == it->string_key;
    if (!seen) last.insert(last.begin(), *it);
  }
  options = std::move(last);
}

// EchoedSubstitutions: reaches Boost's protected table of the values an error message quotes
// (%value%, %option%, %original_token%...), so that each goes through echo_value: a 5 MB argument
// or one holding a newline is shown short and on one line.
struct EchoedSubstitutions : po::error_with_option_name {
  static void apply(po::error_with_option_name& e) {
    for (auto& [key, value] : e.*(&EchoedSubstitutions::m_substitutions)) value = echo_value(value);
  }
};

// unexpected_word: Boost's "too many positional options" names no word: the message naming the first
// word past what spec.positional takes (found by parsing again, every word kept).
std::string unexpected_word(const CliSpec& spec, const po::options_description& all, int argc, const char* const argv[]) {
  const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
  const po::parsed_options parsed = po::command_line_parser(argc, argv).options(all).style(style).allow_unregistered().run();
  const std::vector<std::string> words = po::collect_unrecognized(parsed.options, po::include_positional);
  const unsigned takes = spec.positional.max_total_count();
  if (words.size() <= takes) return "too many arguments that are not options";
  return "unexpected argument '" + echo_value(words[takes]) + "' (" + spec.program +
         (takes == 0 ? " takes no arguments other than options)" : " takes at most " + std::to_string(takes) + ")");
}
}  // namespace

CliArgs parse_cli(const CliSpec& spec, int argc, const char* const argv[]) {
  CliArgs a;
  po::options_description general = cli_group("General");
  general.add_options()
    ("help,h", po::bool_switch(&a.help), "print this help and exit")
    ("version", po::bool_switch(&a.version), ("print \"" + spec.program + " <version>\" and exit").c_str());
  po::options_description visible = cli_group("");
  visible.add(spec.options).add(general);
  std::ostringstream help;
  help << spec.usage << "\n\n" << visible << "\n" << kCliPolicy;
  a.help_text = help.str();
  // Boost starts each group, also a caption-less one holding groups, with an empty line: keep one
  for (size_t at; (at = a.help_text.find("\n\n\n")) != std::string::npos;) a.help_text.erase(at, 1);
  a.version_text = spec.program + " " + xtrain_version() + "\n";
  po::options_description all;
  all.add(visible).add(spec.hidden);
  try {
    // allow_guessing off: no abbreviated names; an empty positional description refuses stray words.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(all).positional(spec.positional).style(style).run();
    keep_last(parsed.options, all);
    po::store(parsed, a.vm);
    po::notify(a.vm);
  } catch (const po::too_many_positional_options_error&) {
    throw UsageError(unexpected_word(spec, all, argc, argv));
  } catch (po::error_with_option_name& e) {
    EchoedSubstitutions::apply(e);
    throw UsageError(e.what());
  } catch (const po::error& e) {
    throw UsageError(echo_value(e.what(), kCliMessageBytes));
  }
  return a;
}

CliFailure cli_failure(const std::exception& e) {
  // The last guard of "one line": whatever a message quotes, it is printed without a line break and
  // at most kCliMessageBytes long (the values in it were already cut by echo_value where they were quoted).
  const std::string what = echo_value(e.what(), kCliMessageBytes);
  if (dynamic_cast<const UsageError*>(&e) || dynamic_cast<const po::error*>(&e))
    return {kExitUsage, "usage error: " + what + " (see --help)"};
  return {kExitError, "error: " + what};
}

int report_options_failure(const std::exception& e, const std::string& host) {
  const CliFailure f = cli_failure(e);
  print_rank_line(0, host, f.message);
  return f.exit_code;
}

int run_cli(const std::string& program, const std::function<int()>& body) {
  try {
    const int rc = body();
    flush_stdout();
    return rc;
  } catch (const std::exception& e) {
    const CliFailure f = cli_failure(e);
    std::fprintf(stderr, "%s: %s\n", program.c_str(), f.message.c_str());
    return f.exit_code;
  }
}

uint64_t parse_seed(const std::string& text) {
  errno = 0;  // strtoull alone would take "-1" as 2^64-1: digits only
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || errno == ERANGE)
    throw UsageError("--seed must be an integer in [0, 2^64-1], got '" + echo_value(text) + "'");
  return v;
}

}  // namespace xtrain
