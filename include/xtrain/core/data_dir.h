// The data directory: where the programs look for the files their options default to (--data's
// brown.txt, GPT-2's gpt2/encoder.json and gpt2/vocab.bpe, the tiktoken rank files under tokenizers/).
// Resolved when a program starts, never compiled in, so a build copied to another machine, an installed
// prefix and a container find their data alike. The order (docs/usage.md, "The data directory"):
//   1. $XTRAIN_DATA, when set and not empty (used as given, found or not: a message about a defaulted
//      file then says whether it is missing or not a directory); set but empty, it is passed over, and
//      said to be empty, not unset;
//   2. <prefix>/share/xtrain, where the running program is <prefix>/bin/<name> (cmake --install);
//   3. the source tree's data/, where the running program sits in a CMake build tree of xtrain (its
//      CMakeCache.txt names the source tree): scripts/setup.sh fetches the data there.
// The first of 2 and 3 that exists is taken; when neither does, the data directory is not found and
// a defaulted file's error says where it was looked for (data_dir_note).
#pragma once

#include <string>

namespace xtrain {

struct DataDir {
  std::string path;    // the directory (no trailing '/'); "" when not found
  std::string origin;  // how it was found: "$XTRAIN_DATA", "the install prefix", "the source tree of this build"
  std::string looked;  // every place tried, in order, e.g. "$XTRAIN_DATA (unset), /opt/x/share/xtrain (absent), ..."
  // what is wrong with a path taken from $XTRAIN_DATA: "does not exist", "is not a directory (a file
  // or device)", or the OS's reason it cannot be examined; "" when it is a directory (or not from there)
  std::string problem;
};

// find_data_dir: the data directory for $XTRAIN_DATA = xtrain_data (nullptr: unset) and a program at the
// absolute path exe (/proc/self/exe; "": unknown), in the order above. Never throws.
DataDir find_data_dir(const char* xtrain_data, const std::string& exe);

// default_data_dir: the data directory of this process (find_data_dir of its environment and
// /proc/self/exe; resolved once, then cached). Never throws.
const DataDir& default_data_dir();

// default_data_file: default_data_dir().path + "/" + rel, or "<data directory not found>/" + rel when there is
// none (so --help shows what is missing and no source-tree path is ever compiled into a program).
std::string default_data_file(const std::string& rel);

// data_dir_note: one line for errors about a defaulted file that is missing: where the data directory came
// from or was looked for, what is wrong with it ("data directory /x, from $XTRAIN_DATA, is not a
// directory (a file or device)"), and how to set it ("set XTRAIN_DATA ..., or give <option>"). Of dir
// (default: default_data_dir()).
std::string data_dir_note(const std::string& option);
std::string data_dir_note(const DataDir& dir, const std::string& option);

}  // namespace xtrain
