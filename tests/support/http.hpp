// A minimal HTTP/1.1 GET for tests (what curl would do against a role's /metrics), and a check
// that a body is Prometheus text exposition format 0.0.4.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

namespace sluice::testing {

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};

// GET `url` ("http://A.B.C.D:PORT/path"), waiting at most 5 s for the whole answer.
inline HttpReply http_get(const std::string& url) {
  HttpReply r;
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return r;
  std::string rest = url.substr(scheme.size());
  std::string hostport = rest.substr(0, rest.find('/'));
  std::string path = rest.find('/') == std::string::npos ? "/" : rest.substr(rest.find('/'));
  std::string host = hostport.substr(0, hostport.rfind(':'));
  int port = std::stoi(hostport.substr(hostport.rfind(':') + 1));
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  timeval tv{5, 0};
  ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return r;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: " + hostport + "\r\n\r\n";
  ::send(s, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(s, buf, sizeof buf, 0)) > 0)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(s);
  if (out.rfind("HTTP/1.1 ", 0) != 0 || out.size() < 12) return r;
  r.status = std::stoi(out.substr(9, 3));
  auto body = out.find("\r\n\r\n");
  if (body != std::string::npos) r.body = out.substr(body + 4);
  return r;
}

// "" when `text` is valid Prometheus text (HELP and TYPE comments, samples `name{labels} value`);
// otherwise the first offending line. (A hand-written check: <regex> trips GCC 12's
// maybe-uninitialized warning under ASan.)
inline std::string prometheus_text_error(const std::string& text) {
  auto name_at = [](const std::string& l, std::size_t& i) {
    auto first = [](char c) {
      return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
    };
    auto rest = [&](char c) { return first(c) || std::isdigit(static_cast<unsigned char>(c)); };
    if (i >= l.size() || !first(l[i])) return false;
    while (i < l.size() && rest(l[i]))
      ++i;
    return true;
  };
  auto value_ok = [](const std::string& v) {
    if (v == "+Inf" || v == "-Inf" || v == "Inf" || v == "NaN") return true;
    if (v.empty()) return false;
    char* end = nullptr;
    std::strtod(v.c_str(), &end);
    return end == v.c_str() + v.size();
  };
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::size_t i = 0;
    if (line.rfind("# HELP ", 0) == 0) {
      i = 7;
      if (!name_at(line, i) || (i < line.size() && line[i] != ' ')) return line;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      i = 7;
      if (!name_at(line, i) || i >= line.size() || line[i] != ' ') return line;
      std::string kind = line.substr(i + 1);
      if (kind != "counter" && kind != "gauge" && kind != "histogram" && kind != "summary" &&
          kind != "untyped") {
        return line;
      }
      continue;
    }
    if (!name_at(line, i)) return line;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        if (!name_at(line, i) || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
          return line;
        }
        i += 2;
        while (i < line.size() && line[i] != '"')
          i += line[i] == '\\' ? 2 : 1;
        if (i >= line.size()) return line;
        ++i;  // the closing quote
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return line;
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ' || !value_ok(line.substr(i + 1))) return line;
    ++samples;
  }
  return samples > 0 ? "" : "no samples";
}

}  // namespace sluice::testing
