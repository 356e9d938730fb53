// The agent endpoint's bounds (rollout/agent_env.hpp, rollout/agent_http.hpp): the job file's
// rollout.agent section. Every wait the endpoint makes has a deadline here and every table it
// keeps a bound, so that neither a slow client nor a flood of idle connections holds it.
//
// Thread safety: plain data.
#pragma once

#include <cstdint>

#include "core/status.hpp"

namespace sluice::rollout {

struct AgentEndpointConfig {
  // A request's body at most this many bytes (413 past it).
  std::uint64_t max_body_bytes = 1 << 20;
  // A request answered before its body was read (413, 401) has the rest of its body read and
  // dropped, up to this many bytes, so that its client reads the answer instead of a reset.
  std::uint64_t drain_bytes = 8 << 20;
  // Connections open at once; past it a new one closes the oldest still sending its request, else
  // is closed itself.
  std::uint32_t max_connections = 128;
  // Connections still sending their request (none of them authenticated yet) at once; past it a
  // new one closes the oldest of them. <= max_connections.
  std::uint32_t max_idle_connections = 32;
  // A connection's header must arrive whole within header_timeout_ms of its accept, and its whole
  // request within request_timeout_ms; else it is closed.
  std::uint64_t header_timeout_ms = 2000;
  std::uint64_t request_timeout_ms = 10000;
  // A request being answered (a turn being generated) is answered within this, else 504.
  std::uint64_t answer_timeout_ms = 300000;
  // Episodes an agent holds open at once here; POST /v1/episodes answers 429 past it.
  std::uint32_t max_sessions = 1024;
  // How often the endpoint checks that each open episode is still held by the rollout, answering
  // the request of one that left it by a path that did not say so.
  std::uint64_t sweep_ms = 1000;

  template <typename V>
  void describe(V& v) {
    v("max_body_bytes", max_body_bytes, "a request body's bound in bytes (413 past it; 1 MiB)");
    v("drain_bytes", drain_bytes,
      "after an early answer (413, 401), at most this much of the request is read and dropped so "
      "the client can read the answer (8 MiB)");
    v("max_connections", max_connections, "connections open at once (default 128)");
    v("max_idle_connections", max_idle_connections,
      "connections still sending their request at once; past it the oldest is closed (default "
      "32, at most max_connections)");
    v("header_timeout_ms", header_timeout_ms,
      "a request's header must arrive within this of the connection (ms, default 2000)");
    v("request_timeout_ms", request_timeout_ms,
      "a whole request must arrive within this of the connection (ms, default 10000)");
    v("answer_timeout_ms", answer_timeout_ms,
      "a request being answered gets 504 past this (ms, default 300000)");
    v("max_sessions", max_sessions, "episodes open at once (default 1024; 429 past it)");
    v("sweep_ms", sweep_ms,
      "how often open episodes are checked against the rollout's work (ms, default 1000)");
  }
  core::Status validate() const;
};

}  // namespace sluice::rollout
