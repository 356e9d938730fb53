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
#include "wire/http_read.hpp"
#include "wire/metrics_http.hpp"

namespace sluice::rollout {

namespace http = boost::beast::http;
using core::Millis;

namespace {

constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kMaxConnections = 64;
constexpr Millis kRequestWait{10000};

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
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

HttpAnswer http_error(unsigned status, const std::string& message) {
  return {status, nlohmann::json{{"error", {{"message", message}, {"type", reason_type(status)}}}}};
}

struct JsonHttpServer::Impl {
  struct Conn {
    int fd = -1;
    std::unique_ptr<core::EventLoop::FdWatch> watch;
    std::unique_ptr<core::EventLoop::Timer> wait;
    http::request_parser<http::string_body> parser;
    std::string pending;
    bool answering = false;  // the request went to the handler
    ~Conn() {
      watch.reset();
      if (fd >= 0) ::close(fd);
    }
  };

  core::EventLoop* loop = nullptr;
  Handler handler;
  std::size_t max_body = 0;
  int listener = -1;
  std::unique_ptr<core::EventLoop::FdWatch> accept_watch;
  // By a serial number, not the descriptor: a reply that comes after its connection closed must
  // not reach a new connection that reused the descriptor.
  std::map<std::uint64_t, std::unique_ptr<Conn>> conns;
  std::uint64_t next_conn = 0;
  std::string url;
  std::shared_ptr<int> token = std::make_shared<int>(0);

  void close_later(std::uint64_t id) {
    loop->post([this, w = std::weak_ptr<int>(token), id] {
      if (!w.expired()) conns.erase(id);
    });
  }

  void on_accept() {
    while (true) {
      int c = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (conns.size() >= kMaxConnections) {
        ::close(c);
        continue;
      }
      const std::uint64_t id = ++next_conn;
      auto conn = std::make_unique<Conn>();
      conn->fd = c;
      conn->parser.header_limit(kHeaderLimit);
      conn->parser.body_limit(max_body);
      conn->parser.eager(true);
      conn->watch = loop->watch_readable(c, [this, id] { on_readable(id); });
      conn->wait = loop->after(kRequestWait, [this, id] {
        auto it = conns.find(id);
        if (it != conns.end() && !it->second->answering) close_later(id);
      });
      conns[id] = std::move(conn);
    }
  }

  void on_readable(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& conn = *it->second;
    const bool closed =
        core::read_available(conn.fd, conn.pending, max_body + kHeaderLimit * 2, !conn.answering);
    if (conn.answering) {
      // The peer went away while its answer was being made: the answer finds no connection.
      if (closed) close_later(id);
      return;
    }
    boost::beast::error_code ec = core::feed_parser(conn.parser, conn.pending);
    if (ec == http::error::body_limit) {
      send(id, http_error(413, fmt::format("the body is over the limit of {} bytes", max_body)));
    } else if (ec) {
      send(id, http_error(400, "malformed HTTP request: " + ec.message()));
    } else if (conn.parser.is_done()) {
      conn.answering = true;
      const auto& req = conn.parser.get();
      HttpRequest r;
      r.method = std::string(req.method_string());
      r.target = std::string(req.target());
      r.authorization = std::string(req[http::field::authorization]);
      r.body = req.body();
      auto once = std::make_shared<bool>(false);
      handler(r, [this, w = std::weak_ptr<int>(token), id, once](HttpAnswer a) {
        if (w.expired() || *once) return;
        *once = true;
        send(id, std::move(a));
      });
      return;
    } else if (!closed) {
      return;  // more to come
    }
    if (closed) close_later(id);
  }

  void send(std::uint64_t id, HttpAnswer a) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    const int c = it->second->fd;
    http::response<http::string_body> res{static_cast<http::status>(a.status), 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::connection, "close");
    res.body() = a.body.dump() + "\n";
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    core::send_answer(c, os.str());
    close_later(id);
  }
};

core::Result<std::unique_ptr<JsonHttpServer>> JsonHttpServer::create(core::EventLoop& loop,
                                                                     const std::string& listen,
                                                                     std::size_t max_body,
                                                                     Handler handler) {
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->handler = std::move(handler);
  impl->max_body = max_body;
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
  impl_->accept_watch.reset();
  if (impl_->listener >= 0) ::close(impl_->listener);
}

const std::string& JsonHttpServer::url() const {
  return impl_->url;
}

}  // namespace sluice::rollout
