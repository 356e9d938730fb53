// A role's /metrics endpoint as Prometheus (or curl) meets it: a GET returns the registry's text
// with the counters' current values; other paths, other methods and garbage get an error status,
// and the endpoint goes on serving.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "core/event_loop.hpp"
#include "core/metrics.hpp"
#include "wire/metrics_http.hpp"

using namespace sluice;

namespace {

// Sends `request` to 127.0.0.1:`port` and reads the answer until the server closes.
std::string exchange(int port, const std::string& request) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return "connect failed";
  }
  ::send(s, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(s, buf, sizeof buf, 0)) > 0)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(s);
  return out;
}

// Runs the loop while `fn` talks to the endpoint from another thread.
std::string while_serving(core::EventLoop& loop, int port, const std::string& request) {
  std::string answer;
  std::atomic<bool> done{false};
  std::thread client([&] {
    answer = exchange(port, request);
    done = true;
  });
  loop.run_until([&] { return done.load(); }, core::Millis(10000));
  client.join();
  return answer;
}

}  // namespace

TEST_SUITE("core.metrics_http") {
  TEST_CASE("GET /metrics returns the registry's text: other requests get 404, 405 or 400") {
    auto loop = core::EventLoop::create().value();
    core::MetricsRegistry reg;
    auto& served = reg.counter("sluice_bytes_served_total", "bytes served", {{"role", "relay"}});
    served.inc(4096);
    auto ep = core::MetricsEndpoint::create(*loop, "127.0.0.1:0", reg);
    REQUIRE_MESSAGE(ep.is_ok(), ep.status().to_string());
    const std::string& url = (*ep)->url();
    REQUIRE(url.rfind("http://127.0.0.1:", 0) == 0);
    int port = std::stoi(url.substr(std::string("http://127.0.0.1:").size()));

    std::string r = while_serving(*loop, port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_MESSAGE(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0, r);
    CHECK(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
    CHECK(r.find("# TYPE sluice_bytes_served_total counter") != std::string::npos);
    CHECK(r.find("sluice_bytes_served_total{role=\"relay\"} 4096") != std::string::npos);

    served.inc(1);  // a second scrape sees the new value
    r = while_serving(*loop, port, "GET /metrics HTTP/1.0\r\n\r\n");
    CHECK_MESSAGE(r.find("sluice_bytes_served_total{role=\"relay\"} 4097") != std::string::npos, r);
    CHECK((*ep)->requests_served() == 2);

    r = while_serving(*loop, port, "GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_MESSAGE(r.rfind("HTTP/1.1 404", 0) == 0, r);
    r = while_serving(*loop, port,
                      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    CHECK_MESSAGE(r.rfind("HTTP/1.1 405", 0) == 0, r);
    r = while_serving(*loop, port, "\x01\x02 not http at all\r\n\r\n");
    CHECK_MESSAGE(r.rfind("HTTP/1.1 400", 0) == 0, r);
    r = while_serving(*loop, port,
                      "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
    CHECK_MESSAGE(r.find("200 OK") == std::string::npos, r);  // refused, not served

    r = while_serving(*loop, port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_MESSAGE(r.rfind("HTTP/1.1 200 OK\r\n", 0) == 0, r);  // and it still serves
    CHECK((*ep)->requests_served() == 3);
  }

  TEST_CASE("a malformed or unbindable address is refused with a clear error") {
    auto loop = core::EventLoop::create().value();
    core::MetricsRegistry reg;
    auto a = core::MetricsEndpoint::create(*loop, "127.0.0.1", reg);
    REQUIRE_FALSE(a.is_ok());
    CHECK(a.status().message().find("is not HOST:PORT") != std::string::npos);
    auto b = core::MetricsEndpoint::create(*loop, "somewhere:80", reg);
    REQUIRE_FALSE(b.is_ok());
    CHECK(b.status().message().find("not an IPv4 address") != std::string::npos);
    auto c = core::MetricsEndpoint::create(*loop, "127.0.0.1:99999", reg);
    REQUIRE_FALSE(c.is_ok());
    auto first = core::MetricsEndpoint::create(*loop, "127.0.0.1:0", reg);
    REQUIRE(first.is_ok());
    const std::string& url = (*first)->url();
    std::string taken = url.substr(7, url.size() - 7 - std::string("/metrics").size());
    auto d = core::MetricsEndpoint::create(*loop, taken, reg);
    REQUIRE_FALSE(d.is_ok());
    CHECK(d.status().message().find("cannot bind") != std::string::npos);
  }
}
