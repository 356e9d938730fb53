#include "rollout/agent_config.hpp"

namespace sluice::rollout {

core::Status AgentEndpointConfig::validate() const {
  if (max_body_bytes == 0) return core::invalid_argument("max_body_bytes must be at least 1");
  if (max_connections == 0) return core::invalid_argument("max_connections must be at least 1");
  if (max_idle_connections == 0 || max_idle_connections > max_connections) {
    return core::invalid_argument("max_idle_connections must lie in [1, max_connections]");
  }
  if (header_timeout_ms == 0 || request_timeout_ms < header_timeout_ms) {
    return core::invalid_argument(
        "header_timeout_ms must be at least 1 and request_timeout_ms at least header_timeout_ms");
  }
  if (answer_timeout_ms == 0) return core::invalid_argument("answer_timeout_ms must be at least 1");
  if (max_sessions == 0) return core::invalid_argument("max_sessions must be at least 1");
  if (sweep_ms == 0) return core::invalid_argument("sweep_ms must be at least 1");
  return {};
}

}  // namespace sluice::rollout
