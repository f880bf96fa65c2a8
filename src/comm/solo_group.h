// SoloGroup: the HostCollectives of a program that is its own world of one process, started by no
// launcher (xtrain_eval), so that it can call collective code written for ranks (load_corpus): every
// collective returns its input, and agree lets failures propagate for the program to report itself.
// SoloCollectives<Base> gives the same world of one to any interface built on HostCollectives, so a
// Communicator of one rank (the unit tests' fakes) adds only its own calls.
#pragma once

#include <unistd.h>

#include <climits>
#include <string>

#include <xtrain/comm/host_collectives.h>

namespace xtrain {

template <class Base>
class SoloCollectives : public Base {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string host() const override {
    char name[HOST_NAME_MAX + 1] = {};
    return ::gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("localhost");
  }
  int node_id() const override { return 0; }
  bool solo() const override { return true; }
  void all_reduce_sum_host(double*, int) override {}
  void all_reduce_max_host(double*, int) override {}
  uint64_t all_reduce_min_host(uint64_t x) override { return x; }
  uint64_t all_reduce_max_host(uint64_t x) override { return x; }
  void broadcast_host(void*, size_t, int) override {}
  void barrier() override {}
};

class SoloGroup final : public SoloCollectives<HostCollectives> {};

}  // namespace xtrain
