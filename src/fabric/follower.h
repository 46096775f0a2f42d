// A follower rank's loop: run every plan rank 0 sends on the local backend and answer, until stop.
#pragma once

#include <string>

#include "fabric/control.h"
#include "fabric/leader.h"
#include "lanes/backend.h"

namespace dsv4::fabric {

struct FollowerOptions {
  // FOR TESTS ONLY: refuse the open of this stream id (resource_exhausted), as a rank out of memory would.
  lanes::StreamId refuse_open_stream = 0;
};

struct FollowerResult {
  int exit_code = kExitOk;   // kExitOk after a clean stop; otherwise the fabric's failure code
  std::string message;       // why, when not ok
  FabricCounters counters;   // plans and ops run
};

// Returns after rank 0's stop (or when the fabric fails; in production a failure exits the process first).
FollowerResult run_follower(Control& control, lanes::Backend& backend, const FollowerOptions& options = {});

}  // namespace dsv4::fabric
