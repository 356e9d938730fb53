#include "rollout/manager_config.hpp"

#include <fmt/format.h>

#include "rollout/mode_policy.hpp"

namespace sluice::rollout {

core::Status ManagerConfig::validate() const {
  SLUICE_TRY(parse_mode(mode).status());
  if (group_size == 0) return core::invalid_argument("group_size must be at least 1");
  if (batch_trajectories == 0 || batch_trajectories % group_size != 0) {
    return core::invalid_argument(
        fmt::format("batch_trajectories ({}) must be a positive multiple of group_size ({})",
                    batch_trajectories, group_size));
  }
  if (ahead_batches == 0) return core::invalid_argument("ahead_batches must be at least 1");
  SLUICE_ASSIGN_OR_RETURN(Mode m, parse_mode(mode));
  SLUICE_TRY(parse_admission(admission, m).status());
  if (backlog_batches == 0) return core::invalid_argument("backlog_batches must be at least 1");
  SLUICE_TRY(parse_tail(tail).status());
  if (prompt_source != "sim" && prompt_source != "task") {
    return core::invalid_argument(
        fmt::format("prompt_source must be sim or task, not '{}'", prompt_source));
  }
  if (prompt_source == "task") SLUICE_TRY(task.validate().with_context("task"));
  if (heartbeat_timeout_ms < 100) {
    return core::invalid_argument("heartbeat_timeout_ms must be at least 100");
  }
  if (heartbeat_check_ms == 0 || heartbeat_check_ms > heartbeat_timeout_ms) {
    return core::invalid_argument(
        fmt::format("heartbeat_check_ms ({}) must be at least 1 and at most heartbeat_timeout_ms "
                    "({})",
                    heartbeat_check_ms, heartbeat_timeout_ms));
  }
  if (ramp_down_occupancy < 0 || ramp_down_occupancy > 1) {
    return core::invalid_argument("ramp_down_occupancy must be in [0, 1]");
  }
  SLUICE_TRY(repack_cost.validate());
  return {};
}

}  // namespace sluice::rollout
