// The HTTP side of a rollout's agent endpoint (rollout/agent_env.hpp): HTTP/1.1 requests with
// JSON bodies, parsed with Boost.Beast on sockets the event loop watches, whose answers may come
// later (a completion is answered when the model's turn ends). One request per connection.
//
// Bounds: a header of at most 8 KiB and a body of at most `max_body` bytes (413 past it), at most
// 64 connections at once (more are closed at accept), and a connection whose request has not
// arrived whole within 10 s is closed. A request being answered is not timed out here: its
// handler answers it or the connection goes when the server does.
//
// Thread safety: loop thread only.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::rollout {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // "/v1/completions"
  std::string authorization;  // the Authorization header, as sent
  std::string body;
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
  static core::Result<std::unique_ptr<JsonHttpServer>> create(core::EventLoop& loop,
                                                              const std::string& listen,
                                                              std::size_t max_body,
                                                              Handler handler);
  ~JsonHttpServer();
  JsonHttpServer(const JsonHttpServer&) = delete;
  JsonHttpServer& operator=(const JsonHttpServer&) = delete;
  // "http://HOST:PORT" with the bound port.
  const std::string& url() const;
  struct Impl;

 private:
  explicit JsonHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::rollout
