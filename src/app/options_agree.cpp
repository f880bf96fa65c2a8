// check_options_agree: the parsed configuration is the same on every rank (see src/app/options.h).
// Ranks can be given different options (an MPMD command line `mpirun -np 1 xtrain_mpi --batch 8 :
// -np 1 xtrain_mpi --batch 16`, a per-node wrapper script, another build): each would train its own
// run while sharing gradients. One hash of the canonical option list, compared with min and max,
// finds that; the search for the first differing option runs only then.
#include <sstream>
#include <string>
#include <vector>

#include "app/options.h"
#include <xtrain/core/error.h>
#include "core/digest.h"
#include "core/io.h"
#include <xtrain/core/log.h>

namespace xtrain {

namespace {
// entry: option i as "--name value" ("" past the end of this rank's list: another build).
std::string entry(const RunOptions& o, size_t i) {
  return i < o.canonical.size() ? o.canonical[i].first + " " + o.canonical[i].second : std::string();
}
uint64_t hash_of(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  return fnv1a64(s.data(), s.size() + 1, h);  // with the terminating NUL: "a" "bc" differs from "ab" "c"
}
}  // namespace

void check_options_agree(HostCollectives& group, const RunOptions& o) {
  uint64_t all = hash_of(std::to_string(o.canonical.size()));
  for (size_t i = 0; i < o.canonical.size(); ++i) all = hash_of(entry(o, i), all);
  if (group.all_reduce_min_host(all) == group.all_reduce_max_host(all)) return;

  // The first option whose text differs somewhere (every rank runs the same loop on the same values).
  const size_t longest = group.all_reduce_max_host(o.canonical.size());
  size_t first = longest;
  for (size_t i = 0; i < longest && first == longest; ++i) {
    const uint64_t h = hash_of(entry(o, i));
    if (group.all_reduce_min_host(h) != group.all_reduce_max_host(h)) first = i;
  }
  // Rank 0's text of it, and the ranks whose text differs from rank 0's.
  const std::string mine = first < longest ? entry(o, first) : "option count " + std::to_string(o.canonical.size());
  uint64_t len = mine.size();
  group.broadcast_host(&len, sizeof len, 0);
  std::string root(len, '\0');
  if (group.rank() == 0) root = mine;
  group.broadcast_host(root.data(), root.size(), 0);
  std::vector<double> differs(group.world_size(), 0.0);
  differs[group.rank()] = mine != root ? 1.0 : 0.0;
  group.all_reduce_max_host(differs.data(), group.world_size());
  std::ostringstream ranks;
  int reporter = -1;
  for (int r = 0; r < group.world_size(); ++r)
    if (differs[r] > 0) {
      ranks << (reporter < 0 ? "" : ",") << r;
      if (reporter < 0) reporter = r;
    }
  if (group.rank() == reporter) {
    const auto show = [](const std::string& e) { return e.empty() ? std::string("(no such option)") : e; };
    std::ostringstream os;
    os << "usage error: the options differ across ranks: " << show(mine) << " on rank " << group.rank() << " but "
       << show(root) << " on rank 0 (ranks differing from rank 0: " << ranks.str()
       << "); every rank must be given the same options";
    print_rank_line(group.rank(), group.host(), os.str());
  }
  throw AgreedFailure(2);
}

}  // namespace xtrain
