// A role's metrics over HTTP for Prometheus: GET /metrics answers the registry's text exposition
// (format 0.0.4); anything else gets 404 (another path) or 405 (another method). Requests are
// parsed with Boost.Beast; the sockets are plain non-blocking ones watched by the event loop, so
// a scrape never blocks the role's work for longer than formatting the text.
//
// Bounds: a request header of at most 8 KiB, at most 16 connections at once (more are closed at
// accept), a connection idle for 5 s is closed, and one response per connection.
//
// Thread safety: loop thread only; create, use and destroy on the loop thread. The registry may
// be updated from any thread meanwhile (see metrics.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/metrics.hpp"
#include "core/status.hpp"

namespace sluice::core {

// A listening TCP socket (non-blocking) on `listen` ("HOST:PORT", port 0: a free one), and the
// address it bound as "HOST:PORT". Errors: invalid_argument for a malformed address, unavailable
// when it cannot bind. The caller owns the descriptor.
Result<int> listen_tcp(const std::string& listen, std::string* host_port);

// Sends a whole HTTP answer on a non-blocking socket, waiting at most a second while its send
// buffer is full (the rest is then dropped), and shuts the socket's sending side.
void send_answer(int fd, const std::string& answer);

class MetricsEndpoint {
 public:
  // Listens on `listen` ("HOST:PORT"; port 0 picks a free one; HOST an IPv4 address, loopback
  // unless the operator says otherwise). Errors: invalid_argument for a malformed address,
  // unavailable when it cannot bind.
  static Result<std::unique_ptr<MetricsEndpoint>> create(EventLoop& loop, const std::string& listen,
                                                         const MetricsRegistry& registry);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // "http://HOST:PORT/metrics" with the bound port.
  const std::string& url() const;
  std::uint64_t requests_served() const;

  struct Impl;

 private:
  explicit MetricsEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
