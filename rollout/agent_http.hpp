// The HTTP side of a rollout's agent endpoint (rollout/agent_env.hpp): HTTP/1.1 requests with
// JSON bodies, parsed with Boost.Beast on sockets the event loop watches, whose answers may come
// later (a completion is answered when the model's turn ends). One request per connection.
//
// Bounds (AgentEndpointConfig, rollout/agent_config.hpp): a header of at most 8 KiB and a body
// of at most max_body_bytes (413); at most max_connections open, of which at most
// max_idle_connections still sending their request (a newcomer past either closes the oldest such
// one: an idle crowd cannot lock agents out); a header whole within header_timeout_ms and a
// request within request_timeout_ms of the accept, else the connection closes; a request handed
// to the handler answered within answer_timeout_ms, else 504. A request refused from its header
// (401 by `admit`, 413) has the rest of its body read and dropped (up to drain_bytes) after the
// answer, so its client reads the answer rather than a reset.
//
// A handler that throws is answered 500 and counted; the server goes on.
//
// Counted on the process's /metrics: connections open, refused and evicted; time-outs by stage;
// answers by status; handler failures.
//
// Thread safety: loop thread only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rollout/agent_config.hpp"

namespace sluice::rollout {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // "/v1/completions"
  std::string authorization;  // the Authorization header, as sent
  std::string body;           // empty when given to `admit`
};

struct HttpAnswer {
  unsigned status = 200;
  nlohmann::json body = nlohmann::json::object();
};

// An error answer in the OpenAI style: {"error": {"message": ..., "type": ...}}.
HttpAnswer http_error(unsigned status, const std::string& message);

class JsonHttpServer {
 public:
  using Respond = std::function<void(HttpAnswer)>;  // call once; later calls do nothing
  using Handler = std::function<void(const HttpRequest&, Respond)>;
  // Judges a request from its header alone (no body yet): an answer refuses it at once.
  using Admit = std::function<std::optional<HttpAnswer>(const HttpRequest&)>;
  // `limits` must have passed validate(). `admit` may be empty (every header passes).
  static core::Result<std::unique_ptr<JsonHttpServer>> create(core::EventLoop& loop,
                                                              const std::string& listen,
                                                              const AgentEndpointConfig& limits,
                                                              Handler handler, Admit admit = {});
  ~JsonHttpServer();
  JsonHttpServer(const JsonHttpServer&) = delete;
  JsonHttpServer& operator=(const JsonHttpServer&) = delete;
  // "http://HOST:PORT" with the bound port.
  const std::string& url() const;
  // Connections open now.
  std::size_t connections() const;
  struct Impl;

 private:
  explicit JsonHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::rollout
