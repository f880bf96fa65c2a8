// agree: input checks whose outcome every rank learns with one collective, so bad input ends every
// rank promptly with one line and no rank is left waiting in a later collective.
#pragma once

#include <exception>
#include <string>

#include "xtrain/error.h"
#include "xtrain/host_collectives.h"
#include "xtrain/log.h"

namespace xtrain {

// agree: runs fn on every rank, then agrees with one collective whether any rank failed. If so, the
// lowest failing rank prints "rank R (host): <message>" and every rank throws AgreedFailure with
// exit code 2 for a UsageError, else 1. group: the MpiContext at start-up, the Communicator (whose
// collectives are bounded by --comm-timeout) during training.
template <typename Fn>
void agree(HostCollectives& group, Fn&& fn) {
  std::string msg;
  int code = 0;
  try {
    fn();
  } catch (const AgreedFailure&) {
    throw;
  } catch (const UsageError& e) {
    msg = e.what(), code = 2;
  } catch (const std::exception& e) {
    msg = e.what(), code = 1;
  }
  // max of (world - rank) picks the lowest failing rank; max of code prefers usage errors.
  double flags[2] = {code ? static_cast<double>(group.world_size() - group.rank()) : 0.0, static_cast<double>(code)};
  group.all_reduce_max_host(flags, 2);
  if (flags[0] > 0) {
    const int first = group.world_size() - static_cast<int>(flags[0]);
    if (group.rank() == first) {
      print_rank_line(group.rank(), group.host(), (code == 2 ? "usage error: " : "") + msg);
    }
    throw AgreedFailure(static_cast<int>(flags[1]));
  }
}

}  // namespace xtrain
