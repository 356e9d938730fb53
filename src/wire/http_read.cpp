#include "wire/http_read.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace sluice::core {

bool read_available(int fd, std::string& pending, std::size_t limit, bool keep) {
  char buf[16384];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (keep) pending.append(buf, static_cast<std::size_t>(n));
      if (pending.size() > limit) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n == 0;
  }
}

}  // namespace sluice::core
