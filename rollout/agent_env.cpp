#include "rollout/agent_env.hpp"

#include <sys/stat.h>

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/json_limits.hpp"
#include "core/metrics.hpp"
#include "rl/tokenizer.hpp"
#include "rollout/agent_request.hpp"

namespace sluice::rollout {

using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

constexpr std::size_t kRememberEnded = 4096;
constexpr std::size_t kMinTokenChars = 16;
// A request body nests at most this deep (messages[i].content is 3 levels).
constexpr std::size_t kMaxBodyDepth = 8;

// Compares in constant time, so a wrong token's length of match is not timed.
bool same_token(const std::string& a, const std::string& b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

// a + b, or the largest value where that overflows (an agent's max_tokens may be near 2^64).
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<std::uint64_t>::max() : sum;
}

// The endpoint's episodes on the process's /metrics.
struct AgentMetrics {
  core::Gauge& sessions =
      core::process_metrics().gauge("sluice_rollout_agent_sessions", "agent episodes open now");
  core::Counter& refused = core::process_metrics().counter(
      "sluice_rollout_agent_sessions_refused_total",
      "agent episodes refused because max_sessions were open (429)");
  core::Counter& finished_here = core::process_metrics().counter(
      "sluice_rollout_agent_turns_ended_by_limit_total",
      "agent turns whose episode reached max_new_tokens or the context (answered, ended)");
  core::Counter& gone = core::process_metrics().counter(
      "sluice_rollout_agent_turns_ended_by_rollout_total",
      "agent turns whose episode the rollout abandoned, moved or handed back (answered 409)");
  core::Counter& expired = core::process_metrics().counter(
      "sluice_rollout_agent_sessions_expired_total",
      "agent sessions forgotten after their request passed answer_timeout_ms");
};

AgentMetrics& metrics() {
  static AgentMetrics m;
  return m;
}

}  // namespace

core::Result<std::string> read_agent_token(const std::string& path) {
  if (path.empty()) {
    return core::invalid_argument(
        "agent endpoint: rollout.agent_token_file is not set (sluice run sets it; else name a "
        "file holding the token, mode 0600)");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return core::invalid_argument(fmt::format("agent endpoint: cannot read the token file {}: {}",
                                              path, std::strerror(errno)));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return core::invalid_argument(fmt::format(
        "agent endpoint: the token file {} may be read by others (mode {:o}): chmod 600 it", path,
        st.st_mode & 0777));
  }
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  if (!f && !f.eof()) {
    return core::invalid_argument(
        fmt::format("agent endpoint: cannot read the token file {}", path));
  }
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!line.empty() && space(static_cast<unsigned char>(line.back())))
    line.pop_back();
  const auto first = std::find_if_not(line.begin(), line.end(), space);
  line.erase(line.begin(), first);
  if (line.size() < kMinTokenChars) {
    return core::invalid_argument(fmt::format(
        "agent endpoint: the token in {} must be at least {} characters", path, kMinTokenChars));
  }
  return line;
}

core::Result<std::unique_ptr<AgentEnvironment>> AgentEnvironment::create(
    core::EventLoop& loop, const std::string& listen, std::string token,
    const AgentEndpointConfig& config, AgentHooks hooks) {
  if (token.size() < kMinTokenChars) {
    return core::invalid_argument("agent endpoint: the job's token must be at least 16 characters");
  }
  SLUICE_TRY(config.validate().with_context("rollout.agent"));
  std::unique_ptr<AgentEnvironment> env(
      new AgentEnvironment(std::move(token), config, std::move(hooks)));
  AgentEnvironment* raw = env.get();
  SLUICE_ASSIGN_OR_RETURN(env->server_,
                          JsonHttpServer::create(
                              loop, listen, config,
                              [raw](const HttpRequest& r, JsonHttpServer::Respond respond) {
                                raw->handle(r, std::move(respond));
                              },
                              [raw](const HttpRequest& r) { return raw->admit(r); }));
  env->sweeper_ = loop.every(Millis(config.sweep_ms), [raw] { raw->sweep(); });
  return env;
}

AgentEnvironment::~AgentEnvironment() {
  sweeper_.reset();
  server_.reset();
  metrics().sessions.set(0);
}

std::int32_t AgentEnvironment::call_token() const {
  return rl::Tokenizer::kEos;
}

std::optional<HttpAnswer> AgentEnvironment::admit(const HttpRequest& r) const {
  if (same_token(r.authorization, "Bearer " + token_)) return std::nullopt;
  return http_error(401,
                    "missing or wrong token: send 'Authorization: Bearer TOKEN' with the job's "
                    "agent token");
}

