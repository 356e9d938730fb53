// The agent endpoint: an environment driven over HTTP by an agent written in any language. The
// agent takes an episode, asks for the model's turns, and says how the episode ended; the rollout
// generates each turn with its engine under continuous batching, and records every token, log-prob
// and version into the episode, which reaches the actor as any trajectory does.
//
// Routes (JSON bodies; every request carries "Authorization: Bearer TOKEN", the job's token):
//   POST /v1/episodes            -> {"session", "prompt_tokens", "prompt"}: the next prompt the
//                                   manager gave this rollout (503 when it has none now)
//   POST /v1/completions         {"session", "prompt": [ids], "max_tokens"} -> the turn's ids,
//                                   log-probs, version, and "finish_reason" ("stop": EOS, or
//                                   "length"); `prompt` is the whole context so far: the episode's
//                                   tokens, then any tokens the agent adds (its environment's,
//                                   never trained on)
//   POST /v1/chat/completions    {"session", "messages": [{"role", "content"}], "max_tokens"}:
//                                   the same with text in the built-in tokenizer's characters, the
//                                   contents joined in order, the answer in choices[0].message
//   POST /v1/episodes/end        {"session", "reward"}: the episode is over; it goes to the actor
//
// Nothing is re-tokenized: a context that does not begin with the episode's tokens exactly is
// refused (409, naming the first position that differs). A session that is unknown or over is
// 404 or 409; a context beyond the model's is 400; a request without the token is 401; a body
// over 1 MiB is 413. An agent silent for rollout.env_timeout_ms ends its episode (abandoned,
// counted).
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

class AgentEnvironment final : public Environment {
 public:
  static core::Result<std::unique_ptr<AgentEnvironment>> create(core::EventLoop& loop,
                                                                const std::string& listen,
                                                                std::string token,
                                                                AgentHooks hooks);
  ~AgentEnvironment() override;
  const std::string& url() const { return server_->url(); }

  // Environment: a turn ends at EOS or at the agent's max_tokens; answer() replies to the
  // agent's request, and `done` runs when the agent asks for the next turn or ends the episode.
  std::int32_t call_token() const override;
  void answer(const SequenceState& s, Done done) override;
  void cancel(const std::string& trajectory_id) override;
  std::size_t pending() const override { return sessions_.size(); }
  bool claims_work() const override { return true; }

 private:
  struct Session {
    std::vector<std::int32_t> context;  // prompt + generated, as the rollout last handed it over
    std::uint64_t prompt_size = 0;
    std::uint64_t turn_start = 0;                  // generated tokens when the turn began
    std::optional<JsonHttpServer::Respond> reply;  // the request waiting for the turn
    bool chat = false;
    std::optional<Done> next;  // the rollout waits for the agent's next request
  };
  AgentEnvironment(std::string token, AgentHooks hooks)
      : token_(std::move(token)), hooks_(std::move(hooks)) {}
  void handle(const HttpRequest& r, JsonHttpServer::Respond respond);
  void start_episode(JsonHttpServer::Respond respond);
  void turn(const nlohmann::json& body, bool chat, JsonHttpServer::Respond respond);
  void end(const nlohmann::json& body, JsonHttpServer::Respond respond);
  // Answers 404 (never known) or 409 (ended) for a session not open here, and says whether it did.
  bool unknown(const std::string& id, const JsonHttpServer::Respond& respond);
  void remember_ended(const std::string& id);

  std::string token_;
  AgentHooks hooks_;
  std::map<std::string, Session> sessions_;
  // Sessions that ended lately (at most kRememberEnded), so a late request is told so.
  std::deque<std::string> ended_;
  std::unique_ptr<JsonHttpServer> server_;
};

}  // namespace sluice::rollout
