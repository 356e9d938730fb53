// Elastic fleets: rollouts and relays join and leave a running job (docs/architecture.md,
// "Elastic fleets").
//
// `sluice run --add rollout[=N] RUN_DIR` starts N more rollouts (or relays: --add relay=N) for the
// job running from RUN_DIR, under this command's supervision (restarted when they die, like the
// job's own roles): each gets a fresh id (rollout-K with K never used in the run folder) whose key
// the job made up front (JobConfig::max_rollouts, max_relays), its role file in RUN_DIR and its log
// there. The command stays in the foreground; it ends when its roles have exited (the job is done,
// or they were removed), when the job's summary.json appears, or on Ctrl-C / SIGTERM (its roles
// are stopped: rollouts hand their work back). While it runs it writes one line per joiner to
// RUN_DIR/joins.jsonl once the joiner has finished its first trajectory: its seconds from start
// to first weights and to first trajectory, and the bytes it pulled (from its host and in all).
//
// `sluice run --remove rollout=N RUN_DIR` sends SIGTERM to the N running rollouts of RUN_DIR with
// the highest ids and waits (bounded) for them to exit: each hands its queued and in-flight
// trajectories back to the manager in a leaving report (rollout/worker.hpp), which gives them to
// the others. A rollout killed with SIGKILL instead is reclaimed by the manager's heartbeat expiry.
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::cli {

// "rollout", "rollout=4", "relay=2": the role and how many.
struct FleetChange {
  std::string role;
  std::uint32_t count = 1;
};
core::Result<FleetChange> parse_fleet_change(const std::string& spec);

// Process exit codes: 0 done, 1 failed, 2 bad arguments.
int run_add(const std::string& spec, const std::string& run_dir,
            const std::vector<std::string>& overrides, const std::string& sluice_exe,
            const std::vector<std::string>& environment);
int run_remove(const std::string& spec, const std::string& run_dir, double wait_s);

// The running processes of `role` started from RUN_DIR's role files (`sluice ROLE --config
// RUN_DIR/ROLE-K.json`, found in /proc), as (K, pid), by K.
std::vector<std::pair<std::uint32_t, int>> running_roles(const std::string& run_dir,
                                                         const std::string& role);

}  // namespace sluice::cli
