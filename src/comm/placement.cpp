// gather_strings / gather_placement over any HostCollectives (src/comm/placement.h).
#include "comm/placement.h"

#include <cstdint>

namespace xtrain {

std::vector<std::string> gather_strings(HostCollectives& group, const std::string& mine) {
  std::vector<std::string> out(group.world_size());
  for (int r = 0; r < group.world_size(); ++r) {
    uint64_t len = r == group.rank() ? mine.size() : 0;
    group.broadcast_host(&len, sizeof len, r);
    out[r] = r == group.rank() ? mine : std::string(len, '\0');
    group.broadcast_host(out[r].data(), len, r);
  }
  return out;
}

std::vector<Placement> gather_placement(HostCollectives& group, int local_rank, const std::string& device) {
  // Host and device names contain no tab; local_rank is a number: tab-separated fields.
  const std::vector<std::string> rows =
      gather_strings(group, std::to_string(local_rank) + '\t' + group.host() + '\t' + device);
  std::vector<Placement> out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t a = rows[r].find('\t'), b = rows[r].find('\t', a + 1);
    out[r].rank = static_cast<int>(r);
    out[r].local_rank = std::stoi(rows[r].substr(0, a));
    out[r].host = rows[r].substr(a + 1, b - a - 1);
    out[r].device = rows[r].substr(b + 1);
  }
  return out;
}

}  // namespace xtrain
