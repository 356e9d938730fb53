#include "rollout/agent_request.hpp"

#include <fmt/format.h>

#include "core/json_limits.hpp"
#include "rl/tokenizer.hpp"

namespace sluice::rollout {

namespace f = core::json_field;
using nlohmann::json;

namespace {

constexpr std::string_view kWhat = "request";
// Bounds no valid body reaches (the body is at most max_body_bytes): they only keep a list's
// size checked before its entries are read.
constexpr std::size_t kMaxListEntries = std::size_t{1} << 24;

// Whether the optional field `key` is given (present and not null).
bool given(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// The text's ids in the built-in tokenizer, or an error naming `key`.
core::Result<std::vector<std::int32_t>> encode(std::string_view text, std::string_view key) {
  auto ids = rl::Tokenizer::encode(text);
  if (!ids.is_ok()) return f::error(kWhat, key, "holds " + ids.status().message());
  return std::move(ids).value();
}

core::Status read_prompt(const json& body, std::int32_t vocab, std::vector<std::int32_t>& out) {
  const json* prompt = nullptr;
  const std::string expected = fmt::format("must be an array of token ids in [0, {})", vocab);
  if (!f::array(body, kWhat, "prompt", kMaxListEntries, prompt).is_ok()) {
    return f::error(kWhat, "prompt", expected);
  }
  out.reserve(prompt->size());
  for (const auto& e : *prompt) {
    // Non-negative literals parse as unsigned; a negative one as a signed integer.
    const bool id =
        e.is_number_unsigned()
            ? e.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab)
            : e.is_number_integer() && e.get<std::int64_t>() >= 0 && e.get<std::int64_t>() < vocab;
    if (!id) return f::error(kWhat, "prompt", expected);
    out.push_back(static_cast<std::int32_t>(e.get<std::int64_t>()));
  }
  return {};
}

core::Status read_messages(const json& body, std::vector<std::int32_t>& out) {
  const json* messages = nullptr;
  if (!f::array(body, kWhat, "messages", kMaxListEntries, messages).is_ok() || messages->empty()) {
    return f::error(kWhat, "messages", "must be a non-empty array of {role, content}");
  }
  std::string text;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string key = fmt::format("messages[{}]", i);
    if (!m.is_object()) return f::error(kWhat, key, "must be an object {role, content}");
    std::string content;
    if (!f::string(m, kWhat, "content", content).is_ok()) {
      return f::error(kWhat, key + ".content", "must be a string");
    }
    if (m.contains("role") && !m["role"].is_string()) {
      return f::error(kWhat, key + ".role", "must be a string");
    }
    text += content;
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::int32_t> ids, encode(text, "messages"));
  out.push_back(rl::Tokenizer::kBos);
  out.insert(out.end(), ids.begin(), ids.end());
  return {};
}

core::Status read_max_tokens(const json& body, std::uint64_t& out) {
  if (!given(body, "max_tokens")) return {};
  std::uint64_t v = 0;
  if (!f::u64(body, kWhat, "max_tokens", v).is_ok() || v == 0) {
    return f::error(kWhat, "max_tokens", "must be a positive integer (at most 2^64 - 1)");
  }
  out = v;
  return {};
}

core::Status read_stop(const json& body, std::vector<std::vector<std::int32_t>>& out) {
  if (!given(body, "stop")) return {};
  const json& stop = body["stop"];
  const std::string expected =
      fmt::format("must be a string or an array of at most {} strings, each of 1 to {} characters",
                  kMaxStopSequences, kMaxStopChars);
  std::vector<std::string> texts;
  if (stop.is_string()) {
    texts.push_back(stop.get<std::string>());
  } else if (stop.is_array() && stop.size() <= kMaxStopSequences) {
    for (const auto& e : stop) {
      if (!e.is_string()) return f::error(kWhat, "stop", expected);
      texts.push_back(e.get<std::string>());
    }
  } else {
    return f::error(kWhat, "stop", expected);
  }
  for (const auto& t : texts) {
    if (t.empty() || t.size() > kMaxStopChars) return f::error(kWhat, "stop", expected);
    SLUICE_ASSIGN_OR_RETURN(std::vector<std::int32_t> ids, encode(t, "stop"));
    out.push_back(std::move(ids));
  }
  return {};
}

}  // namespace

core::Result<TurnRequest> parse_turn_request(const json& body, bool chat, std::int32_t vocab) {
  SLUICE_TRY(f::object(body, kWhat));
  TurnRequest r;
  SLUICE_TRY(f::id(body, kWhat, "session", kMaxSessionBytes, r.session));
  if (chat) {
    SLUICE_TRY(read_messages(body, r.context));
  } else {
    SLUICE_TRY(read_prompt(body, vocab, r.context));
  }
  SLUICE_TRY(read_max_tokens(body, r.max_tokens));
  SLUICE_TRY(read_stop(body, r.stop));
  if (given(body, "stream") && !(body["stream"].is_boolean() && !body["stream"].get<bool>())) {
    return f::error(kWhat, "stream", "must be false: answers are not streamed");
  }
  return r;
}

core::Result<EndRequest> parse_end_request(const json& body) {
  SLUICE_TRY(f::object(body, kWhat));
  EndRequest r;
  SLUICE_TRY(f::id(body, kWhat, "session", kMaxSessionBytes, r.session));
  SLUICE_TRY(f::f64(body, kWhat, "reward", r.reward));
  return r;
}

}  // namespace sluice::rollout
