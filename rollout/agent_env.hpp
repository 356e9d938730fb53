// The agent endpoint: an environment driven over HTTP by an agent written in any language. The
// agent takes an episode, asks for the model's turns, and says how the episode ended; the rollout
// generates each turn with its engine under continuous batching, and records every token, log-prob
// and version into the episode, which reaches the actor as any trajectory does.
//
// Routes (JSON bodies; every request carries "Authorization: Bearer TOKEN", the job's token):
//   POST /v1/episodes            -> {"session", "prompt_tokens", "prompt"}: the next prompt the
//                                   manager gave this rollout (503 when it has none now, 429 when
//                                   max_sessions episodes are open here)
//   POST /v1/completions         {"session", "prompt": [ids], "max_tokens", "stop"} -> the turn's
//                                   ids, log-probs, version, and "finish_reason" ("stop": EOS or
//                                   a stop sequence, or "length"); `prompt` is the whole context
//                                   so far: the episode's tokens, then any tokens the agent adds
//                                   (its environment's, never trained on)
//   POST /v1/chat/completions    {"session", "messages": [{"role", "content"}], "max_tokens",
//                                   "stop"}: the same with text in the built-in tokenizer's
//                                   characters, the contents joined in order, the answer in
//                                   choices[0].message
//   POST /v1/episodes/end        {"session", "reward"}: the episode is over; it goes to the actor
//
// Fields are checked as rollout/agent_request.hpp says (a wrong type, a null, a bad number: 400).
// `stop` (a string or up to four): the turn ends where its text ends with one, and that text is
// left out of the answer and out of the episode (it is not trained on, and the next context does
// not hold it).
//
// Nothing is re-tokenized: a context that does not begin with the episode's tokens exactly is
// refused (409, naming the first position that differs). A session that is unknown or over is
// 404 or 409; a context beyond the model's, or an episode with no room left (max_new_tokens), is
// 400; a request without the token is 401 (judged from the header, before the body is read); a
// body over rollout.agent.max_body_bytes is 413. An agent silent for rollout.env_timeout_ms ends
// its episode (abandoned, counted).
//
// Every request is answered: a turn whose episode ends on the rollout's side (its max_new_tokens
// or the model's context reached: 200 with "episode_ended": true; abandoned, moved to another
// rollout or handed back: 409) is answered then (ended()); one not answered within
// answer_timeout_ms gets 504, and its session is forgotten (a later turn end makes it anew).
//
// Thread safety: loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "rollout/agent_config.hpp"
#include "rollout/agent_http.hpp"
#include "rollout/environment.hpp"

namespace sluice::rollout {

// What the worker lends the endpoint: its unstarted work, and the model's context.
struct AgentHooks {
  // Takes the next unstarted sequence, which from then on waits on this environment (answer() is
  // called for it at once); nullopt: none now.
  std::function<std::optional<SequenceState>()> claim;
  std::uint64_t max_context = 0;  // prompt + generated tokens at most
  std::int32_t vocab = 0;         // token ids lie in [0, vocab)
};

// The job's agent token from its file (`path`): the first line, surrounding whitespace removed.
// Errors: no path, the file cannot be read, its mode lets group or others read it, or the token
// is shorter than 16 characters.
core::Result<std::string> read_agent_token(const std::string& path);

class AgentEnvironment final : public Environment {
 public:
  // `config` must pass validate(); `token` at least 16 characters.
  static core::Result<std::unique_ptr<AgentEnvironment>> create(core::EventLoop& loop,
                                                                const std::string& listen,
                                                                std::string token,
                                                                const AgentEndpointConfig& config,
                                                                AgentHooks hooks);
  ~AgentEnvironment() override;
  const std::string& url() const { return server_->url(); }

  // Environment: a turn ends at EOS, a stop sequence or the agent's max_tokens; answer() replies
  // to the agent's request, and `done` runs when the agent asks for the next turn or ends the
  // episode.
  std::int32_t call_token() const override;
  void answer(const SequenceState& s, Done done) override;
  void cancel(const std::string& trajectory_id) override;
  void ended(const SequenceState& s, bool finished, const std::string& why) override;
  std::size_t pending() const override { return sessions_.size(); }
  bool claims_work() const override { return true; }

  // Episodes open here (for tests and the gauge).
  std::size_t sessions() const { return sessions_.size(); }

 private:
  struct Session {
    std::vector<std::int32_t> context;  // prompt + generated, as the rollout last handed it over
    std::uint64_t prompt_size = 0;
    std::uint64_t max_new_tokens = 0;              // the episode's bound on generated tokens
    std::uint64_t turn_start = 0;                  // generated tokens when the turn began
    core::Clock::time_point asked;                 // when the turn was asked for
    std::optional<JsonHttpServer::Respond> reply;  // the request waiting for the turn
    bool chat = false;
    std::optional<Done> next;  // the rollout waits for the agent's next request
  };
  AgentEnvironment(std::string token, const AgentEndpointConfig& config, AgentHooks hooks)
      : token_(std::move(token)), config_(config), hooks_(std::move(hooks)) {}
  std::optional<HttpAnswer> admit(const HttpRequest& r) const;
  void handle(const HttpRequest& r, JsonHttpServer::Respond respond);
  void start_episode(JsonHttpServer::Respond respond);
  void turn(const nlohmann::json& body, bool chat, JsonHttpServer::Respond respond);
  void end(const nlohmann::json& body, JsonHttpServer::Respond respond);
  // The answer to the turn of `session` that ended with `s`.
  nlohmann::json turn_answer(const SequenceState& s, const Session& session) const;
  // Answers 404 (never known) or 409 (ended) for a session not open here, and says whether it did.
  bool unknown(const std::string& id, const JsonHttpServer::Respond& respond);
  void forget(std::map<std::string, Session>::iterator it);
  // Forgets sessions whose request got 504 (its turn outlived answer_timeout_ms).
  void sweep();

  std::string token_;
  AgentEndpointConfig config_;
  AgentHooks hooks_;
  std::map<std::string, Session> sessions_;
  // Sessions that ended lately (at most kRememberEnded), so a late request is told so.
  std::deque<std::string> ended_;
  std::unique_ptr<JsonHttpServer> server_;
  std::unique_ptr<core::EventLoop::Timer> sweeper_;
};

}  // namespace sluice::rollout
