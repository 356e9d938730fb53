// The agent endpoint's request bodies (rollout/agent_env.hpp), decoded in one place before any
// session is touched: every field's JSON type, range and size is checked (core::json_field), so a
// number where a string belongs, a null, a huge or negative number or an oversized list is an
// error naming the field, which the endpoint answers 400. Fields the endpoint does not use (an
// OpenAI client's "model", "temperature", ...) are ignored; an optional field given as null is
// taken as absent, as OpenAI's API takes it.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

inline constexpr std::size_t kMaxSessionBytes = 256;
inline constexpr std::uint64_t kDefaultMaxTokens = 64;
// `stop`: at most kMaxStopSequences (rollout/engine.hpp), each of 1 to kMaxStopChars characters
// (one token each).
inline constexpr std::size_t kMaxStopChars = kMaxStopTokens;

// POST /v1/completions or /v1/chat/completions.
struct TurnRequest {
  std::string session;
  // The whole context: `prompt`'s ids, or BOS then the chat messages' contents, joined in order,
  // in the built-in tokenizer's characters.
  std::vector<std::int32_t> context;
  std::uint64_t max_tokens = kDefaultMaxTokens;  // >= 1
  // `stop`, each in the tokenizer's ids (one per character), none empty.
  std::vector<std::vector<std::int32_t>> stop;
};

// POST /v1/episodes/end.
struct EndRequest {
  std::string session;
  double reward = 0.0;  // finite
};

// `body` of a completions request (`chat`: a chat completions one), token ids in [0, vocab).
// Errors (protocol_error): "request: '<field>' must be ...".
core::Result<TurnRequest> parse_turn_request(const nlohmann::json& body, bool chat,
                                             std::int32_t vocab);
core::Result<EndRequest> parse_end_request(const nlohmann::json& body);

}  // namespace sluice::rollout
