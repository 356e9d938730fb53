// Reading an HTTP request off a non-blocking socket, for the two small HTTP servers (/metrics in
// wire/metrics_http.cpp, the agent endpoint in rollout/agent_http.cpp): drain what the socket
// has, then feed it to a Boost.Beast request parser.
//
// Thread safety: none; the caller's loop thread.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <string>

namespace sluice::core {

// Reads everything the socket has now, appending it to `pending` while `keep` (else dropping
// it), and stops early once `pending` holds more than `limit` bytes. True when the peer closed
// its sending side.
bool read_available(int fd, std::string& pending, std::size_t limit, bool keep = true);

// Feeds `pending` to `parser` until the request is whole, more bytes are needed, or the parser
// fails; what the parser took is erased from `pending`. Returns the parser's error, none when it
// only needs more.
template <class Parser>
boost::beast::error_code feed_parser(Parser& parser, std::string& pending) {
  boost::beast::error_code ec;
  while (!pending.empty() && !parser.is_done()) {
    std::size_t used = parser.put(boost::asio::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == boost::beast::http::error::need_more) return {};
    if (ec || used == 0) break;
  }
  return ec;
}

}  // namespace sluice::core
