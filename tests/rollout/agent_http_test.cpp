// The agent endpoint's HTTP server over loopback: every wait has a deadline and every table a
// bound, so that neither idle connections nor a slow handler lock agents out; an early answer
// (413, 401) reaches its client; a handler that throws costs one 500.
#include <doctest/doctest.h>

#include <cerrno>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent_test_util.hpp"
#include "core/metrics.hpp"
#include "rollout/agent_http.hpp"

using namespace sluice;
using rollout::HttpAnswer;
using rollout::HttpRequest;
using rollout::JsonHttpServer;
using testing::HttpReply;

namespace {

// The server with a handler that answers 200 at once, except: "/boom" throws, and "/hang" keeps
// its Respond in `held` (answered later, or never). Headers without "Bearer t" are refused 401.
struct Server {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  rollout::AgentEndpointConfig config;
  std::unique_ptr<JsonHttpServer> server;
  std::vector<JsonHttpServer::Respond> held;
  int handled = 0;

  void start() {
    auto s = JsonHttpServer::create(
        *loop, "127.0.0.1:0", config,
        [this](const HttpRequest& r, JsonHttpServer::Respond respond) {
          ++handled;
          if (r.target == "/boom") throw std::runtime_error("boom");
          if (r.target == "/hang") {
            held.push_back(std::move(respond));
            return;
          }
          respond(HttpAnswer{200, {{"ok", true}}});
        },
        [](const HttpRequest& r) -> std::optional<HttpAnswer> {
          if (r.authorization == "Bearer t") return std::nullopt;
          return rollout::http_error(401, "no");
        });
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    server = std::move(s).value();
  }
  std::future<HttpReply> send(const std::string& path, const std::string& body = "{}") {
    const std::string url = server->url();
    return std::async(std::launch::async,
                      [url, path, body] { return testing::http_post(url, path, body, "t"); });
  }
  HttpReply post(const std::string& path) {
    auto f = send(path);
    REQUIRE(testing::pump(*loop, f));
    return f.get();
  }
};

// Whether the peer closed the connection (read without waiting).
bool closed_by_peer(int fd) {
  char c = 0;
  const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

double counter(const char* name, const core::Labels& labels = {}) {
  return core::process_metrics().counter(name, "", labels).value();
}

}  // namespace

TEST_SUITE("rollout.agent_http") {
  TEST_CASE("a body over the limit gets a 413 its client reads, though it sends the whole body") {
    Server s;
    s.start();
    const std::string url = s.server->url();
    auto f = std::async(std::launch::async, [url] {
      const int fd = testing::connect_http(url);
      if (fd < 0) return HttpReply{};
      // More than the sockets' buffers take at once. As a plain client does: the whole request,
      // then the answer.
      const std::string body(6'000'000, '7');
      testing::send_all(fd, testing::request_head("/v1/completions", body.size(), "t") + body);
      HttpReply r = testing::parse_reply(testing::read_all(fd));
      ::close(fd);
      return r;
    });
    REQUIRE(testing::pump(*s.loop, f));
    HttpReply r = f.get();
    CHECK(r.status == 413);
    CHECK(r.body["error"]["message"].get<std::string>().find("1048576 bytes") != std::string::npos);
    CHECK(s.handled == 0);
    // The server goes on.
    CHECK(s.post("/v1/x").status == 200);
  }

  TEST_CASE("a request without the token is refused from its header, before its body") {
    Server s;
    s.start();
    const std::string url = s.server->url();
    auto f = std::async(std::launch::async, [url] {
      const int fd = testing::connect_http(url);
      // A body is announced and never sent: the answer comes from the header alone.
      testing::send_all(fd, testing::request_head("/v1/completions", 100000, ""));
      HttpReply r = testing::parse_reply(testing::read_all(fd));
      ::close(fd);
      return r;
    });
    REQUIRE(testing::pump(*s.loop, f));
    CHECK(f.get().status == 401);
    CHECK(s.handled == 0);
  }

  TEST_CASE("idle connections cannot lock agents out: past the bound the oldest go") {
    Server s;
    s.config.max_connections = 8;
    s.config.max_idle_connections = 4;
    s.start();
    const double evicted = counter("sluice_rollout_agent_connections_evicted_total");
    std::vector<int> idle;
    for (int i = 0; i < 10; ++i) {
      idle.push_back(testing::connect_http(s.server->url()));
      REQUIRE(idle.back() >= 0);
      testing::pump_for(*s.loop, 20);
    }
    CHECK(s.server->connections() <= 4);
    // An agent still gets in, and is answered.
    CHECK(s.post("/v1/x").status == 200);
    int closed = 0;
    for (int fd : idle) {
      closed += closed_by_peer(fd) ? 1 : 0;
      ::close(fd);
    }
    CHECK(closed >= 6);
    CHECK(counter("sluice_rollout_agent_connections_evicted_total") - evicted >= 7);
  }

  TEST_CASE("a header or a request not whole in time closes its connection") {
    Server s;
    s.config.header_timeout_ms = 150;
    s.config.request_timeout_ms = 300;
    s.start();
    const double header = counter("sluice_rollout_agent_timeouts_total", {{"stage", "header"}});
    const double request = counter("sluice_rollout_agent_timeouts_total", {{"stage", "request"}});
    const int silent = testing::connect_http(s.server->url());
    const int partial = testing::connect_http(s.server->url());
    const int slow_body = testing::connect_http(s.server->url());
    testing::send_all(partial, "POST /v1/x HTTP/1.1\r\nHost: t\r\n");
    testing::send_all(slow_body, testing::request_head("/v1/x", 10, "t") + "{\"a\":");
    testing::pump_for(*s.loop, 600);
    CHECK(closed_by_peer(silent));
    CHECK(closed_by_peer(partial));
    CHECK(closed_by_peer(slow_body));
    CHECK(s.server->connections() == 0);
    CHECK(counter("sluice_rollout_agent_timeouts_total", {{"stage", "header"}}) - header == 2);
    CHECK(counter("sluice_rollout_agent_timeouts_total", {{"stage", "request"}}) - request == 1);
    for (int fd : {silent, partial, slow_body})
      ::close(fd);
  }

  TEST_CASE(
      "a request being answered gets 504 past answer_timeout_ms, and at the bound newcomers "
      "get 503 until a slot frees") {
    Server s;
    s.config.max_connections = 2;
    s.config.max_idle_connections = 1;
    s.config.answer_timeout_ms = 400;
    s.start();
    // One at a time: a connection still sending its request is the one a newcomer closes.
    auto a = s.send("/hang");
    REQUIRE(s.loop->run_until([&] { return s.held.size() == 1; }, core::Millis(5000)));
    auto b = s.send("/hang");
    REQUIRE(s.loop->run_until([&] { return s.held.size() == 2; }, core::Millis(5000)));
    // Every slot holds a request being answered: a newcomer is told so (503), not just closed.
    const double before = counter("sluice_rollout_agent_connections_refused_total");
    HttpReply refused = s.post("/v1/x");
    CHECK(refused.status == 503);
    CHECK(refused.body["error"]["message"].get<std::string>().find("try again later") !=
          std::string::npos);
    CHECK(counter("sluice_rollout_agent_connections_refused_total") - before == 1);
    CHECK(s.server->connections() == 2);
    // One answered late, the other past its deadline: 504, and the slots free.
    s.held[0](HttpAnswer{200, {{"late", true}}});
    REQUIRE(testing::pump(*s.loop, a));
    CHECK(a.get().status == 200);
    REQUIRE(testing::pump(*s.loop, b));
    HttpReply timed_out = b.get();
    CHECK(timed_out.status == 504);
    CHECK(timed_out.body["error"]["message"].get<std::string>().find("answer_timeout_ms") !=
          std::string::npos);
    s.held[1](HttpAnswer{200, {}});  // too late: nothing happens
    CHECK(s.post("/v1/x").status == 200);
  }

  TEST_CASE("a handler that throws is answered 500, counted, and the server goes on") {
    Server s;
    s.start();
    const double failed = counter("sluice_rollout_agent_handler_failures_total");
    HttpReply r = s.post("/boom");
    CHECK(r.status == 500);
    CHECK(counter("sluice_rollout_agent_handler_failures_total") - failed == 1);
    CHECK(s.post("/v1/x").status == 200);
  }

  TEST_CASE("bounds that contradict each other are refused") {
    auto loop = core::EventLoop::create().value();
    rollout::AgentEndpointConfig c;
    c.max_idle_connections = c.max_connections + 1;
    auto handler = [](const HttpRequest&, JsonHttpServer::Respond) {};
    CHECK_FALSE(JsonHttpServer::create(*loop, "127.0.0.1:0", c, handler).is_ok());
    c = {};
    c.request_timeout_ms = c.header_timeout_ms - 1;
    CHECK_FALSE(JsonHttpServer::create(*loop, "127.0.0.1:0", c, handler).is_ok());
    c = {};
    c.answer_timeout_ms = 0;
    CHECK_FALSE(JsonHttpServer::create(*loop, "127.0.0.1:0", c, handler).is_ok());
  }
}
