// The rollout fleet's roles as subcommands: `sluice rollout-manager`, `sluice rollout` and
// `sluice actor`. Each returns the process exit code (0 done, 1 failed, 2 bad configuration).
#pragma once

#include <string>
#include <vector>

#include "launch/commands.hpp"

namespace sluice::cli {

int run_rollout_manager(const RoleArgs& args, const std::vector<std::string>& overrides);
int run_rollout(const RoleArgs& args, const std::vector<std::string>& overrides,
                const std::vector<std::string>& environment);
int run_actor(const RoleArgs& args, const std::vector<std::string>& overrides,
              const std::vector<std::string>& environment);

}  // namespace sluice::cli
