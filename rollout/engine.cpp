#include "rollout/engine.hpp"

#include "core/json_limits.hpp"

#include <cmath>
#include <limits>

namespace sluice::rollout {

nlohmann::json SequenceState::to_json() const {
  nlohmann::json j{{"trajectory_id", trajectory_id},
                   {"prompt_id", prompt_id},
                   {"prompt_tokens", prompt_tokens},
                   {"generated", generated},
                   {"logprobs", logprobs},
                   {"versions", versions},
                   {"max_new_tokens", max_new_tokens},
                   {"rng_state", rng_state}};
  // Floats travel as JSON numbers: nlohmann writes them with enough digits to read back the same
  // bits, so the destination's cache is bit for bit the source's.
  if (kv) {
    j["kv"] = nlohmann::json{{"version", kv->version},   {"layers", kv->layers},
                             {"width", kv->width},       {"positions", kv->positions},
                             {"keys", kv->keys},         {"values", kv->values}};
  }
  return j;
}

namespace {

core::Result<KvState> kv_from_json(const nlohmann::json& j, const std::string& id) {
  if (!j.is_object()) return core::protocol_error("sequence state " + id + ": 'kv' not an object");
  namespace f = core::json_field;
  const std::string what = "sequence state " + id + " kv";
  KvState kv;
  std::uint64_t layers = 0, width = 0, positions = 0;
  SLUICE_TRY(f::u64(j, what, "version", kv.version));
  SLUICE_TRY(f::u64(j, what, "layers", layers));
  SLUICE_TRY(f::u64(j, what, "width", width));
  SLUICE_TRY(f::u64(j, what, "positions", positions));
  constexpr std::uint64_t kMax = 1u << 20;  // each; so that their product cannot overflow
  if (layers > kMax || width > kMax || positions > kMax) {
    return core::protocol_error(what + ": shape out of range");
  }
  kv.layers = static_cast<std::uint32_t>(layers);
  kv.width = static_cast<std::uint32_t>(width);
  kv.positions = static_cast<std::uint32_t>(positions);
  SLUICE_TRY(f::f32_array(j, what, "keys", kv.keys));
  SLUICE_TRY(f::f32_array(j, what, "values", kv.values));
  const std::uint64_t want = layers * width * positions;
  if (kv.keys.size() != want || kv.values.size() != want) {
    return core::protocol_error(what + ": keys and values must hold layers x width x positions (" +
                                std::to_string(want) + ") each");
  }
  return kv;
}

}  // namespace

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
  if (j.contains("kv")) {
    SLUICE_ASSIGN_OR_RETURN(KvState kv, kv_from_json(j["kv"], s.trajectory_id));
    s.kv = std::move(kv);
  }
  if (s.logprobs.size() != s.generated.size()) {
    return core::protocol_error("sequence state " + s.trajectory_id + ": " +
                                std::to_string(s.logprobs.size()) + " 'logprobs' for " +
                                std::to_string(s.generated.size()) + " 'generated' tokens");
  }
  return s;
}

}  // namespace sluice::rollout
