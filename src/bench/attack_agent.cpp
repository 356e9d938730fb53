// The attacks on the agent endpoint (bench/attack_internal.hpp): what a careless or hostile
// client of a rollout's OpenAI-style endpoint sends, over plain sockets of its own, each step
// with a deadline. Every endpoint the run folder names (agent-rollout-N.url) is played; each
// attempt ends with a real request that must still be answered, so that an endpoint that
// survives by no longer answering anyone is a breach.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "bench/attack_internal.hpp"

namespace sluice::cli::attack {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// How long a request that must be answered is waited for, and how long a connection that the
// endpoint must close (a body that never ends) is watched before it counts as held open.
constexpr milliseconds kAnswerWait{5000};
constexpr milliseconds kCloseWait{25000};
// A slow body's pace: one byte this often.
constexpr milliseconds kDribble{400};
// Connections held open idle at once: more than the endpoint's default bound on open connections
// (rollout.agent.max_connections, 128).
constexpr int kIdleConnections = 300;
// The oversized body: what its header claims, and how much of it is sent before the answer is
// read (more than the default max_body_bytes, 1 MiB).
constexpr std::size_t kOversizedClaim = 64u << 20;
constexpr std::size_t kOversizedSent = 2u << 20;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

struct Endpoint {
  std::string name;  // "rollout-0"
  std::string host;  // dotted IPv4
  std::uint16_t port = 0;
};

// "http://127.0.0.1:PORT" as a rollout writes it to its url file.
std::optional<Endpoint> parse_url(const std::string& name, std::string url) {
  while (!url.empty() && (url.back() == '\n' || url.back() == '\r' || url.back() == ' ')) {
    url.pop_back();
  }
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return std::nullopt;
  url = url.substr(prefix.size());
  const auto colon = url.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  Endpoint e;
  e.name = name;
  e.host = url.substr(0, colon);
  try {
    const unsigned long port = std::stoul(url.substr(colon + 1));
    if (port == 0 || port > 65535) return std::nullopt;
    e.port = static_cast<std::uint16_t>(port);
  } catch (...) {
    return std::nullopt;
  }
  return e;
}

core::Result<Fd> connect_to(const Endpoint& e) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return core::unavailable(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(e.port);
  if (::inet_pton(AF_INET, e.host.c_str(), &to.sin_addr) != 1) {
    return core::invalid_argument(fmt::format("{}: not an IPv4 address", e.host));
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return core::unavailable(
        fmt::format("connect {}:{}: {}", e.host, e.port, std::strerror(errno)));
  }
  return fd;
}

// Sends all of `data` before the deadline (false on an error, a reset or the deadline).
bool send_all(int fd, const char* data, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<std::size_t>(sent);
  }
  return true;
}

// What came back on a connection: the answer's status (0: none), or that the peer closed or
// reset it without one, or that nothing came before the deadline.
struct Reply {
  unsigned status = 0;
  bool closed = false;  // EOF or a reset, with no status line
  bool reset = false;
  std::string head;  // the status line, for the report
};

Reply read_reply(int fd, Clock::time_point deadline) {
  Reply r;
  std::string got;
  char buf[4096];
  while (got.find("\r\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return r;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return r;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      r.closed = true;
      r.reset = n < 0;
      break;
    }
    if (n < 0) return r;
    got.append(buf, static_cast<std::size_t>(n));
  }
  const auto eol = got.find("\r\n");
  if (eol == std::string::npos) return r;
  r.closed = false;
  r.head = got.substr(0, eol);
  // "HTTP/1.1 400 Bad Request"
  const auto sp = r.head.find(' ');
  if (sp != std::string::npos) {
    try {
      r.status = static_cast<unsigned>(std::stoul(r.head.substr(sp + 1, 3)));
    } catch (...) {
      r.status = 0;
    }
  }
  return r;
}

std::string request(const std::string& path, const std::string& token, const std::string& body) {
  std::string out =
      fmt::format("POST {} HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n", path);
  if (!token.empty()) out += "Authorization: Bearer " + token + "\r\n";
  out += fmt::format("Content-Length: {}\r\nConnection: close\r\n\r\n", body.size());
  return out + body;
}

std::string describe(const Reply& r) {
  if (r.status != 0) return r.head;
  if (r.reset) return "the connection was reset, no answer";
  if (r.closed) return "the connection was closed, no answer";
  return "no answer in time";
}

