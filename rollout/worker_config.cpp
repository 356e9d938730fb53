#include "rollout/worker_config.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "wire/transfer.hpp"

namespace sluice::rollout {

core::Status RolloutConfig::validate() const {
  if (engine != "sim" && engine != "model") {
    return core::invalid_argument(fmt::format("unknown engine '{}' (sim or model)", engine));
  }
  if (engine == "model") {
    SLUICE_TRY(gpt.validate().with_context("gpt"));
    SLUICE_TRY(task.validate().with_context("task"));
  }
  if (report_ms == 0) return core::invalid_argument("report_ms must be at least 1");
  if (pull_in_flight == 0) return core::invalid_argument("pull_in_flight must be at least 1");
  if (serve != "auto" && serve != "on" && serve != "off") {
    return core::invalid_argument(fmt::format("serve must be auto, on or off, not '{}'", serve));
  }
  if (max_held_finished == 0) return core::invalid_argument("max_held_finished must be at least 1");
  if (leave_timeout_ms == 0) return core::invalid_argument("leave_timeout_ms must be at least 1");
  for (const auto& h : join_read_from) {
    if (h.empty()) return core::invalid_argument("join_read_from names an empty holder id");
  }
  if (env_timeout_ms == 0) return core::invalid_argument("env_timeout_ms must be at least 1");
  if (env_max_line_bytes == 0) {
    return core::invalid_argument("env_max_line_bytes must be at least 1");
  }
  if (!agent_listen.empty() && engine != "model") {
    return core::invalid_argument("agent_listen needs engine model");
  }
  SLUICE_TRY(agent.validate().with_context("agent"));
  const int drivers = (agent_listen.empty() ? 0 : 1) + (task.tool == "none" ? 0 : 1) +
                      (env_command.empty() ? 0 : 1);
  if (drivers > 1) {
    return core::invalid_argument(
        "agent_listen, task.tool and env_command each drive episodes: choose one");
  }
  if (!env_command.empty() && engine != "model") {
    return core::invalid_argument("env_command needs engine model");
  }
  SLUICE_TRY(env_latency.validate().with_context("env_latency"));
  if (manager_timeout_ms < report_ms) {
    return core::invalid_argument("manager_timeout_ms must be at least report_ms");
  }
  SLUICE_TRY(core::check_stream_encryption(stream_encryption, security.mode == "curve", "rollout"));
  return sim.validate();
}

void RolloutConfig::derive_report_timing(std::uint64_t heartbeat_timeout_ms) {
  if (report_timeout_ms == 0)
    report_timeout_ms = std::max<std::uint64_t>(1, heartbeat_timeout_ms / 4);
  if (report_retry_ms == 0) report_retry_ms = std::max<std::uint64_t>(1, heartbeat_timeout_ms / 8);
}

}  // namespace sluice::rollout
