#include "rollout/engine.hpp"

#include <cmath>
#include <limits>

namespace sluice::rollout {

namespace {

// Strict field readers: a missing field or one of the wrong type is a protocol error that names
// the field, so a malformed migration is refused with a message that says what was wrong.
core::Status bad_field(const char* key, const char* expected) {
  return core::protocol_error(std::string("sequence state: '") + key + "' must be " + expected);
}

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool is_non_negative_integer(const nlohmann::json& v) {
  if (!v.is_number_integer()) return false;
  return v.is_number_unsigned() || v.get<std::int64_t>() >= 0;
}

core::Status read_string(const nlohmann::json& j, const char* key, std::string& out) {
  const auto* v = field(j, key);
  if (v == nullptr || !v->is_string()) return bad_field(key, "a string");
  out = v->get<std::string>();
  return {};
}

core::Status read_u64(const nlohmann::json& j, const char* key, std::uint64_t& out) {
  const auto* v = field(j, key);
  if (v == nullptr || !is_non_negative_integer(*v)) {
    return bad_field(key, "a non-negative integer");
  }
  out = v->get<std::uint64_t>();
  return {};
}

core::Status read_u64_array(const nlohmann::json& j, const char* key,
                            std::vector<std::uint64_t>& out) {
  const auto* v = field(j, key);
  if (v == nullptr || !v->is_array()) return bad_field(key, "an array of non-negative integers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!is_non_negative_integer(e)) return bad_field(key, "an array of non-negative integers");
    out.push_back(e.get<std::uint64_t>());
  }
  return {};
}

core::Status read_token_array(const nlohmann::json& j, const char* key,
                              std::vector<std::int32_t>& out) {
  const auto* v = field(j, key);
  if (v == nullptr || !v->is_array()) return bad_field(key, "an array of 32-bit integers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    bool ok = e.is_number_integer();
    if (ok && e.is_number_unsigned()) {
      ok = e.get<std::uint64_t>() <=
           static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max());
    } else if (ok) {
      auto x = e.get<std::int64_t>();
      ok = x >= std::numeric_limits<std::int32_t>::min() &&
           x <= std::numeric_limits<std::int32_t>::max();
    }
    if (!ok) return bad_field(key, "an array of 32-bit integers");
    out.push_back(e.get<std::int32_t>());
  }
  return {};
}

core::Status read_float_array(const nlohmann::json& j, const char* key, std::vector<float>& out) {
  const auto* v = field(j, key);
  if (v == nullptr || !v->is_array()) return bad_field(key, "an array of numbers");
  out.clear();
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number() || !std::isfinite(e.get<double>())) {
      return bad_field(key, "an array of finite numbers");
    }
    out.push_back(e.get<float>());
  }
  return {};
}

}  // namespace

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
  SequenceState s;
  SLUICE_TRY(read_string(j, "trajectory_id", s.trajectory_id));
  SLUICE_TRY(read_string(j, "prompt_id", s.prompt_id));
  SLUICE_TRY(read_token_array(j, "prompt_tokens", s.prompt_tokens));
  SLUICE_TRY(read_token_array(j, "generated", s.generated));
  SLUICE_TRY(read_float_array(j, "logprobs", s.logprobs));
  SLUICE_TRY(read_u64_array(j, "versions", s.versions));
  SLUICE_TRY(read_u64(j, "max_new_tokens", s.max_new_tokens));
  SLUICE_TRY(read_u64(j, "rng_state", s.rng_state));
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
