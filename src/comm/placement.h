// Placement: which rank runs where (host, node-local rank, device), gathered for the table rank 0
// prints at start-up; and the string all-gather it is built on, over any HostCollectives.
#pragma once

#include <string>
#include <vector>

#include <xtrain/comm/host_collectives.h>

namespace xtrain {

struct Placement {
  int rank = 0;
  std::string host;
  int local_rank = 0;
  std::string device;
};

// gather_strings: every rank's string, in rank order, on every rank (one broadcast of the lengths
// per rank, then one of the bytes). Collective over all ranks of group.
std::vector<std::string> gather_strings(HostCollectives& group, const std::string& mine);

// gather_placement: every rank's (rank, host, local rank, device); the full table on every rank.
std::vector<Placement> gather_placement(HostCollectives& group, int local_rank, const std::string& device);

}  // namespace xtrain
