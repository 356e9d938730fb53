#include "launch/executable.hpp"

#include <unistd.h>

namespace sluice::cli {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "sluice";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string find_emuhosts(const std::vector<std::string>& environment) {
  for (const auto& e : environment)
    if (e.rfind("SLUICE_EMUHOSTS=", 0) == 0) return e.substr(16);
  std::string exe = self_exe();
  std::string dir = exe.substr(0, exe.rfind('/'));
  for (const char* rel : {"/../scripts/emuhosts.sh", "/../../scripts/emuhosts.sh"}) {
    std::string p = dir + rel;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace sluice::cli
