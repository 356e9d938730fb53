#include "rollout/agent_env.hpp"

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>
#include <cmath>

#include "rl/tokenizer.hpp"

namespace sluice::rollout {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxBody = 1 << 20;
constexpr std::uint64_t kMaxTokensDefault = 64;

constexpr std::size_t kRememberEnded = 4096;

// The token ids of a JSON array of integers in [0, vocab); nullopt when it is not one.
std::optional<std::vector<std::int32_t>> ids_of(const json& j, std::int32_t vocab) {
  if (!j.is_array()) return std::nullopt;
  std::vector<std::int32_t> out;
  out.reserve(j.size());
  for (const auto& e : j) {
    if (!e.is_number_integer()) return std::nullopt;
    const auto v = e.get<std::int64_t>();
    if (v < 0 || v >= vocab) return std::nullopt;
    out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

// Compares in constant time, so a wrong token's length of match is not timed.
bool same_token(const std::string& a, const std::string& b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

core::Result<std::unique_ptr<AgentEnvironment>> AgentEnvironment::create(core::EventLoop& loop,
                                                                         const std::string& listen,
                                                                         std::string token,
                                                                         AgentHooks hooks) {
  if (token.size() < 16) {
    return core::invalid_argument("agent endpoint: the job's token must be at least 16 characters");
  }
  std::unique_ptr<AgentEnvironment> env(new AgentEnvironment(std::move(token), std::move(hooks)));
  AgentEnvironment* raw = env.get();
  SLUICE_ASSIGN_OR_RETURN(
      env->server_,
      JsonHttpServer::create(loop, listen, kMaxBody,
                             [raw](const HttpRequest& r, JsonHttpServer::Respond respond) {
                               raw->handle(r, std::move(respond));
                             }));
  return env;
}

AgentEnvironment::~AgentEnvironment() = default;

std::int32_t AgentEnvironment::call_token() const {
  return rl::Tokenizer::kEos;
}

void AgentEnvironment::handle(const HttpRequest& r, JsonHttpServer::Respond respond) {
  if (!same_token(r.authorization, "Bearer " + token_)) {
    respond(http_error(401,
                       "missing or wrong token: send 'Authorization: Bearer TOKEN' with the "
                       "job's agent token"));
    return;
  }
  if (r.method != "POST") {
    respond(http_error(405, "only POST"));
    return;
  }
  json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (r.target == "/v1/episodes") {
    start_episode(std::move(respond));
    return;
  }
  if (body.is_discarded() || !body.is_object()) {
    respond(http_error(400, "the body is not a JSON object"));
    return;
  }
  if (r.target == "/v1/completions") {
    turn(body, false, std::move(respond));
  } else if (r.target == "/v1/chat/completions") {
    turn(body, true, std::move(respond));
  } else if (r.target == "/v1/episodes/end") {
    end(body, std::move(respond));
  } else {
    respond(http_error(404, "no route " + r.target +
                                " (/v1/episodes, /v1/completions, /v1/chat/completions, "
                                "/v1/episodes/end)"));
  }
}

void AgentEnvironment::start_episode(JsonHttpServer::Respond respond) {
  std::optional<SequenceState> s = hooks_.claim();
  if (!s) {
    respond(http_error(503,
                       "no episode to start now: the manager has not given this rollout "
                       "work (ask again shortly)"));
    return;
  }
  respond(HttpAnswer{200, json{{"session", s->trajectory_id},
                               {"prompt_tokens", s->prompt_tokens},
                               {"prompt", rl::Tokenizer::decode(s->prompt_tokens)}}});
}

void AgentEnvironment::answer(const SequenceState& s, Done done) {
  Session& session = sessions_[s.trajectory_id];
  if (session.reply) {
    // The turn the agent asked for is over: its tokens go back.
    const auto from = static_cast<std::ptrdiff_t>(session.turn_start);
    std::vector<std::int32_t> tokens(s.generated.begin() + from, s.generated.end());
    std::vector<float> logprobs(s.logprobs.begin() + from, s.logprobs.end());
    const bool eos = !tokens.empty() && tokens.back() == rl::Tokenizer::kEos;
    const std::uint64_t version = s.token_versions.empty() ? 0 : s.token_versions.back();
    const std::string finish = eos ? "stop" : "length";
    json out;
    if (session.chat) {
      out = json{
          {"object", "chat.completion"},
          {"id", s.trajectory_id},
          {"choices",
           json::array(
               {{{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", rl::Tokenizer::decode(tokens)}}},
                 {"finish_reason", finish}}})}};
    } else {
      out = json{{"object", "text_completion"},
                 {"id", s.trajectory_id},
                 {"choices", json::array({{{"index", 0},
                                           {"tokens", tokens},
                                           {"logprobs", logprobs},
                                           {"text", rl::Tokenizer::decode(tokens)},
                                           {"finish_reason", finish}}})}};
    }
    out["version"] = version;
    (*session.reply)(HttpAnswer{200, std::move(out)});
    session.reply.reset();
  }
  session.prompt_size = s.prompt_tokens.size();
  session.context = s.prompt_tokens;
  session.context.insert(session.context.end(), s.generated.begin(), s.generated.end());
  session.next = std::move(done);
}

void AgentEnvironment::cancel(const std::string& trajectory_id) {
  auto it = sessions_.find(trajectory_id);
  if (it == sessions_.end()) return;
  if (it->second.reply) {
    (*it->second.reply)(http_error(409, "the episode " + trajectory_id + " ended"));
  }
  sessions_.erase(it);
  remember_ended(trajectory_id);
}

bool AgentEnvironment::unknown(const std::string& id, const JsonHttpServer::Respond& respond) {
  if (!id.empty() && sessions_.count(id) > 0) return false;
  if (std::find(ended_.begin(), ended_.end(), id) != ended_.end()) {
    respond(http_error(409, "session " + id + " has ended"));
  } else {
    respond(http_error(404, "no session '" + id + "' here: start one with POST /v1/episodes"));
  }
  return true;
}

void AgentEnvironment::remember_ended(const std::string& id) {
  ended_.push_back(id);
  if (ended_.size() > kRememberEnded) ended_.pop_front();
}

void AgentEnvironment::turn(const json& body, bool chat, JsonHttpServer::Respond respond) {
  const std::string id = body.value("session", std::string());
  if (unknown(id, respond)) return;
  auto it = sessions_.find(id);
  Session& session = it->second;
  if (!session.next) {
    respond(http_error(409, "session " + id + " is generating a turn already"));
    return;
  }
  std::optional<std::vector<std::int32_t>> context;
  if (chat) {
    const json messages = body.value("messages", json());
    if (!messages.is_array() || messages.empty()) {
      respond(http_error(400, "'messages' must be a non-empty array of {role, content}"));
      return;
    }
    std::string text;
    for (const auto& m : messages) {
      if (!m.is_object() || !m.contains("content") || !m["content"].is_string()) {
        respond(http_error(400, "each message needs a string 'content'"));
        return;
      }
      text += m["content"].get<std::string>();
    }
    auto encoded = rl::Tokenizer::encode(text);
    if (!encoded.is_ok()) {
      respond(http_error(400, encoded.status().message()));
      return;
    }
    context = std::vector<std::int32_t>{rl::Tokenizer::kBos};
    context->insert(context->end(), encoded->begin(), encoded->end());
  } else {
    context = ids_of(body.value("prompt", json()), hooks_.vocab);
    if (!context) {
      respond(http_error(
          400, fmt::format("'prompt' must be an array of token ids in [0, {})", hooks_.vocab)));
      return;
    }
  }
  const json max_j = body.value("max_tokens", json(kMaxTokensDefault));
  if (!max_j.is_number_unsigned() || max_j.get<std::uint64_t>() == 0) {
    respond(http_error(400, "'max_tokens' must be a positive integer"));
    return;
  }
  const std::uint64_t max_tokens = max_j.get<std::uint64_t>();
  // Nothing is re-tokenized: the context begins with the episode's tokens exactly.
  const std::vector<std::int32_t>& had = session.context;
  if (context->size() < had.size() || !std::equal(had.begin(), had.end(), context->begin())) {
    std::size_t at = 0;
    while (at < had.size() && at < context->size() && had[at] == (*context)[at])
      ++at;
    respond(http_error(409, fmt::format("the context differs from session {}'s tokens at position "
                                        "{} (it must begin with the {} tokens of the episode so "
                                        "far, as they were sampled and returned)",
                                        id, at, had.size())));
    return;
  }
  if (context->size() + 1 > hooks_.max_context) {
    respond(http_error(400, fmt::format("the context holds {} tokens; the model takes at most {}",
                                        context->size(), hooks_.max_context)));
    return;
  }
  EnvAnswer a;
  a.tokens.assign(context->begin() + static_cast<std::ptrdiff_t>(had.size()), context->end());
  // The turn ends at EOS, after max_tokens, or where the context ends.
  const std::uint64_t generated = context->size() - session.prompt_size;
  a.turn_limit = std::min(generated + max_tokens, hooks_.max_context - session.prompt_size);
  session.turn_start = generated;
  session.chat = chat;
  session.reply = std::move(respond);
  Done next = std::move(*session.next);
  session.next.reset();
  next(std::move(a));
}

void AgentEnvironment::end(const json& body, JsonHttpServer::Respond respond) {
  const std::string id = body.value("session", std::string());
  if (unknown(id, respond)) return;
  auto it = sessions_.find(id);
  if (!it->second.next) {
    respond(http_error(409, "session " + id + " is generating a turn; end it after the answer"));
    return;
  }
  const json r = body.value("reward", json());
  if (!r.is_number() || !std::isfinite(r.get<double>())) {
    respond(http_error(400, "'reward' must be a finite number"));
    return;
  }
  EnvAnswer a;
  a.done = true;
  a.reward = r.get<double>();
  Done next = std::move(*it->second.next);
  sessions_.erase(it);
  remember_ended(id);
  next(std::move(a));
  respond(HttpAnswer{200, json{{"session", id}, {"ended", true}}});
}

}  // namespace sluice::rollout
