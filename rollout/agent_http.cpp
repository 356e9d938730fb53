#include "rollout/agent_http.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>

#include "core/log.hpp"
#include "core/metrics.hpp"
#include "wire/http_read.hpp"
#include "wire/metrics_http.hpp"

namespace sluice::rollout {

namespace http = boost::beast::http;
namespace log = core::log;
using core::Millis;

namespace {

constexpr std::size_t kHeaderLimit = 8 * 1024;
// Newcomers answered 503 at once (every slot holding a request being answered), still held while
// the rest of their request is read and dropped; past this many, a newcomer is closed unanswered.
constexpr std::size_t kMaxRefusing = 16;

std::string reason_type(unsigned status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// Reads and drops what the socket holds now, adding the bytes to `*dropped`. True when the peer
// closed its side (or the connection failed): nothing more will come.
bool drain_socket(int fd, std::uint64_t* dropped) {
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      *dropped += static_cast<std::uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

// The endpoint's figures on the process's /metrics.
struct HttpMetrics {
  core::Gauge& open = core::process_metrics().gauge("sluice_rollout_agent_connections",
                                                    "agent endpoint connections open now");
  core::Counter& refused = core::process_metrics().counter(
      "sluice_rollout_agent_connections_refused_total",
      "agent endpoint connections refused at accept (503, or closed when many are refused at "
      "once): every slot held by a request being answered");
  core::Counter& evicted = core::process_metrics().counter(
      "sluice_rollout_agent_connections_evicted_total",
      "agent endpoint connections still sending their request, closed for a newer one");
  core::Counter& handler_failed = core::process_metrics().counter(
      "sluice_rollout_agent_handler_failures_total",
      "agent requests whose handling failed unexpectedly (answered 500)");
  core::Counter& timeout(const char* stage) {
    return core::process_metrics().counter("sluice_rollout_agent_timeouts_total",
                                           "agent endpoint deadlines passed, by stage",
                                           {{"stage", stage}});
  }
  core::Counter& answered(unsigned status) {
    return core::process_metrics().counter("sluice_rollout_agent_answers_total",
                                           "agent endpoint answers, by HTTP status",
                                           {{"status", std::to_string(status)}});
  }
};

}  // namespace

HttpAnswer http_error(unsigned status, const std::string& message) {
  return {status, nlohmann::json{{"error", {{"message", message}, {"type", reason_type(status)}}}}};
}

struct JsonHttpServer::Impl {
  enum class Stage {
    kReading,    // its request is arriving
    kAnswering,  // the request went to the handler
    kDraining,   // answered before its request was read whole: reading and dropping the rest
  };
  struct Conn {
    int fd = -1;
    Stage stage = Stage::kReading;
    bool closing = false;   // its erase is posted
    bool admitted = false;  // its header was judged
    bool refusal = false;   // answered 503 at accept, outside the slots
    std::uint64_t drained = 0;
    std::unique_ptr<core::EventLoop::FdWatch> watch;
    std::unique_ptr<core::EventLoop::Timer> header_wait, deadline;
    http::request_parser<http::string_body> parser;
    std::string pending;
    std::shared_ptr<bool> answered = std::make_shared<bool>(false);
    ~Conn() {
      watch.reset();
      if (fd >= 0) ::close(fd);
    }
  };

  core::EventLoop* loop = nullptr;
  Handler handler;
  Admit admit;
  AgentEndpointConfig limits;
  HttpMetrics metrics;
  int listener = -1;
  std::unique_ptr<core::EventLoop::FdWatch> accept_watch;
  // By a serial number, not the descriptor: a reply that comes after its connection closed must
  // not reach a new connection that reused the descriptor. Serials grow, so the map's order is
  // the order of arrival.
  std::map<std::uint64_t, std::unique_ptr<Conn>> conns;
  std::uint64_t next_conn = 0;
  std::string url;
  std::shared_ptr<int> token = std::make_shared<int>(0);

  std::size_t open() const {
    std::size_t n = 0;
    for (const auto& [id, c] : conns)
      n += c->closing || c->refusal ? 0 : 1;
    return n;
  }

  std::size_t refusing() const {
    std::size_t n = 0;
    for (const auto& [id, c] : conns)
      n += !c->closing && c->refusal ? 1 : 0;
    return n;
  }

  void close_later(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end() || it->second->closing) return;
    it->second->closing = true;
    it->second->watch.reset();
    loop->post([this, w = std::weak_ptr<int>(token), id] {
      if (w.expired()) return;
      conns.erase(id);
      metrics.open.set(static_cast<double>(open()));
    });
  }

  // Room for one more connection. At a bound (all connections, or those not being answered),
  // the oldest connection not being answered goes; false when every slot holds a request being
  // answered.
  bool make_room() {
    std::size_t all = 0, idle = 0;
    std::optional<std::uint64_t> oldest;
    for (const auto& [id, c] : conns) {
      if (c->closing || c->refusal) continue;
      ++all;
      if (c->stage == Stage::kAnswering) continue;
      ++idle;
      if (!oldest) oldest = id;
    }
    if (all < limits.max_connections && idle < limits.max_idle_connections) return true;
    if (!oldest) return false;
    conns.erase(*oldest);
    metrics.evicted.inc();
    return true;
  }

  void on_accept() {
    while (true) {
      int c = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        return;
      }
      const bool room = make_room();
      if (!room) metrics.refused.inc();
      if (!room && refusing() >= kMaxRefusing) {
        ::close(c);
        continue;
      }
      const std::uint64_t id = ++next_conn;
      auto conn = std::make_unique<Conn>();
      conn->fd = c;
      conn->refusal = !room;
      conn->parser.header_limit(kHeaderLimit);
      conn->parser.body_limit(limits.max_body_bytes);
      conn->parser.eager(true);
      conn->watch = loop->watch_readable(c, [this, id] { on_readable(id); });
      conn->header_wait = loop->after(Millis(limits.header_timeout_ms), [this, id] {
        auto it = conns.find(id);
        if (it == conns.end() || it->second->closing) return;
        if (it->second->stage != Stage::kReading || it->second->parser.is_header_done()) return;
        metrics.timeout("header").inc();
        close_later(id);
      });
      conn->deadline = loop->after(Millis(limits.request_timeout_ms), [this, id] {
        auto it = conns.find(id);
        if (it == conns.end() || it->second->closing) return;
        if (it->second->stage != Stage::kReading) return;
        metrics.timeout("request").inc();
        close_later(id);
      });
      conns[id] = std::move(conn);
      metrics.open.set(static_cast<double>(open()));
      // Told why, rather than closed: its client may try again later. send() then reads and
      // drops what the client sends until it closes or request_timeout_ms passes.
      if (!room) {
        send(id, http_error(503, fmt::format("every one of the endpoint's {} connections holds a "
                                             "request being answered; try again later",
                                             limits.max_connections)));
      }
    }
  }