void AgentEnvironment::handle(const HttpRequest& r, JsonHttpServer::Respond respond) {
  // The server judged the header already; a second look costs nothing.
  if (std::optional<HttpAnswer> refusal = admit(r)) {
    respond(std::move(*refusal));
    return;
  }
  if (r.method != "POST") {
    respond(http_error(405, "only POST"));
    return;
  }
  if (r.target == "/v1/episodes") {
    start_episode(std::move(respond));
    return;
  }
  auto body = core::parse_json_bounded(r.body, {config_.max_body_bytes, kMaxBodyDepth});
  if (!body.is_ok() || !body->is_object()) {
    respond(http_error(400, "the body is not a JSON object" +
                                (body.is_ok() ? std::string() : ": " + body.status().message())));
    return;
  }
  if (r.target == "/v1/completions") {
    turn(*body, false, std::move(respond));
  } else if (r.target == "/v1/chat/completions") {
    turn(*body, true, std::move(respond));
  } else if (r.target == "/v1/episodes/end") {
    end(*body, std::move(respond));
  } else {
    respond(http_error(404, "no route " + r.target +
                                " (/v1/episodes, /v1/completions, /v1/chat/completions, "
                                "/v1/episodes/end)"));
  }
}

void AgentEnvironment::start_episode(JsonHttpServer::Respond respond) {
  if (sessions_.size() >= config_.max_sessions) {
    metrics().refused.inc();
    respond(http_error(429, fmt::format("{} episodes are open here, the most "
                                        "rollout.agent.max_sessions allows: end one first",
                                        sessions_.size())));
    return;
  }
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

json AgentEnvironment::turn_answer(const SequenceState& s, const Session& session) const {
  // A turn cut short (the episode ended before any of it) has no tokens.
  const std::size_t from = std::min<std::uint64_t>(session.turn_start, s.generated.size());
  const auto at = static_cast<std::ptrdiff_t>(from);
  std::vector<std::int32_t> tokens(s.generated.begin() + at, s.generated.end());
  std::vector<float> logprobs;
  if (s.logprobs.size() >= from) logprobs.assign(s.logprobs.begin() + at, s.logprobs.end());
  const bool eos = !tokens.empty() && tokens.back() == rl::Tokenizer::kEos;
  const std::uint64_t version = s.token_versions.empty() ? 0 : s.token_versions.back();
  const std::string finish = eos || s.stop.hit ? "stop" : "length";
  json out;
  if (session.chat) {
    out = json{{"object", "chat.completion"},
               {"id", s.trajectory_id},
               {"choices",
                json::array({{{"index", 0},
                              {"message",
                               {{"role", "assistant"}, {"content", rl::Tokenizer::decode(tokens)}}},
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
  return out;
}

void AgentEnvironment::answer(const SequenceState& s, Done done) {
  Session& session = sessions_[s.trajectory_id];
  session.max_new_tokens = s.max_new_tokens;
  if (session.reply) {
    // The turn the agent asked for is over: its tokens go back.
    (*session.reply)(HttpAnswer{200, turn_answer(s, session)});
    session.reply.reset();
  }
  session.prompt_size = s.prompt_tokens.size();
  session.context = s.prompt_tokens;
  session.context.insert(session.context.end(), s.generated.begin(), s.generated.end());
  session.next = std::move(done);
  metrics().sessions.set(static_cast<double>(sessions_.size()));
}

void AgentEnvironment::cancel(const std::string& trajectory_id) {
  auto it = sessions_.find(trajectory_id);
  if (it == sessions_.end()) return;
  if (it->second.reply) {
    (*it->second.reply)(http_error(409, "the episode " + trajectory_id + " ended"));
  }
  forget(it);
}

void AgentEnvironment::ended(const SequenceState& s, bool finished, const std::string& why) {
  auto it = sessions_.find(s.trajectory_id);
  if (it == sessions_.end()) return;
  Session& session = it->second;
  if (session.reply) {
    if (finished) {
      metrics().finished_here.inc();
      json out = turn_answer(s, session);
      out["episode_ended"] = true;
      (*session.reply)(HttpAnswer{200, std::move(out)});
    } else {
      metrics().gone.inc();
      (*session.reply)(http_error(409, fmt::format("the episode {} ended here before its turn "
                                                   "did: {}",
                                                   s.trajectory_id, why)));
    }
    session.reply.reset();
  }
  forget(it);
}

void AgentEnvironment::forget(std::map<std::string, Session>::iterator it) {
  ended_.push_back(it->first);
  if (ended_.size() > kRememberEnded) ended_.pop_front();
  sessions_.erase(it);
  metrics().sessions.set(static_cast<double>(sessions_.size()));
}

void AgentEnvironment::sweep() {
  const auto now = Clock::now();
  const Millis limit(config_.answer_timeout_ms);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    const Session& s = it->second;
    // Its request got 504 from the server; a turn that still ends makes the session anew.
    if (s.reply && !s.next && now - s.asked > limit) {
      metrics().expired.inc();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  metrics().sessions.set(static_cast<double>(sessions_.size()));
}

bool AgentEnvironment::unknown(const std::string& id, const JsonHttpServer::Respond& respond) {
  if (sessions_.count(id) > 0) return false;
  if (std::find(ended_.begin(), ended_.end(), id) != ended_.end()) {
    respond(http_error(409, "session " + id + " has ended"));
  } else {
    respond(http_error(404, "no session '" + id + "' here: start one with POST /v1/episodes"));
  }
  return true;
}

void AgentEnvironment::turn(const json& body, bool chat, JsonHttpServer::Respond respond) {
  core::Result<TurnRequest> req = parse_turn_request(body, chat, hooks_.vocab);
  if (!req.is_ok()) {
    respond(http_error(400, req.status().message()));
    return;
  }
  const std::string& id = req->session;
  if (unknown(id, respond)) return;
  Session& session = sessions_.find(id)->second;
  if (!session.next) {
    respond(http_error(409, "session " + id + " is generating a turn already"));
    return;
  }
  const std::vector<std::int32_t>& context = req->context;
  // Nothing is re-tokenized: the context begins with the episode's tokens exactly.
  const std::vector<std::int32_t>& had = session.context;
  if (context.size() < had.size() || !std::equal(had.begin(), had.end(), context.begin())) {
    std::size_t at = 0;
    while (at < had.size() && at < context.size() && had[at] == context[at])
      ++at;
    respond(http_error(409, fmt::format("the context differs from session {}'s tokens at position "
                                        "{} (it must begin with the {} tokens of the episode so "
                                        "far, as they were sampled and returned)",
                                        id, at, had.size())));
    return;
  }
  if (context.size() + 1 > hooks_.max_context) {
    respond(http_error(400, fmt::format("the context holds {} tokens; the model takes at most {}",
                                        context.size(), hooks_.max_context)));
    return;
  }
  // The context holds the prompt (it begins with the episode's tokens), so this cannot wrap.
  const std::uint64_t generated = context.size() - session.prompt_size;
  if (generated >= session.max_new_tokens) {
    respond(http_error(400, fmt::format("session {} holds {} generated tokens, its episode's limit "
                                        "(max_new_tokens {}): end it with POST /v1/episodes/end",
                                        id, generated, session.max_new_tokens)));
    return;
  }
  EnvAnswer a;
  a.tokens.assign(context.begin() + static_cast<std::ptrdiff_t>(had.size()), context.end());
  // The turn ends at EOS, at a stop sequence, after max_tokens, where the context ends, or at the
  // episode's max_new_tokens: a turn that reaches a limit is answered like any other ("length"),
  // and the agent, not the rollout, ends the episode.
  a.turn_limit = std::min({saturating_add(generated, req->max_tokens),
                           hooks_.max_context - session.prompt_size, session.max_new_tokens});
  a.stop.sequences = std::move(req->stop);
  a.stop.from = generated;
  session.turn_start = generated;
  session.chat = chat;
  session.asked = Clock::now();
  session.reply = std::move(respond);
  Done next = std::move(*session.next);
  session.next.reset();
  next(std::move(a));
}

void AgentEnvironment::end(const json& body, JsonHttpServer::Respond respond) {
  core::Result<EndRequest> req = parse_end_request(body);
  if (!req.is_ok()) {
    respond(http_error(400, req.status().message()));
    return;
  }
  const std::string& id = req->session;
  if (unknown(id, respond)) return;
  auto it = sessions_.find(id);
  if (!it->second.next) {
    respond(http_error(409, "session " + id + " is generating a turn; end it after the answer"));
    return;
  }
  EnvAnswer a;
  a.done = true;
  a.reward = req->reward;
  Done next = std::move(*it->second.next);
  forget(it);
  next(std::move(a));
  respond(HttpAnswer{200, json{{"session", id}, {"ended", true}}});
}

}  // namespace sluice::rollout
