#include "wire/transport_choice.hpp"

#include <sys/stat.h>

#include <fstream>

namespace sluice::core {

namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::string> split_tls(const std::string& tls) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= tls.size()) {
    auto comma = tls.find(',', start);
    out.push_back(
        tls.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Whether `t` is one of UCX's shared-memory (or same-process) transports.
bool is_shm_transport(const std::string& t) {
  return t == "sm" || t == "shm" || t == "cma" || t == "mm" || t == "posix" || t == "sysv" ||
         t == "xpmem" || t == "knem" || t == "self";
}

bool device_transport(const std::string& t) {
  return t.rfind("cuda", 0) == 0 || t.rfind("rocm", 0) == 0;
}

}  // namespace

const std::string& local_host_id() {
  static const std::string id = [] {
    std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
    struct stat st {};
    std::string ipc = ::stat("/proc/self/ns/ipc", &st) == 0 ? std::to_string(st.st_ino) : "?";
    return boot + "/" + ipc;
  }();
  return id;
}

namespace ucx_tls {

bool shm_only(const std::string& tls) {
  if (tls == "default" || tls.empty() || tls[0] == '^') return false;
  for (const auto& t : split_tls(tls))
    if (!is_shm_transport(t)) return false;
  return true;
}

bool shm_allowed(const std::string& tls) {
  if (tls == "default" || tls.empty() || tls == "all") return true;
  bool negated = tls[0] == '^';
  bool named = false;
  for (const auto& t : split_tls(negated ? tls.substr(1) : tls))
    if (is_shm_transport(t) && t != "self" && t != "cma" && t != "knem") named = true;
  return negated ? !named : named;
}

bool tcp_allowed(const std::string& tls) {
  if (tls == "default" || tls.empty() || tls == "all") return true;
  bool negated = tls[0] == '^';
  bool named = false;
  for (const auto& t : split_tls(negated ? tls.substr(1) : tls))
    if (t == "tcp") named = true;
  return negated ? !named : named;
}

std::string without_tcp(const std::string& tls) {
  if (tls == "default" || tls.empty() || tls == "all") return "^tcp";
  if (tls[0] == '^') {
    for (const auto& t : split_tls(tls.substr(1)))
      if (t == "tcp") return tls;
    return tls + ",tcp";
  }
  std::string out;
  for (const auto& t : split_tls(tls))
    if (t != "tcp" && !t.empty()) out += (out.empty() ? "" : ",") + t;
  return out.empty() ? "self" : out;
}

bool event_capable(const std::string& tls) {
  if (tls == "default" || tls.empty() || tls[0] == '^') return false;
  for (const auto& t : split_tls(tls))
    if (t == "all" || (is_shm_transport(t) && t != "self")) return false;
  return true;
}

bool network_rdma(const std::vector<std::string>& transports) {
  for (const auto& t : transports)
    if (t != "self" && t != "tcp" && !is_shm_transport(t) && !device_transport(t)) return true;
  return false;
}

bool any_network(const std::vector<std::string>& transports) {
  for (const auto& t : transports)
    if (t != "self" && !is_shm_transport(t) && !device_transport(t)) return true;
  return false;
}

}  // namespace ucx_tls
}  // namespace sluice::core