  static HttpRequest request_of(const http::request_parser<http::string_body>& parser) {
    const auto& req = parser.get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.authorization = std::string(req[http::field::authorization]);
    return r;
  }

  void on_readable(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end() || it->second->closing) return;
    Conn& conn = *it->second;
    if (conn.stage == Stage::kDraining) {
      const bool closed = drain_socket(conn.fd, &conn.drained);
      if (closed || conn.drained > limits.drain_bytes) close_later(id);
      return;
    }
    if (conn.stage == Stage::kAnswering) {
      // The peer went away while its answer was being made: the answer finds no connection.
      std::uint64_t dropped = 0;
      if (drain_socket(conn.fd, &dropped)) close_later(id);
      return;
    }
    const bool closed =
        core::read_available(conn.fd, conn.pending, limits.max_body_bytes + kHeaderLimit * 2);
    boost::beast::error_code ec = core::feed_parser(conn.parser, conn.pending);
    if (!conn.admitted && conn.parser.is_header_done()) {
      conn.admitted = true;
      conn.header_wait.reset();
      if (admit) {
        if (std::optional<HttpAnswer> refusal = admit(request_of(conn.parser))) {
          send(id, std::move(*refusal));
          return;
        }
      }
    }
    if (ec == http::error::body_limit) {
      send(id, http_error(413, fmt::format("the body is over the limit of {} bytes",
                                           limits.max_body_bytes)));
    } else if (ec) {
      send(id, http_error(400, "malformed HTTP request: " + ec.message()));
    } else if (conn.parser.is_done()) {
      hand_over(id, conn);
    } else if (closed) {
      close_later(id);
    }
  }

