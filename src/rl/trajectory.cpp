#include "rl/trajectory.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/json_limits.hpp"

namespace sluice::rl {

nlohmann::json Trajectory::to_json() const {
  nlohmann::json j{{"id", id},
                   {"prompt_id", prompt_id},
                   {"version", version},
                   {"versions", versions},
                   {"prompt_tokens", prompt_tokens},
                   {"response_tokens", response_tokens},
                   {"logprobs", logprobs},
                   {"reward", reward},
                   {"rollout", rollout},
                   {"abandoned", abandoned}};
  if (is_episode() || !token_versions.empty()) {
    j["loss_mask"] = loss_mask;
    j["token_versions"] = token_versions;
    j["turns"] = turns;
  }
  return j;
}

std::size_t Trajectory::model_tokens() const {
  if (loss_mask.empty()) return response_tokens.size();
  return static_cast<std::size_t>(std::count(loss_mask.begin(), loss_mask.end(), 1));
}

core::Status Trajectory::check_episode() const {
  auto bad = [&](const std::string& what) {
    return core::protocol_error(fmt::format("trajectory {}: {}", id, what));
  };
  const std::size_t n = response_tokens.size();
  if (loss_mask.empty() && token_versions.empty()) {
    if (turns != 1) return bad(fmt::format("{} turns without a loss mask", turns));
    return {};
  }
  if (loss_mask.size() != n || token_versions.size() != n) {
    return bad(fmt::format("a loss mask of {} and {} token versions for {} response tokens",
                           loss_mask.size(), token_versions.size(), n));
  }
  if (turns == 0) return bad("0 turns");
  std::uint64_t last = 0;
  std::size_t model = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t v = token_versions[i];
    if (loss_mask[i] > 1) return bad(fmt::format("loss mask {} at token {}", loss_mask[i], i));
    if (loss_mask[i] == 0) {
      if (logprobs[i] != 0.0f || v != 0) {
        return bad(fmt::format("environment token {} carries a log-prob or a version", i));
      }
      continue;
    }
    if (v == 0 || v < last) {
      return bad(fmt::format("model token {} has version {} after version {}", i, v, last));
    }
    if (std::find(versions.begin(), versions.end(), v) == versions.end()) {
      return bad(
          fmt::format("model token {} has version {}, which `versions` does not list", i, v));
    }
    if (model == 0 && v != version) {
      return bad(
          fmt::format("the first model token has version {}, not the trajectory's {}", v, version));
    }
    last = v;
    ++model;
  }
  if (model == 0) return bad("no model token");
  return {};
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
  if (j.contains("loss_mask")) {
    std::vector<std::uint64_t> mask;
    SLUICE_TRY(f::u64_array(j, kWhat, "loss_mask", mask));
    for (std::uint64_t m : mask) {
      if (m > 1) return core::protocol_error("trajectory: 'loss_mask' must hold 0 and 1");
      t.loss_mask.push_back(static_cast<std::uint8_t>(m));
    }
  }
  if (j.contains("token_versions"))
    SLUICE_TRY(f::u64_array(j, kWhat, "token_versions", t.token_versions));
  if (j.contains("turns")) {
    std::uint64_t turns = 0;
    SLUICE_TRY(f::u64_at_most(j, kWhat, "turns", kMaxTurns, turns));
    t.turns = static_cast<std::uint32_t>(turns);
  }
  SLUICE_TRY(t.check_episode());
  return t;
}

}  // namespace sluice::rl
