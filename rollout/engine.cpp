#include "rollout/engine.hpp"

#include "core/json_limits.hpp"

#include <cmath>
#include <limits>

namespace sluice::rollout {

nlohmann::json SequenceState::to_json() const {
  return nlohmann::json{{"trajectory_id", trajectory_id},
                        {"prompt_id", prompt_id},
                        {"prompt_tokens", prompt_tokens},
                        {"generated", generated},
                        {"logprobs", logprobs},
                        {"versions", versions},
                        {"max_new_tokens", max_new_tokens},
                        {"rng_state", rng_state}};
}

rl::Trajectory to_trajectory(const SequenceState& s, double reward, const std::string& rollout) {
  rl::Trajectory t;
  t.id = s.trajectory_id;
  t.prompt_id = s.prompt_id;
  t.versions = s.versions;
  t.version = s.versions.empty() ? 0 : s.versions.front();
  t.prompt_tokens = s.prompt_tokens;
  t.response_tokens = s.generated;
  t.logprobs = s.logprobs;
  t.reward = reward;
  t.rollout = rollout;
  return t;
}

core::Result<SequenceState> SequenceState::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return core::protocol_error("sequence state: not a JSON object");
  namespace f = core::json_field;
  constexpr std::string_view kWhat = "sequence state";
  SequenceState s;
  SLUICE_TRY(f::string(j, kWhat, "trajectory_id", s.trajectory_id));
  SLUICE_TRY(f::string(j, kWhat, "prompt_id", s.prompt_id));
  SLUICE_TRY(f::i32_array(j, kWhat, "prompt_tokens", s.prompt_tokens));
  SLUICE_TRY(f::i32_array(j, kWhat, "generated", s.generated));
  SLUICE_TRY(f::f32_array(j, kWhat, "logprobs", s.logprobs));
  SLUICE_TRY(f::u64_array(j, kWhat, "versions", s.versions));
  SLUICE_TRY(f::u64(j, kWhat, "max_new_tokens", s.max_new_tokens));
  SLUICE_TRY(f::u64(j, kWhat, "rng_state", s.rng_state));
  if (s.trajectory_id.empty()) {
    return core::protocol_error("sequence state: 'trajectory_id' must not be empty");
  }
  if (s.logprobs.size() != s.generated.size()) {
    return core::protocol_error("sequence state " + s.trajectory_id + ": " +
                                std::to_string(s.logprobs.size()) + " 'logprobs' for " +
                                std::to_string(s.generated.size()) + " 'generated' tokens");
  }
  return s;
}

}  // namespace sluice::rollout
