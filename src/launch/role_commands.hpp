// `sluice ROLE --config FILE`: the five roles as subcommands (weightstore, relay,
// rollout-manager, rollout, actor), each started through launch/role_start.hpp. Each prints one
// line on stdout once it is up (the job launcher waits for it).
//
// Thread safety: main's thread only.
#pragma once

#include <string>
#include <vector>

#include "launch/role_file.hpp"

namespace sluice::cli {

// Runs the role `args.role` with the overrides from `environment` (SLUICE_*) and then the
// command line's; the process exit code (0 done, 1 failed, 2 bad configuration).
int run_role(const RoleArgs& args, const std::vector<std::string>& environment);

}  // namespace sluice::cli