  void hand_over(std::uint64_t id, Conn& conn) {
    conn.stage = Stage::kAnswering;
    conn.header_wait.reset();
    conn.deadline = loop->after(Millis(limits.answer_timeout_ms), [this, id] {
      auto it = conns.find(id);
      if (it == conns.end() || it->second->closing || *it->second->answered) return;
      *it->second->answered = true;
      metrics.timeout("answer").inc();
      send(id, http_error(504, fmt::format("no answer within {} ms (rollout.agent."
                                           "answer_timeout_ms)",
                                           limits.answer_timeout_ms)));
    });
    HttpRequest r = request_of(conn.parser);
    r.body = conn.parser.get().body();
    Respond respond = [this, w = std::weak_ptr<int>(token), id,
                       once = conn.answered](HttpAnswer a) {
      if (w.expired() || *once) return;
      *once = true;
      send(id, std::move(a));
    };
    // Exceptions never cross the event loop: one request's failure is its own 500.
    std::string failure;
    try {
      handler(r, respond);
      return;
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "an unknown exception";
    }
    metrics.handler_failed.inc();
    log::warn("agent endpoint: {} {} failed: {}", r.method, r.target, failure);
    respond(http_error(500, "the request failed here (counted); the endpoint goes on"));
  }

  void send(std::uint64_t id, HttpAnswer a) {
    auto it = conns.find(id);
    if (it == conns.end() || it->second->closing) return;
    Conn& conn = *it->second;
    http::response<http::string_body> res{static_cast<http::status>(a.status), 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::connection, "close");
    res.body() = a.body.dump() + "\n";
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    core::send_answer(conn.fd, os.str());  // and half-closes: the client sees the answer end
    metrics.answered(a.status).inc();
    if (conn.stage != Stage::kReading) {
      close_later(id);
      return;
    }
    // Answered before the request arrived whole: closing with its bytes unread would reset the
    // connection, and the client might see the reset before the answer.
    conn.stage = Stage::kDraining;
    conn.header_wait.reset();
    conn.pending.clear();
    conn.deadline = loop->after(Millis(limits.request_timeout_ms), [this, id] { close_later(id); });
    if (drain_socket(conn.fd, &conn.drained) || conn.drained > limits.drain_bytes) close_later(id);
  }
};

core::Result<std::unique_ptr<JsonHttpServer>> JsonHttpServer::create(
    core::EventLoop& loop, const std::string& listen, const AgentEndpointConfig& limits,
    Handler handler, Admit admit) {
  SLUICE_TRY(limits.validate());
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->handler = std::move(handler);
  impl->admit = std::move(admit);
  impl->limits = limits;
  std::string bound;
  SLUICE_ASSIGN_OR_RETURN(impl->listener, core::listen_tcp(listen, &bound));
  impl->url = "http://" + bound;
  Impl* raw = impl.get();
  impl->accept_watch = loop.watch_readable(impl->listener, [raw] { raw->on_accept(); });
  return std::unique_ptr<JsonHttpServer>(new JsonHttpServer(std::move(impl)));
}

JsonHttpServer::JsonHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

JsonHttpServer::~JsonHttpServer() {
  if (!impl_) return;
  impl_->conns.clear();
  impl_->metrics.open.set(0);
  impl_->accept_watch.reset();
  if (impl_->listener >= 0) ::close(impl_->listener);
}

const std::string& JsonHttpServer::url() const {
  return impl_->url;
}

std::size_t JsonHttpServer::connections() const {
  return impl_->open();
}

}  // namespace sluice::rollout
