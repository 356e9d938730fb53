#include "rl/trajectory.hpp"

#include <fmt/format.h>

namespace sluice::rl {

nlohmann::json Trajectory::to_json() const {
  return nlohmann::json{{"id", id},
                        {"prompt_id", prompt_id},
                        {"version", version},
                        {"versions", versions},
                        {"prompt_tokens", prompt_tokens},
                        {"response_tokens", response_tokens},
                        {"logprobs", logprobs},
                        {"reward", reward},
                        {"rollout", rollout},
                        {"abandoned", abandoned}};
}

core::Result<Trajectory> Trajectory::from_json(const nlohmann::json& j) {
  Trajectory t;
  try {
    t.id = j.at("id").get<std::string>();
    t.prompt_id = j.at("prompt_id").get<std::string>();
    t.version = j.at("version").get<std::uint64_t>();
    t.versions = j.at("versions").get<std::vector<std::uint64_t>>();
    t.prompt_tokens = j.at("prompt_tokens").get<std::vector<std::int32_t>>();
    t.response_tokens = j.at("response_tokens").get<std::vector<std::int32_t>>();
    t.logprobs = j.at("logprobs").get<std::vector<float>>();
    t.reward = j.at("reward").get<double>();
    t.rollout = j.value("rollout", std::string());
    t.abandoned = j.value("abandoned", false);
  } catch (const nlohmann::json::exception& e) {
    return core::protocol_error(fmt::format("trajectory: {}", e.what()));
  }
  if (t.id.empty()) return core::protocol_error("trajectory: empty id");
  if (t.logprobs.size() != t.response_tokens.size()) {
    return core::protocol_error(fmt::format("trajectory {}: {} log-probs for {} response tokens",
                                            t.id, t.logprobs.size(), t.response_tokens.size()));
  }
  return t;
}

}  // namespace sluice::rl
