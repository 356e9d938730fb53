// Where the sluice executable and its helper script are, for the launcher and the benches that
// start more processes.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

// The path of the running sluice executable (to start more of it).
std::string self_exe();

// scripts/emuhosts.sh: where SLUICE_EMUHOSTS in `environment` points, else beside the build tree
// (build/sluice -> scripts/). Empty when not found.
std::string find_emuhosts(const std::vector<std::string>& environment);

}  // namespace sluice::cli