// One request on a fresh connection, its reply.
Reply exchange(const Endpoint& e, const std::string& bytes, milliseconds wait) {
  auto fd = connect_to(e);
  if (!fd.is_ok()) {
    Reply r;
    r.closed = true;
    r.head = fd.status().message();
    return r;
  }
  const auto deadline = Clock::now() + wait;
  if (!send_all(fd->get(), bytes.data(), bytes.size(), deadline)) {
    Reply r = read_reply(fd->get(), deadline);  // it may have answered early (413, 401)
    return r;
  }
  return read_reply(fd->get(), deadline);
}

class AgentAttacker {
 public:
  AgentAttacker(Endpoint e, std::string token, Report& report)
      : e_(std::move(e)), token_(std::move(token)), report_(report) {}

  void play() {
    stranger();
    malformed();
    oversized();
    slow_body();
    idle_crowd();
  }

 private:
  // A real request that any sound endpoint answers at once: an authenticated completion for an
  // episode that does not exist (4xx).
  bool answers(std::string& why) {
    Reply r = exchange(e_,
                       request("/v1/completions", token_,
                               R"({"session": "attack-no-such-session", "prompt": [1]})"),
                       kAnswerWait);
    why = describe(r);
    return r.status >= 400 && r.status < 500;
  }

  void add(const std::string& what, const std::string& tried, const Reply& r, bool refused,
           const std::string& extra = "") {
    std::string alive_why;
    const bool alive = answers(alive_why);
    Attempt a{"agent " + what + " " + e_.name, tried, describe(r) + extra, Verdict::kRefused};
    if (!refused) a.verdict = Verdict::kBreach;
    if (!alive) {
      a.verdict = Verdict::kBreach;
      a.got += "; then a real request: " + alive_why;
    }
    report_.add(std::move(a));
  }

  void stranger() {
    const std::string body = R"({"session": "x", "prompt": [1]})";
    Reply none = exchange(e_, request("/v1/completions", "", body), kAnswerWait);
    add("no-token", "POST /v1/completions without a token", none, none.status == 401);
    Reply wrong = exchange(e_, request("/v1/completions", "attack-wrong-token", body), kAnswerWait);
    add("wrong-token", "POST /v1/completions with a wrong token", wrong, wrong.status == 401);
  }

  void malformed() {
    // What a careless client sends: wrong JSON types, nulls, numbers past every bound.
    const std::vector<std::pair<std::string, std::string>> bodies = {
        {"/v1/completions", R"({"session": 7})"},
        {"/v1/completions", R"({"session": null, "prompt": [1]})"},
        {"/v1/completions", R"({"session": ["a"], "prompt": "x"})"},
        {"/v1/completions", R"({"session": "x", "prompt": [1], "max_tokens": 1e300})"},
        {"/v1/completions", R"({"session": "x", "prompt": [1], "max_tokens": -5})"},
        {"/v1/completions",
         R"({"session": "x", "prompt": [1], "max_tokens": 18446744073709551615})"},
        {"/v1/completions", R"({"session": "x", "prompt": [1], "stop": [1, 2]})"},
        {"/v1/completions", R"({"session": "x", "prompt": [99999999999, -1]})"},
        {"/v1/chat/completions", R"({"session": "x", "messages": "hello"})"},
        {"/v1/chat/completions", R"({"session": "x", "messages": [{"role": 1}]})"},
        {"/v1/episodes/end", R"({"session": "x", "reward": "high"})"},
        {"/v1/episodes/end", R"({"session": {}, "reward": null})"},
        {"/v1/completions", R"([1, 2, 3])"},
        {"/v1/completions", R"({"session": "x", "prompt": [1)"},
        {"/v1/completions", std::string(200, '[')},
    };
    for (const auto& [path, body] : bodies) {
      Reply r = exchange(e_, request(path, token_, body), kAnswerWait);
      const std::string shown = body.size() > 60 ? body.substr(0, 57) + "..." : body;
      add("malformed", fmt::format("POST {} {}", path, shown), r,
          r.status >= 400 && r.status < 500);
    }
  }

