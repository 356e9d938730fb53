#include "wire/metrics_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
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

namespace sluice::core {

namespace http = boost::beast::http;

namespace {

constexpr std::size_t kHeaderLimit = 8 * 1024;
constexpr std::size_t kMaxConnections = 16;
constexpr Millis kIdle{5000};

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

Result<sockaddr_in> parse_listen(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) {
    return invalid_argument(fmt::format("address '{}' is not HOST:PORT", listen));
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::string host = listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return invalid_argument(fmt::format("address '{}': '{}' is not an IPv4 address", listen, host));
  }
  const std::string port = listen.substr(colon + 1);
  unsigned long p = 0;
  for (char c : port) {
    if (c < '0' || c > '9') {
      return invalid_argument(fmt::format("address '{}': bad port '{}'", listen, port));
    }
    p = p * 10 + static_cast<unsigned long>(c - '0');
    if (p > 65535) return invalid_argument(fmt::format("address '{}': port > 65535", listen));
  }
  a.sin_port = htons(static_cast<std::uint16_t>(p));
  return a;
}

}  // namespace

struct MetricsEndpoint::Impl {
  struct Conn {
    std::unique_ptr<Fd> fd;
    std::unique_ptr<EventLoop::FdWatch> watch;
    std::unique_ptr<EventLoop::Timer> idle;
    http::request_parser<http::empty_body> parser;
    std::string pending;  // bytes the parser has not consumed yet
  };

  EventLoop* loop = nullptr;
  const MetricsRegistry* registry = nullptr;
  std::unique_ptr<Fd> listener;
  std::unique_ptr<EventLoop::FdWatch> accept_watch;
  std::map<int, std::unique_ptr<Conn>> conns;
  std::string url;
  std::uint64_t served = 0;
  // Posted callbacks hold a weak reference: one that runs after the endpoint is gone does nothing.
  std::shared_ptr<int> token = std::make_shared<int>(0);

  void close_later(int c) {
    loop->post([this, w = std::weak_ptr<int>(token), c] {
      if (!w.expired()) conns.erase(c);
    });
  }

  void on_accept() {
    while (true) {
      int c = ::accept4(listener->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          log::warn("metrics: accept on {} failed: {}", url, std::strerror(errno));
        }
        if (errno == EINTR) continue;
        return;
      }
      if (conns.size() >= kMaxConnections) {
        ::close(c);
        continue;
      }
      auto conn = std::make_unique<Conn>();
      conn->fd = std::make_unique<Fd>(c);
      conn->parser.header_limit(kHeaderLimit);
      conn->parser.eager(true);
      conn->watch = loop->watch_readable(c, [this, c] { on_readable(c); });
      conn->idle = loop->after(kIdle, [this, c] { close_later(c); });
      conns[c] = std::move(conn);
    }
  }

  void on_readable(int c) {
    auto it = conns.find(c);
    if (it == conns.end()) return;
    Conn& conn = *it->second;
    const bool closed = read_available(c, conn.pending, kHeaderLimit * 2);
    boost::beast::error_code ec = feed_parser(conn.parser, conn.pending);
    if (ec) {
      respond(c, http::status::bad_request, "bad request\n");
    } else if (conn.parser.is_done()) {
      const auto& req = conn.parser.get();
      if (req.method() != http::verb::get) {
        respond(c, http::status::method_not_allowed, "only GET\n");
      } else if (req.target() != "/metrics") {
        respond(c, http::status::not_found, "metrics are at /metrics\n");
      } else {
        ++served;
        respond(c, http::status::ok, registry->prometheus_text());
      }
    } else if (!closed) {
      return;  // more of the request to come
    }
    // Answered, or the peer went away: this connection is done. Erased from the loop, not from
    // inside its own watch's callback.
    close_later(c);
  }

  void respond(int c, http::status status, std::string body) {
    http::response<http::string_body> res{status, 11};
    res.set(http::field::content_type, status == http::status::ok
                                           ? "text/plain; version=0.0.4; charset=utf-8"
                                           : "text/plain; charset=utf-8");
    res.set(http::field::connection, "close");
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    send_answer(c, os.str());
  }
};

void send_answer(int fd, const std::string& answer) {
  // Answers are a few KiB and the socket's send buffer takes them whole; a peer that reads
  // nothing gets up to a second, then the rest is dropped.
  constexpr Millis kSendWait{1000};
  constexpr useconds_t kSendRetryUs = 1000;  // between tries while the send buffer is full
  std::size_t sent = 0;
  const auto deadline = Clock::now() + kSendWait;
  while (sent < answer.size() && Clock::now() < deadline) {
    ssize_t n = ::send(fd, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      ::usleep(kSendRetryUs);
    } else {
      break;
    }
  }
  ::shutdown(fd, SHUT_WR);
}

Result<int> listen_tcp(const std::string& listen, std::string* host_port) {
  SLUICE_ASSIGN_OR_RETURN(sockaddr_in addr, parse_listen(listen));
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return unavailable(fmt::format("http: socket: {}", std::strerror(errno)));
  Fd fd(s);
  int one = 1;
  ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return unavailable(fmt::format("http: cannot bind {}: {}", listen, std::strerror(errno)));
  }
  if (::listen(s, 16) != 0) {
    return unavailable(fmt::format("http: cannot listen on {}: {}", listen, std::strerror(errno)));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &bound.sin_addr, host, sizeof host);
  if (host_port) *host_port = fmt::format("{}:{}", host, ntohs(bound.sin_port));
  fd.fd = -1;
  return s;
}

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::create(EventLoop& loop,
                                                                 const std::string& listen,
                                                                 const MetricsRegistry& registry) {
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->registry = &registry;
  std::string bound;
  SLUICE_ASSIGN_OR_RETURN(int s, listen_tcp(listen, &bound));
  impl->listener = std::make_unique<Fd>(s);
  impl->url = fmt::format("http://{}/metrics", bound);
  Impl* raw = impl.get();
  impl->accept_watch = loop.watch_readable(s, [raw] { raw->on_accept(); });
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(impl)));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsEndpoint::~MetricsEndpoint() {
  if (!impl_) return;
  impl_->conns.clear();  // watches and timers first, then the sockets they watch
  impl_->accept_watch.reset();
}

const std::string& MetricsEndpoint::url() const {
  return impl_->url;
}

std::uint64_t MetricsEndpoint::requests_served() const {
  return impl_->served;
}

}  // namespace sluice::core
