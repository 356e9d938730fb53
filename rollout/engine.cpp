#include "rollout/engine.hpp"

#include "core/json_limits.hpp"
#include "wire/transfer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sluice::rollout {

namespace {

// A region descriptor is binary: it travels in JSON as lowercase hex.
std::string to_hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

core::Result<std::string> from_hex(const std::string& hex, const std::string& what) {
  if (hex.size() % 2 != 0) return core::protocol_error(what + ": odd number of hex digits");
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return core::protocol_error(what + ": not lowercase hex");
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

core::Status check_sequence(std::string_view engine, const SequenceState& seq) {
  const std::string& id = seq.trajectory_id;
  if (id.empty()) return core::invalid_argument(fmt::format("{}: empty trajectory id", engine));
  if (seq.max_new_tokens == 0) {
    return core::invalid_argument(fmt::format("{}: sequence {} has max_new_tokens 0", engine, id));
  }
  if (seq.logprobs.size() != seq.generated.size()) {
    return core::invalid_argument(
        fmt::format("{}: sequence {} has {} log-probs for {} generated tokens", engine, id,
                    seq.logprobs.size(), seq.generated.size()));
  }
  return check_episode_fields(engine, seq);
}

core::Status check_episode_fields(std::string_view engine, const SequenceState& seq) {
  if (!seq.is_episode()) {
    if (seq.loss_mask.empty() && seq.token_versions.empty()) return {};
    return core::invalid_argument(
        fmt::format("{}: sequence {} has a loss mask or token versions but no call token", engine,
                    seq.trajectory_id));
  }
  if (seq.generated.empty()) return {};
  // Before the model's first turn only the environment's tokens are there (a reset's answer).
  const bool model_token =
      std::find(seq.loss_mask.begin(), seq.loss_mask.end(), std::uint8_t{1}) != seq.loss_mask.end();
  if (!model_token) {
    const std::size_t n = seq.generated.size();
    const bool plain =
        seq.loss_mask.size() == n && seq.token_versions.size() == n &&
        std::all_of(seq.loss_mask.begin(), seq.loss_mask.end(), [](auto m) { return m == 0; }) &&
        std::all_of(seq.token_versions.begin(), seq.token_versions.end(),
                    [](auto v) { return v == 0; }) &&
        std::all_of(seq.logprobs.begin(), seq.logprobs.end(), [](float l) { return l == 0.0f; });
    if (plain) return {};
    return core::invalid_argument(fmt::format(
        "{}: sequence {}: its environment's tokens need a mask, version and log-prob of 0 each",
        engine, seq.trajectory_id));
  }
  // The checks are the trajectory's own (rl::Trajectory::check_episode).
  rl::Trajectory t = to_trajectory(seq, 0.0, "");
  return t.check_episode().with_context(fmt::format("{}: sequence {}", engine, seq.trajectory_id));
}

void record_sample(SequenceState& s, std::int32_t token, float logprob, std::uint64_t version) {
  if (s.versions.empty() || s.versions.back() != version) s.versions.push_back(version);
  s.generated.push_back(token);
  s.logprobs.push_back(logprob);
  if (!s.is_episode()) return;
  s.loss_mask.push_back(1);
  s.token_versions.push_back(version);
}

std::size_t SequenceState::stop_length() const {
  std::size_t longest = 0;
  for (const auto& seq : stop.sequences) {
    const std::size_t n = seq.size();
    if (n == 0 || n <= longest || generated.size() < stop.from + n) continue;
    if (std::equal(seq.begin(), seq.end(), generated.end() - static_cast<std::ptrdiff_t>(n))) {
      longest = n;
    }
  }
  return longest;
}

bool cut_stop(SequenceState& s) {
  const std::size_t n = s.stop_length();
  if (n == 0 || s.loss_mask.size() != s.generated.size() ||
      s.token_versions.size() != s.generated.size() || s.logprobs.size() != s.generated.size()) {
    return false;
  }
  const std::size_t keep = s.generated.size() - n;
  s.generated.resize(keep);
  s.logprobs.resize(keep);
  s.loss_mask.resize(keep);
  s.token_versions.resize(keep);
  s.kv.reset();
  s.stop.hit = true;
  return true;
}

void record_environment(SequenceState& s, const std::vector<std::int32_t>& tokens) {
  // A turn follows a model turn; what comes before the first (an agent's context) starts none.
  const bool after_model =
      std::find(s.loss_mask.begin(), s.loss_mask.end(), std::uint8_t{1}) != s.loss_mask.end();
  for (std::int32_t t : tokens) {
    s.generated.push_back(t);
    s.logprobs.push_back(0.0f);
    s.loss_mask.push_back(0);
    s.token_versions.push_back(0);
  }
  if (after_model) ++s.turns;
}

bool fits(const Capacity& c, std::size_t active, std::uint64_t kv_used, std::uint64_t kv_tokens) {
  return active < c.max_sequences && kv_tokens <= c.max_kv_tokens &&
         kv_used <= c.max_kv_tokens - kv_tokens;
}

core::Status check_room(std::string_view engine, const Capacity& c, const std::string& id,
                        std::size_t active, std::uint64_t kv_used, std::uint64_t kv_tokens) {
  if (active >= c.max_sequences) {
    return core::Status(core::Code::kResourceExhausted,
                        fmt::format("{}: cannot admit {}: batch full ({} of {} sequences)", engine,
                                    id, active, c.max_sequences));
  }
  if (!fits(c, active, kv_used, kv_tokens)) {
    return core::Status(
        core::Code::kResourceExhausted,
        fmt::format("{}: cannot admit {}: it needs {} KV tokens, {} of {} free", engine, id,
                    kv_tokens, c.max_kv_tokens - kv_used, c.max_kv_tokens));
  }
  return {};
}

nlohmann::json SequenceState::to_json() const {
  nlohmann::json j{{"trajectory_id", trajectory_id},
                   {"prompt_id", prompt_id},
                   {"prompt_tokens", prompt_tokens},
                   {"generated", generated},
                   {"logprobs", logprobs},
                   {"versions", versions},
                   {"max_new_tokens", max_new_tokens},
                   {"rng_state", rng_state}};
  if (is_episode()) {
    j["call_token"] = call_token;
    j["loss_mask"] = loss_mask;
    j["token_versions"] = token_versions;
    j["turns"] = turns;
    if (turn_limit > 0) j["turn_limit"] = turn_limit;
    if (!stop.sequences.empty()) {
      j["stop"] =
          nlohmann::json{{"sequences", stop.sequences}, {"from", stop.from}, {"hit", stop.hit}};
    }
  }
  // Floats travel as JSON numbers: nlohmann writes them with enough digits to read back the same
  // bits, so the destination's cache is bit for bit the source's.
  if (kv) {
    j["kv"] = nlohmann::json{{"version", kv->version}, {"layers", kv->layers},
                             {"width", kv->width},     {"positions", kv->positions},
                             {"keys", kv->keys},       {"values", kv->values}};
  }
  if (kv_ref) {
    j["kv_ref"] = nlohmann::json{
        {"version", kv_ref->version},       {"layers", kv_ref->layers},
        {"width", kv_ref->width},           {"positions", kv_ref->positions},
        {"bytes", kv_ref->bytes},           {"checksum", fmt::format("{:016x}", kv_ref->checksum)},
        {"region", to_hex(kv_ref->region)}, {"source", kv_ref->source}};
    if (!kv_ref->destination.empty()) j["kv_ref"]["destination"] = kv_ref->destination;
  }
  return j;
}

namespace {

// The shape both KV forms carry: the weights' version and layers x width x positions, each
// bounded so that their product cannot overflow.
struct KvShape {
  std::uint64_t version = 0;
  std::uint32_t layers = 0, width = 0, positions = 0;
};

core::Result<KvShape> kv_shape_from_json(const nlohmann::json& j, const std::string& what) {
  namespace f = core::json_field;
  KvShape shape;
  std::uint64_t layers = 0, width = 0, positions = 0;
  SLUICE_TRY(f::u64(j, what, "version", shape.version));
  SLUICE_TRY(f::u64(j, what, "layers", layers));
  SLUICE_TRY(f::u64(j, what, "width", width));
  SLUICE_TRY(f::u64(j, what, "positions", positions));
  constexpr std::uint64_t kMax = 1u << 20;
  if (layers > kMax || width > kMax || positions > kMax) {
    return core::protocol_error(what + ": shape out of range");
  }
  shape.layers = static_cast<std::uint32_t>(layers);
  shape.width = static_cast<std::uint32_t>(width);
  shape.positions = static_cast<std::uint32_t>(positions);
  return shape;
}

// KvState and KvRef carry the same four shape fields.
template <typename T>
T with_shape(const KvShape& shape) {
  T t;
  t.version = shape.version;
  t.layers = shape.layers;
  t.width = shape.width;
  t.positions = shape.positions;
  return t;
}

core::Result<KvState> kv_from_json(const nlohmann::json& j, const std::string& id) {
  if (!j.is_object()) return core::protocol_error("sequence state " + id + ": 'kv' not an object");
  namespace f = core::json_field;
  const std::string what = "sequence state " + id + " kv";
  SLUICE_ASSIGN_OR_RETURN(KvShape shape, kv_shape_from_json(j, what));
  auto kv = with_shape<KvState>(shape);
  SLUICE_TRY(f::f32_array(j, what, "keys", kv.keys));
  SLUICE_TRY(f::f32_array(j, what, "values", kv.values));
  const std::uint64_t want = std::uint64_t{kv.layers} * kv.width * kv.positions;
  if (kv.keys.size() != want || kv.values.size() != want) {
    return core::protocol_error(what + ": keys and values must hold layers x width x positions (" +
                                std::to_string(want) + ") each");
  }
  return kv;
}

core::Result<KvRef> kv_ref_from_json(const nlohmann::json& j, const std::string& id) {
  const std::string what = "sequence state " + id + " kv_ref";
  if (!j.is_object()) return core::protocol_error(what + ": not an object");
  namespace f = core::json_field;
  SLUICE_ASSIGN_OR_RETURN(KvShape shape, kv_shape_from_json(j, what));
  auto r = with_shape<KvRef>(shape);
  std::string checksum, region;
  SLUICE_TRY(f::u64(j, what, "bytes", r.bytes));
  SLUICE_TRY(f::string(j, what, "checksum", checksum));
  SLUICE_TRY(f::string(j, what, "region", region));
  SLUICE_TRY(f::string(j, what, "source", r.source));
  if (j.contains("destination")) SLUICE_TRY(f::string(j, what, "destination", r.destination));
  if (r.source.empty() || r.source.size() > kMaxKvIdBytes || r.destination.size() > kMaxKvIdBytes) {
    return core::protocol_error(what + ": source must be 1 to " + std::to_string(kMaxKvIdBytes) +
                                " bytes, destination at most that");
  }
  if (r.bytes != r.shape_bytes()) {
    return core::protocol_error(what + ": " + std::to_string(r.bytes) + " bytes for a shape of " +
                                std::to_string(r.shape_bytes()));
  }
  if (checksum.size() != 16) return core::protocol_error(what + ": checksum is not 16 hex digits");
  SLUICE_ASSIGN_OR_RETURN(std::string sum, from_hex(checksum, what + " checksum"));
  for (unsigned char c : sum)
    r.checksum = (r.checksum << 8) | c;
  // A descriptor is a few hundred bytes (worker address, rkey, up to 8 stream addresses).
  constexpr std::size_t kMaxRegionHex = 64 * 1024;
  if (region.size() > kMaxRegionHex) return core::protocol_error(what + ": region too long");
  SLUICE_ASSIGN_OR_RETURN(r.region, from_hex(region, what + " region"));
  auto desc = core::RegionDescriptor::decode(r.region);
  if (!desc.is_ok()) return desc.status().with_context(what);
  if (desc->length < r.bytes) {
    return core::protocol_error(what + ": region of " + std::to_string(desc->length) +
                                " bytes cannot hold " + std::to_string(r.bytes));
  }
  return r;
}

core::Result<TurnStop> stop_from_json(const nlohmann::json& j) {
  namespace f = core::json_field;
  constexpr std::string_view kStop = "sequence state stop";
  SLUICE_TRY(f::object(j, kStop));
  TurnStop stop;
  SLUICE_TRY(f::u64(j, kStop, "from", stop.from));
  SLUICE_TRY(f::boolean(j, kStop, "hit", stop.hit));
  SLUICE_TRY(f::list(j, kStop, "sequences", kMaxStopSequences, stop.sequences,
                     [&](const nlohmann::json& e, std::size_t i, std::vector<std::int32_t>& out) {
                       nlohmann::json one{{"s", e}};
                       const std::string key = fmt::format("sequences[{}]", i);
                       if (!f::i32_array(one, kStop, "s", out).is_ok() || out.empty() ||
                           out.size() > kMaxStopTokens) {
                         return f::error(kStop, key,
                                         fmt::format("must be 1 to {} token ids", kMaxStopTokens));
                       }
                       return core::Status();
                     }));
  return stop;
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
  if (s.is_episode()) {
    t.loss_mask = s.loss_mask;
    t.token_versions = s.token_versions;
    t.turns = s.turns;
  }
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
  if (j.contains("kv_ref")) {
    if (s.kv) {
      return core::protocol_error("sequence state " + s.trajectory_id + ": both 'kv' and 'kv_ref'");
    }
    SLUICE_ASSIGN_OR_RETURN(KvRef ref, kv_ref_from_json(j["kv_ref"], s.trajectory_id));
    s.kv_ref = std::move(ref);
  }
  if (s.logprobs.size() != s.generated.size()) {
    return core::protocol_error("sequence state " + s.trajectory_id + ": " +
                                std::to_string(s.logprobs.size()) + " 'logprobs' for " +
                                std::to_string(s.generated.size()) + " 'generated' tokens");
  }
  if (j.contains("call_token")) {
    std::uint64_t call = 0, turns = 0;
    std::vector<std::uint64_t> mask;
    SLUICE_TRY(f::u64_at_most(j, kWhat, "call_token", std::uint64_t{1} << 30, call));
    SLUICE_TRY(f::u64_array(j, kWhat, "loss_mask", mask));
    SLUICE_TRY(f::u64_array(j, kWhat, "token_versions", s.token_versions));
    SLUICE_TRY(f::u64_at_most(j, kWhat, "turns", rl::kMaxTurns, turns));
    s.call_token = static_cast<std::int32_t>(call);
    s.turns = static_cast<std::uint32_t>(turns);
    if (j.contains("turn_limit")) SLUICE_TRY(f::u64(j, kWhat, "turn_limit", s.turn_limit));
    if (j.contains("stop")) {
      SLUICE_ASSIGN_OR_RETURN(s.stop, stop_from_json(j["stop"]));
    }
    for (std::uint64_t m : mask) {
      if (m > 1) return core::protocol_error("sequence state: 'loss_mask' must hold 0 and 1");
      s.loss_mask.push_back(static_cast<std::uint8_t>(m));
    }
    core::Status st = check_episode_fields("sequence state", s);
    if (!st.is_ok()) return core::protocol_error(st.message());
  }
  return s;
}

}  // namespace sluice::rollout