  // A body past the bound: the client must read a 413, not a reset.
  void oversized() {
    auto fd = connect_to(e_);
    if (!fd.is_ok()) {
      report_.skip("agent oversized " + e_.name, fd.status().message());
      return;
    }
    const auto deadline = Clock::now() + kAnswerWait;
    std::string head = fmt::format(
        "POST /v1/completions HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer {}\r\n"
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        token_, kOversizedClaim);
    send_all(fd->get(), head.data(), head.size(), deadline);
    const std::string chunk(64 << 10, ' ');
    for (std::size_t sent = 0; sent < kOversizedSent; sent += chunk.size()) {
      if (!send_all(fd->get(), chunk.data(), chunk.size(), deadline)) break;
    }
    ::shutdown(fd->get(), SHUT_WR);
    Reply r = read_reply(fd->get(), deadline);
    add("oversized",
        fmt::format("a body of {} bytes claimed, {} sent", kOversizedClaim, kOversizedSent), r,
        r.status == 413);
  }

  // A body that arrives a byte at a time and never ends: the endpoint must close the connection
  // (rollout.agent.request_timeout_ms, 10 s by default) while answering others.
  void slow_body() {
    auto fd = connect_to(e_);
    if (!fd.is_ok()) {
      report_.skip("agent slow-body " + e_.name, fd.status().message());
      return;
    }
    const auto start = Clock::now();
    std::string head = fmt::format(
        "POST /v1/completions HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer {}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
        token_);
    Reply r;
    bool closed = !send_all(fd->get(), head.data(), head.size(), start + kAnswerWait);
    std::string alive_why = "not tried";
    bool alive_midway = false;
    while (!closed && Clock::now() - start < kCloseWait) {
      if (!send_all(fd->get(), " ", 1, Clock::now() + kAnswerWait)) {
        closed = true;
        break;
      }
      pollfd p{fd->get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(kDribble.count())) > 0) {
        r = read_reply(fd->get(), Clock::now() + kAnswerWait);
        closed = true;
        break;
      }
      // Meanwhile the endpoint answers others.
      if (!alive_midway && Clock::now() - start > 4 * kDribble) alive_midway = answers(alive_why);
    }
    const auto held =
        std::chrono::duration_cast<milliseconds>(Clock::now() - start).count() / 1000.0;
    r.closed = closed && r.status == 0;
    add("slow-body",
        fmt::format("a body of 100000 bytes sent a byte every {} ms", kDribble.count()), r,
        closed && alive_midway,
        fmt::format(" after {:.1f} s; a real request meanwhile: {}", held,
                    alive_midway ? "answered" : alive_why));
  }

  // More idle connections than the endpoint holds: a real request must still be answered.
  void idle_crowd() {
    std::vector<Fd> crowd;
    std::string error;
    for (int i = 0; i < kIdleConnections; ++i) {
      auto fd = connect_to(e_);
      if (!fd.is_ok()) {
        error = fd.status().message();
        break;
      }
      crowd.push_back(std::move(*fd));
    }
    std::string why;
    const bool alive = answers(why);
    Attempt a{"agent idle-crowd " + e_.name,
              fmt::format("{} idle connections held open, then a real request", crowd.size()),
              "a real request: " + why + (error.empty() ? "" : "; connecting stopped at " + error),
              alive ? Verdict::kRefused : Verdict::kBreach};
    report_.add(std::move(a));
  }

  Endpoint e_;
  std::string token_;
  Report& report_;
};

}  // namespace

void play_agent_endpoints(const std::string& run_dir, Report& report) {
  std::vector<Endpoint> endpoints;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir, ec)) {
    const std::string file = entry.path().filename().string();
    const std::string prefix = "agent-", suffix = ".url";
    if (file.rfind(prefix, 0) != 0 || file.size() <= prefix.size() + suffix.size() ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::ifstream f(entry.path());
    std::string url;
    std::getline(f, url);
    const std::string name =
        file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
    if (auto e = parse_url(name, url)) {
      endpoints.push_back(*e);
    } else {
      report.skip("agent endpoint " + name, fmt::format("{} holds no http://IPv4:PORT URL", file));
    }
  }
  if (endpoints.empty()) {
    report.skip("agent endpoints",
                "the job serves no agent endpoint (no agent-*.url in its run folder)");
    return;
  }
  std::ifstream tf(fs::path(run_dir) / "agent_token");
  std::string token;
  std::getline(tf, token);
  if (token.empty()) {
    report.skip("agent endpoints", "the run folder's agent_token is missing or empty");
    return;
  }
  for (const auto& e : endpoints)
    AgentAttacker(e, token, report).play();
}

}  // namespace sluice::cli::attack
