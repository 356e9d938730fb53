// A blocking HTTP client over loopback for the agent endpoint's tests, run on a thread of its own
// while the test's thread runs the event loop (the server's). Only plain functions: doctest's
// assertions stay on the test's thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <future>
#include <string>

#include "core/event_loop.hpp"

namespace sluice::testing {

struct HttpReply {
  int status = 0;  // 0: no answer (the connection was closed or reset first)
  nlohmann::json body;
  std::string raw;
};

// A socket connected to "http://HOST:PORT", reads timing out after 10 s; -1 on failure.
inline int connect_http(const std::string& url) {
  const std::string hp = url.substr(url.find("//") + 2);
  const std::string host = hp.substr(0, hp.rfind(':'));
  const int port = std::stoi(hp.substr(hp.rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{};
  tv.tv_sec = 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Everything the peer sends until it closes (or the read times out or fails).
inline std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

inline HttpReply parse_reply(std::string raw) {
  HttpReply r;
  r.raw = std::move(raw);
  if (r.raw.rfind("HTTP/1.1 ", 0) != 0 || r.raw.size() < 12) return r;
  r.status = std::stoi(r.raw.substr(9, 3));
  const auto at = r.raw.find("\r\n\r\n");
  if (at != std::string::npos) {
    r.body = nlohmann::json::parse(r.raw.substr(at + 4), nullptr, /*allow_exceptions=*/false);
  }
  return r;
}

// The header of a request with a body of `length` bytes (`token` empty: no Authorization).
inline std::string request_head(const std::string& path, std::size_t length,
                                const std::string& token) {
  std::string head =
      "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n";
  if (!token.empty()) head += "Authorization: Bearer " + token + "\r\n";
  return head + "Content-Length: " + std::to_string(length) + "\r\n\r\n";
}

// One request; its answer.
inline HttpReply http_post(const std::string& url, const std::string& path, const std::string& body,
                           const std::string& token) {
  const int fd = connect_http(url);
  if (fd < 0) return {};
  // What arrived is read even when sending failed: an early answer may be there.
  send_all(fd, request_head(path, body.size(), token) + body);
  HttpReply r = parse_reply(read_all(fd));
  ::close(fd);
  return r;
}

// Runs `loop` until `f` is ready (at most 20 s); whether it is.
template <typename T>
bool pump(core::EventLoop& loop, std::future<T>& f) {
  return loop.run_until(
      [&] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; },
      core::Millis(20000));
}

// Runs `loop` for `ms` milliseconds.
inline void pump_for(core::EventLoop& loop, int ms) {
  loop.run_until([] { return false; }, core::Millis(ms));
}

}  // namespace sluice::testing
