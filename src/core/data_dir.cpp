// The data directory, resolved at run time (<xtrain/core/data_dir.h>): $XTRAIN_DATA, the install prefix
// of the running program, the source tree of the build tree it runs from.
#include <xtrain/core/data_dir.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/echo.h"

namespace xtrain {

namespace fs = std::filesystem;

namespace {

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// source_of_build_tree: the source directory named by dir/CMakeCache.txt (CMAKE_HOME_DIRECTORY) when that
// cache is xtrain's own (CMAKE_PROJECT_NAME xtrain; not a program's that embeds xtrain), else "".
std::string source_of_build_tree(const fs::path& dir) {
  std::ifstream in(dir / "CMakeCache.txt");
  const std::string home = "CMAKE_HOME_DIRECTORY:INTERNAL=", project = "CMAKE_PROJECT_NAME:STATIC=";
  std::string line, src;
  bool ours = false;
  for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
    if (line.compare(0, home.size(), home) == 0) src = line.substr(home.size());
    if (line == project + "xtrain") ours = true;
  }
  return ours ? src : "";
}

// xtrain_data_problem: what keeps path (from $XTRAIN_DATA) from being a data directory, "" when nothing.
std::string xtrain_data_problem(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return "does not exist";
  if (ec) return "cannot be examined: " + ec.message();  // a permission, a loop, a name too long
  if (st.type() != fs::file_type::directory) return "is not a directory (a file or device)";
  return "";
}

}  // namespace

DataDir find_data_dir(const char* env, const std::string& exe_path) {
  DataDir d;
  if (env != nullptr && *env != '\0') {
    d.path = env;
    while (d.path.size() > 1 && d.path.back() == '/') d.path.pop_back();
    d.origin = "$XTRAIN_DATA";
    d.looked = "$XTRAIN_DATA (" + d.path + ")";
    d.problem = xtrain_data_problem(d.path);
    return d;
  }
  d.looked = env == nullptr ? "$XTRAIN_DATA (unset)" : "$XTRAIN_DATA (set but empty: passed over)";
  const fs::path exe = exe_path;
  if (exe.empty()) {
    d.looked += ", the program's own path (unreadable: /proc/self/exe)";
    return d;
  }
  const fs::path bin = exe.parent_path();
  if (bin.filename() == "bin") {
    const fs::path share = bin.parent_path() / "share" / "xtrain";
    if (is_dir(share)) return {share.string(), "the install prefix", d.looked + ", " + share.string(), ""};
    d.looked += ", " + share.string() + " (absent)";
  }
  // A program of a build tree sits in the tree's top (the programs) or below it (tests, benchmarks).
  for (fs::path dir = bin; !dir.empty(); dir = dir.parent_path()) {
    const std::string src = source_of_build_tree(dir);
    if (!src.empty()) {
      const fs::path data = fs::path(src) / "data";
      if (is_dir(data)) return {data.string(), "the source tree of this build", d.looked + ", " + data.string(), ""};
      d.looked += ", " + data.string() + " (absent)";
      break;
    }
    if (dir == dir.parent_path()) break;
  }
  return d;
}

const DataDir& default_data_dir() {
  static const DataDir d = [] {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return find_data_dir(std::getenv("XTRAIN_DATA"), ec ? std::string() : exe.string());
  }();
  return d;
}

std::string default_data_file(const std::string& rel) {
  const DataDir& d = default_data_dir();
  return (d.path.empty() ? std::string("<data directory not found>") : d.path) + "/" + rel;
}

std::string data_dir_note(const DataDir& d, const std::string& option) {
  const std::string where = d.path.empty() ? "no data directory found; looked in " + d.looked
                                           : "data directory " + d.path + ", from " + d.origin +
                                                 (d.problem.empty() ? "" : ", " + d.problem);
  // the paths (up to three) as echo_value writes them: a newline in $XTRAIN_DATA must not split the error line
  return echo_value(where, kEchoPathChars * 4) + "; set XTRAIN_DATA to the folder scripts/setup.sh fills, or give " + option;
}

std::string data_dir_note(const std::string& option) { return data_dir_note(default_data_dir(), option); }

}  // namespace xtrain
