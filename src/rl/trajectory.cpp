#include "rl/trajectory.hpp"

#include <fmt/format.h>

#include "core/json_limits.hpp"

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
  namespace f = core::json_field;
  constexpr std::string_view kWhat = "trajectory";
  if (!j.is_object()) return core::protocol_error("trajectory: not a JSON object");
  Trajectory t;
  SLUICE_TRY(f::string(j, kWhat, "id", t.id));
  SLUICE_TRY(f::string(j, kWhat, "prompt_id", t.prompt_id));
  SLUICE_TRY(f::u64(j, kWhat, "version", t.version));
  SLUICE_TRY(f::u64_array(j, kWhat, "versions", t.versions));
  SLUICE_TRY(f::i32_array(j, kWhat, "prompt_tokens", t.prompt_tokens));
  SLUICE_TRY(f::i32_array(j, kWhat, "response_tokens", t.response_tokens));
  SLUICE_TRY(f::f32_array(j, kWhat, "logprobs", t.logprobs));
  SLUICE_TRY(f::f64(j, kWhat, "reward", t.reward));
  if (j.contains("rollout")) SLUICE_TRY(f::string(j, kWhat, "rollout", t.rollout));
  if (j.contains("abandoned")) SLUICE_TRY(f::boolean(j, kWhat, "abandoned", t.abandoned));
  if (t.id.empty()) return core::protocol_error("trajectory: empty id");
  if (t.logprobs.size() != t.response_tokens.size()) {
    return core::protocol_error(fmt::format("trajectory {}: {} log-probs for {} response tokens",
                                            t.id, t.logprobs.size(), t.response_tokens.size()));
  }
  return t;
}

}  // namespace sluice::rl
