// The harness that checks a job survived fault injection.
//
// ChaosConfig (the job file's `chaos` section, launch/chaos_schedule.hpp) makes the launcher
// SIGKILL random roles at random times; the supervisor restarts them. `sluice chaos JOB.json
// --kills N` runs the job once without faults and once with them, then checks and prints: kills and
// restarts per role, trajectories generated / consumed / lost / consumed twice, versions that went
// backwards in any reader, chunks accepted that failed verification or came from another version,
// whether the job completed, and wall time, trained tokens and held-out accuracy against the
// fault-free run.
//
// Thread safety: one thread (the launcher's).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "launch/chaos_schedule.hpp"

namespace sluice::cli {

struct ChaosArgs {
  std::string job_path;
  std::vector<std::string> overrides;
  std::uint32_t kills = 20;
  std::string roles;  // empty: every role
  double every_s = 0;
  std::uint64_t seed = 0;  // 0: drawn from the clock (and printed)
  double duration_s = 0;   // both runs stop after this long (trained tokens compared)
  // With duration_s: the least trained tokens with kills / without that passes.
  double min_token_ratio = 0.95;
  bool baseline = true;  // also run the job without faults, for the comparison
  bool json = false;
  std::string out_dir;  // default runs/chaos-<time>
};

// `sluice chaos`: returns the process exit status (0 when every check held).
int run_chaos(const ChaosArgs& args, const std::string& sluice_exe,
              const std::vector<std::string>& environment);

// The checks on one finished (or failed) run folder; exposed for tests.
nlohmann::json chaos_checks(const std::string& run_dir, std::uint64_t expected_trajectories);

}  // namespace sluice::cli
