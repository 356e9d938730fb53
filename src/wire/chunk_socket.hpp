// Socket helpers both ends of a chunk stream use (wire/chunk_server.cpp, wire/chunk_client.cpp).
// Internal to src/wire.
//
// Thread safety: pure functions (errno_text reads this thread's errno).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace sluice::core::chunk_socket {

inline std::string errno_text() {
  return std::strerror(errno);
}

// A non-blocking socket call that found nothing to do now, or was interrupted: try again later.
inline bool would_block(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == EINTR;
}

// Requests and reply headers are small and pipelined: send each at once.
inline void set_nodelay(int fd) {
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace sluice::core::chunk_socket
