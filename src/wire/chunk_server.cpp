// The holder's end of chunk streams (wire/chunk_stream.hpp): ChunkServer, which serves
// exposed memory to readers over clear or encrypted connections, within ChunkServerOptions.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "core/log.hpp"
#include "wire/chunk_socket.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/security.hpp"
#include "wire/stream_header.hpp"

namespace sluice::core {

namespace {

using namespace chunk_wire;
using chunk_socket::errno_text;
using chunk_socket::set_nodelay;
using chunk_socket::would_block;
// Replies queued per connection before the server stops reading that connection's requests
// (readers keep ReadOptions::max_in_flight_per_source, 8 by default, in flight).
constexpr std::size_t kMaxQueuedReplies = 64;
// The largest unit a holder reads whole: a record of requests, with its header and tag.
constexpr std::size_t kMaxInBytes =
    kMaxRequestsPerRecord * kRequestBytes + stream_crypto::kRecordOverhead;
static_assert(kMaxInBytes >= stream_crypto::kHelloBytes);
static_assert(stream_header::kMagicBytes <= kRequestBytes);

struct Region {
  const std::uint8_t* data = nullptr;
  std::uint64_t size = 0;
};

struct Reply {
  std::uint8_t header[kReplyBytes];
  const std::uint8_t* data = nullptr;
  std::uint64_t length = 0;  // payload bytes
  std::string token;         // the region the payload comes from (empty: none)
  std::uint64_t sent = 0;    // of header and payload together
};

// A warning that repeats under attack (a full descriptor table, a peer over its cap): logged at
// most once per interval, with the number of times it happened since the last one.
struct RateLimitedWarning {
  Clock::time_point last{};
  std::uint64_t suppressed = 0;
  bool ever = false;

  template <typename... Args>
  void warn(Clock::duration interval, fmt::format_string<Args...> f, Args&&... args) {
    const auto now = Clock::now();
    if (ever && now - last < interval) {
      ++suppressed;
      return;
    }
    std::string text = fmt::format(f, std::forward<Args>(args)...);
    if (suppressed > 0) text += fmt::format(" ({} more since the last warning)", suppressed);
    log::warn("{}", text);
    last = now;
    suppressed = 0;
    ever = true;
  }
};

}  // namespace

Status ChunkServerOptions::validate() const {
  if (max_connections == 0 || max_connections_per_peer == 0)
    return invalid_argument("chunk server: max_connections and max_connections_per_peer are >= 1");
  if (idle_timeout_ms == 0 || request_timeout_ms == 0 || accept_backoff_ms == 0 ||
      warn_interval_ms == 0)
    return invalid_argument("chunk server: timeouts and intervals are >= 1 ms");
  if (requests_per_turn == 0 || bytes_per_turn == 0 || accepts_per_turn == 0)
    return invalid_argument("chunk server: the per-turn budgets are >= 1");
  return Status();
}

struct ChunkServer::Impl {
  Impl(EventLoop& l, ChunkServerOptions o) : loop(l), opt(std::move(o)) {}
  EventLoop& loop;
  ChunkServerOptions opt;
  StreamCrypto crypto = StreamCrypto::kClear;
  std::shared_ptr<const StreamKeys> keys;  // set unless crypto is kClear
  int listen_fd = -1;
  std::unique_ptr<EventLoop::FdWatch> accept_watch;
  std::unique_ptr<EventLoop::Timer> accept_resume;  // set while accepting is paused
  bool accept_scheduled = false;                    // a continuation of on_accept is posted
  std::unique_ptr<EventLoop::Timer> sweep_timer;
  std::vector<std::string> addresses;
  std::map<std::string, Region> regions;
  Stats stats;
  RateLimitedWarning accept_warning, cap_warning;
  // Destroyed first: a posted continuation that runs after the server is gone does nothing.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  struct Conn {
    int fd = -1;
    std::uint64_t serial = 0;
    std::string peer;  // ip:port
    std::string ip;
    std::unique_ptr<EventLoop::FdWatch> read_watch;
    std::unique_ptr<EventLoop::FdWatch> write_wait;
    // What the connection is: its first 4 bytes say clear ("SLCQ") or encrypted ("SLCH").
    enum class Phase { kStart, kClear, kHello, kSecure, kClosing };
    Phase phase = Phase::kStart;
    // The unit being read (the first bytes, a request, the hello, a record): in_need bytes.
    std::uint8_t in[kMaxInBytes];
    std::size_t in_have = 0;
    std::size_t in_need = stream_header::kMagicBytes;
    std::size_t record_length = 0;  // encrypted: the record's plaintext bytes (0: its header next)
    std::unique_ptr<stream_crypto::RecordCipher> rx, tx;
    // Encrypted: requests decrypted from the last record and not yet taken (at most one
    // record's: the next record is read only once these are taken).
    std::uint8_t plain[kMaxRequestsPerRecord * kRequestBytes];
    std::size_t plain_have = 0, plain_at = 0;
    // Bytes to send before any reply: the accept, a refusal, a sealed record.
    std::vector<std::uint8_t> wire;
    std::size_t wire_sent = 0;
    bool shut = false;  // closing: the refusal is sent and the write side shut
    std::deque<Reply> out;
    // The socket may hold requests not yet read (readiness is edge-triggered: once it said
    // readable, only a recv that would block says the socket is drained).
    bool unread = true;
    bool scheduled = false;             // a continuation of pump() is posted
    bool dropped_now = false;           // drop() ran for it (it lives until a later turn)
    Clock::time_point last_progress;    // a byte received or sent
    Clock::time_point request_started;  // the first byte of the partial request in `in`
    std::uint64_t refused = 0;          // requests refused on this connection
    std::uint64_t served = 0;           // requests answered with bytes
    ~Conn() {
      write_wait.reset();
      read_watch.reset();
      if (fd >= 0) ::close(fd);
    }
  };
  std::map<Conn*, std::unique_ptr<Conn>> conns;
  std::map<std::string, std::uint32_t> per_peer;  // open connections by peer ip
  std::uint64_t next_serial = 1;

  ~Impl() { *alive = false; }

  void drop(Conn* c, bool lost) {
    if (lost) ++stats.connections_lost;
    auto it = conns.find(c);
    if (it == conns.end()) return;
    auto peer = per_peer.find(c->ip);
    if (peer != per_peer.end() && --peer->second == 0) per_peer.erase(peer);
    // The watch that called us is destroyed with the connection; its callback does not run
    // again. Destroy on a later turn: we may be inside that callback now.
    std::shared_ptr<Conn> dying(std::move(it->second));
    conns.erase(it);
    dying->read_watch.reset();
    dying->write_wait.reset();
    ::shutdown(dying->fd, SHUT_RDWR);
    loop.post([dying] {});
  }

  // Runs fn on a later loop turn, unless the server or (with c) that connection is gone by then.
  void later(Conn* c, std::function<void(Conn*)> fn) {
    std::weak_ptr<bool> a = alive;
    const std::uint64_t serial = c->serial;
    loop.post([this, a, c, serial, fn = std::move(fn)] {
      if (a.expired()) return;
      auto it = conns.find(c);
      if (it != conns.end() && c->serial == serial) fn(c);
    });
  }

  // A descriptor table that is full (ours or the system's) or memory that ran out: accept would
  // fail at once for every queued connection and, edge-triggered, again on every new one, so
  // stop accepting for a while instead (the loop spun at about 150k warnings per
  // second, and the process could no longer open files).
  static bool out_of_resources(int e) {
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
  }

  void pause_accepting(int e) {
    ++stats.accept_pauses;
    accept_warning.warn(Millis(opt.warn_interval_ms),
                        "chunk server: accept: {}; not accepting for {} ms", std::strerror(e),
                        opt.accept_backoff_ms);
    accept_watch.reset();
    accept_resume = loop.after(Millis(opt.accept_backoff_ms), [this] {
      accept_resume.reset();
      accept_watch = loop.watch_readable(listen_fd, [this] { on_accept(); });
      on_accept();  // what queued while paused (edge-triggered: nothing else says it is there)
    });
  }

  void on_accept() {
    if (accept_resume) return;  // paused
    for (std::uint32_t n = 0; n < opt.accepts_per_turn; ++n) {
      sockaddr_in addr{};
      socklen_t len = sizeof addr;
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        const int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK) return;
        if (e == ECONNABORTED || e == EINTR || e == EPROTO) continue;
        if (out_of_resources(e)) return pause_accepting(e);
        accept_warning.warn(Millis(opt.warn_interval_ms), "chunk server: accept: {}",
                            std::strerror(e));
        return;
      }
      char ip[INET_ADDRSTRLEN] = "?";
      ::inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip);
      admit(fd, ip, ntohs(addr.sin_port));
    }
    // Budget spent: the rest on a later turn, after timers and other connections.
    if (accept_scheduled) return;
    accept_scheduled = true;
    std::weak_ptr<bool> a = alive;
    loop.post([this, a] {
      if (a.expired()) return;
      accept_scheduled = false;
      on_accept();
    });
  }

  // The connection to close to admit another: the one that has moved nothing for longest and has
  // nothing in progress; else one that has only ever been refused (a request of it may be under
  // way: a client that keeps one bad request in progress at all times is never idle, and could
  // otherwise hold a place for as long as its refusals last). Null when every connection is
  // busy and has been served.
  Conn* idlest() {
    Conn* best = nullptr;
    Conn* refused_only = nullptr;
    for (auto& [raw, c] : conns) {
      if (c->phase == Conn::Phase::kClosing) continue;
      if (c->out.empty() && c->in_have == 0 && c->wire_sent == c->wire.size() &&
          c->plain_at == c->plain_have && (!best || c->last_progress < best->last_progress))
        best = raw;
      if (c->refused > 0 && c->served == 0 && (!refused_only || c->refused > refused_only->refused))
        refused_only = raw;
    }
    return best ? best : refused_only;
  }

  void admit(int fd, const std::string& ip, std::uint16_t port) {
    std::uint32_t& from_peer = per_peer[ip];
    if (from_peer >= opt.max_connections_per_peer) {
      if (from_peer == 0) per_peer.erase(ip);
      ::close(fd);
      ++stats.connections_refused;
      cap_warning.warn(Millis(opt.warn_interval_ms),
                       "chunk server: {} has {} connections open, its most: refused another", ip,
                       opt.max_connections_per_peer);
      return;
    }
    if (conns.size() >= opt.max_connections) {
      // Full: make room by closing the idlest connection, so that idle connections cannot
      // keep out a reader with work; with none idle, the newcomer waits its turn.
      Conn* victim = idlest();
      if (!victim) {
        if (from_peer == 0) per_peer.erase(ip);
        ::close(fd);
        ++stats.connections_refused;
        cap_warning.warn(Millis(opt.warn_interval_ms),
                         "chunk server: {} connections open, its most, none idle: refused {}",
                         opt.max_connections, ip);
        return;
      }
      ++stats.connections_timed_out;
      log::debug("chunk server: closing idle {} to admit {}", victim->peer, ip);
      drop(victim, false);
    }
    set_nodelay(fd);
    ++per_peer[ip];
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->serial = next_serial++;
    c->ip = ip;
    c->peer = ip + ":" + std::to_string(port);
    c->last_progress = Clock::now();
    Conn* raw = c.get();
    conns.emplace(raw, std::move(c));
    watch(raw);
    later(raw, [this](Conn* c2) { pump(c2); });  // anything that arrived before the watch
  }

  // Watches the connection for requests. Readiness is re-reported while unread bytes remain
  // (the loop re-arms its epoll registration on every wait), so a connection whose replies are
  // not being taken is not watched at all until they are: else the loop would spin on it.
  void watch(Conn* c) {
    c->read_watch = loop.watch_readable(c->fd, [this, c] {
      c->unread = true;
      pump(c);
    });
  }

  // Drops connections past their idle or request timeout (a loop timer).
  void sweep() {
    const auto now = Clock::now();
    std::vector<Conn*> doomed;
    for (auto& [raw, c] : conns) {
      // A partial unit (request, hello, record), or a refused connection that lingers.
      const bool pending = c->in_have > 0 || c->phase == Conn::Phase::kClosing;
      if (pending && now - c->request_started > Millis(opt.request_timeout_ms)) {
        log::debug("chunk server: {} sent part of a request and not the rest within {} ms: closed",
                   c->peer, opt.request_timeout_ms);
        doomed.push_back(raw);
      } else if (now - c->last_progress > Millis(opt.idle_timeout_ms)) {
        log::debug("chunk server: {} moved nothing for {} ms: closed", c->peer,
                   opt.idle_timeout_ms);
        doomed.push_back(raw);
      }
    }
    for (Conn* c : doomed) {
      ++stats.connections_timed_out;
      drop(c, false);
    }
  }

  // The one place a connection's work happens, from its read watch, its write wait and its own
  // continuation: writes queued replies, then reads requests while there is room for their
  // replies, within a budget of requests and bytes per call. What the budget leaves is taken up
  // on a later loop turn (posted), so one connection cannot hold the loop, and nothing here
  // calls back into itself.
  void pump(Conn* c) {
    std::uint32_t requests = 0;
    std::uint64_t bytes = 0;
    for (;;) {
      if (!write_some(c, bytes)) return;  // dropped
      // Read, while there is room for the replies.
      bool queued = false;
      while (readable(c) && c->out.size() < kMaxQueuedReplies && requests < opt.requests_per_turn) {
        // Requests decrypted from the last record come before the socket's next bytes.
        if (c->plain_at < c->plain_have) {
          const std::uint8_t* request = c->plain + c->plain_at;
          c->plain_at += kRequestBytes;
          ++requests;
          if (!queue_reply(c, request)) return;  // dropped
          queued = true;
          continue;
        }
        std::uint8_t discard[512];
        const bool closing = c->phase == Conn::Phase::kClosing;
        ssize_t n = closing ? ::recv(c->fd, discard, sizeof discard, 0)
                            : ::recv(c->fd, c->in + c->in_have, c->in_need - c->in_have, 0);
        if (n == 0) return drop(c, !closing && (!c->out.empty() || c->in_have > 0));
        if (n < 0) {
          if (errno == EINTR) continue;
          if (!would_block(errno)) return drop(c, !closing);
          c->unread = false;
          break;
        }
        if (closing) {
          ++requests;  // bounds the bytes thrown away per turn
          continue;
        }
        c->last_progress = Clock::now();
        if (c->in_have == 0) c->request_started = c->last_progress;
        c->in_have += static_cast<std::size_t>(n);
        if (c->in_have < c->in_need) continue;
        const Unit u = take_unit(c);
        if (u == Unit::kDropped) return;
        if (u == Unit::kRequest) {
          ++requests;
          queued = true;
        }
        if (u == Unit::kSent) queued = true;  // bytes to write: go round again
      }
      if (!queued || requests >= opt.requests_per_turn || bytes >= opt.bytes_per_turn) break;
    }
    const bool full = c->out.size() >= kMaxQueuedReplies;
    if (full && c->read_watch) {
      c->read_watch.reset();  // may be the watch that called us: it does not run again
    } else if (!full && !c->read_watch) {
      watch(c);
      c->unread = true;  // what arrived while unwatched
    }
    const bool more_to_read = readable(c) && !full;
    const bool more_to_write = (!c->out.empty() || c->wire_sent < c->wire.size()) && !c->write_wait;
    if ((more_to_read || more_to_write) && !c->scheduled) {
      c->scheduled = true;
      later(c, [this](Conn* c2) {
        c2->scheduled = false;
        pump(c2);
      });
    }
  }

  static bool readable(const Conn* c) { return c->unread || c->plain_at < c->plain_have; }

  // Writes what the connection owes within the turn's byte budget: raw bytes first (the accept,
  // a refusal, a sealed record), then replies (sealed record by record on an encrypted
  // connection). False when the connection was dropped.
  bool write_some(Conn* c, std::uint64_t& bytes) {
    while (!c->write_wait && bytes < opt.bytes_per_turn) {
      if (c->wire_sent < c->wire.size()) {
        ssize_t n = ::send(c->fd, c->wire.data() + c->wire_sent, c->wire.size() - c->wire_sent,
                           MSG_NOSIGNAL);
        if (!sent(c, n, bytes)) return !c->dropped_now;
        c->wire_sent += static_cast<std::size_t>(n);
        continue;
      }
      if (c->phase == Conn::Phase::kClosing) {
        // The refusal is out: no more to say. The reader closes on reading it (its bytes are
        // read and dropped until then, and the request timeout bounds the wait).
        if (!c->shut) ::shutdown(c->fd, SHUT_WR);
        c->shut = true;
        return true;
      }
      if (c->out.empty()) return true;
      if (c->phase == Conn::Phase::kSecure) {
        seal_next(c);
        continue;
      }
      Reply& rep = c->out.front();
      iovec iov[2];
      int n_iov = 0;
      if (rep.sent < kReplyBytes) {
        iov[n_iov++] = {rep.header + rep.sent, kReplyBytes - rep.sent};
        if (rep.length > 0) iov[n_iov++] = {const_cast<std::uint8_t*>(rep.data), rep.length};
      } else {
        std::uint64_t at = rep.sent - kReplyBytes;
        iov[n_iov++] = {const_cast<std::uint8_t*>(rep.data + at), rep.length - at};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<std::size_t>(n_iov);
      // MSG_NOSIGNAL: a reader that died is EPIPE here, not a SIGPIPE that ends the holder.
      ssize_t n = ::sendmsg(c->fd, &mh, MSG_NOSIGNAL);
      if (!sent(c, n, bytes)) return !c->dropped_now;
      rep.sent += static_cast<std::uint64_t>(n);
      if (rep.sent == kReplyBytes + rep.length) c->out.pop_front();
    }
    return true;
  }

  // Accounts for a send's result. False when nothing was sent: the socket is full (a write wait
  // is set) or failed (the connection is dropped and dropped_now set).
  bool sent(Conn* c, ssize_t n, std::uint64_t& bytes) {
    if (n < 0) {
      if (!would_block(errno)) {
        c->dropped_now = true;
        drop(c, true);
        return false;
      }
      c->write_wait = loop.wait_writable(c->fd, [this, c] {
        c->write_wait.reset();
        pump(c);
      });
      return false;
    }
    bytes += static_cast<std::uint64_t>(n);
    stats.bytes += static_cast<std::uint64_t>(n);
    c->last_progress = Clock::now();
    return true;
  }

  // Seals the next record of the oldest reply into c->wire: its header and the first part of its
  // payload, or the next part of its payload (straight from the region, not copied first).
  void seal_next(Conn* c) {
    using namespace stream_crypto;
    Reply& rep = c->out.front();
    const std::uint64_t total = kReplyBytes + rep.length;
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(total - rep.sent, kMaxRecordBytes));
    c->wire.resize(n + kRecordOverhead);
    c->wire_sent = 0;
    std::uint8_t* body = c->wire.data() + kRecordHeaderBytes;
    if (rep.sent == 0) {
      std::memcpy(body, rep.header, kReplyBytes);
      if (n > kReplyBytes) std::memcpy(body + kReplyBytes, rep.data, n - kReplyBytes);
      c->tx->seal(body, n, c->wire.data());
    } else {
      c->tx->seal(rep.data + (rep.sent - kReplyBytes), n, c->wire.data());
    }
    rep.sent += n;
    if (rep.sent == total) c->out.pop_front();
  }

  enum class Unit { kDropped, kRequest, kSent, kNone };

  // A whole unit is in c->in (c->in_need bytes): decides what the connection is from its first
  // bytes, takes a clear request, the hello, or a record.
  Unit take_unit(Conn* c) {
    using namespace stream_crypto;
    using Phase = Conn::Phase;
    switch (c->phase) {
      case Phase::kStart:
        if (stream_header::starts_with(c->in, stream_header::kRequestMagic)) {
          c->phase = Phase::kClear;
          c->in_need = kRequestBytes;
        } else if (stream_header::starts_with(c->in, stream_header::kHelloMagic)) {
          c->phase = Phase::kHello;
          c->in_need = kHelloBytes;
        } else {
          return malformed(c, "neither a request nor a hello");
        }
        return Unit::kNone;
      case Phase::kClear:
        c->in_have = 0;
        if (crypto == StreamCrypto::kEncrypted) return refuse_clear(c);
        return queue_reply(c, c->in) ? Unit::kRequest : Unit::kDropped;
      case Phase::kHello:
        c->in_have = 0;
        return handshake(c);
      case Phase::kSecure:
        if (c->record_length == 0) {
          auto n = decode_record_header(c->in, kMaxRequestsPerRecord * kRequestBytes);
          if (!n.is_ok() || *n % kRequestBytes != 0)
            return malformed(c, "a record that is not 1 to 64 whole requests");
          c->record_length = *n;
          c->in_need = kRecordHeaderBytes + *n + kTagBytes;
          return Unit::kNone;
        }
        {
          const std::size_t n = c->record_length;
          c->in_have = 0;
          c->in_need = kRecordHeaderBytes;
          c->record_length = 0;
          const std::uint8_t* body = c->in + kRecordHeaderBytes;
          if (auto st = c->rx->open(body, n, body + n, c->plain); !st.is_ok()) {
            ++stats.records_refused;
            count_refusal("malformed", "chunk stream " + c->ip,
                          "a record that failed its authentication tag: connection closed");
            drop(c, false);
            return Unit::kDropped;
          }
          c->plain_have = n;
          c->plain_at = 0;
        }
        return Unit::kNone;
      case Phase::kClosing:
        break;
    }
    return Unit::kNone;
  }

  Unit malformed(Conn* c, const std::string& what) {
    ++stats.refused;
    if (c->phase == Conn::Phase::kSecure) ++stats.records_refused;
    count_refusal("malformed", "chunk stream " + c->ip, what + ": connection closed");
    drop(c, false);
    return Unit::kDropped;
  }

  // Says why, then closes: what `bytes` holds goes out first (see write_some()).
  Unit close_after(Conn* c, const std::uint8_t* bytes, std::size_t n) {
    ++stats.handshakes_refused;
    c->wire.assign(bytes, bytes + n);
    c->wire_sent = 0;
    c->phase = Conn::Phase::kClosing;
    c->out.clear();
    c->request_started = Clock::now();
    return Unit::kSent;
  }

  Unit refuse_clear(Conn* c) {
    count_refusal("unauthenticated", "chunk stream " + c->ip,
                  "a clear request to a holder that serves encrypted streams only");
    auto req = decode_request(c->in, kRequestBytes);
    ReplyHeader h;
    h.status = kEncryptionRequired;
    h.id = req.is_ok() ? req->id : 0;
    std::uint8_t out[kReplyBytes];
    encode_reply_header(h, out);
    return close_after(c, out, sizeof out);
  }

  // The reader's hello: accepts a member that may read, with a cipher both ends run, and agrees
  // the connection's keys; else says why and closes.
  Unit handshake(Conn* c) {
    using namespace stream_crypto;
    auto hello = decode_hello(c->in, kHelloBytes);
    if (!hello.is_ok()) return malformed(c, "a malformed hello");
    Accept a;
    if (crypto == StreamCrypto::kClear) {
      // A reader set to encrypt meets a holder set not to: a setting, not an attack. The reader
      // is told why; the holder counts it (handshakes_refused).
      a.status = kClearOnly;
      log::debug("chunk server: {} sent a hello, and this holder serves clear streams only",
                 c->peer);
    } else if (!keys->reader(hello->static_key)) {
      a.status = kNotMember;
      count_refusal("unauthenticated", "chunk stream " + c->ip,
                    "a hello from a key that is no member allowed to read");
    } else if ((a.suite = choose_suite(hello->suites)) == 0) {
      a.status = kNoCommonSuite;
    }
    std::uint8_t accept[kAcceptBytes];
    if (a.status != kAccepted) {
      a.suite = 0;
      encode_accept(a, accept);
      return close_after(c, accept, sizeof accept);
    }
    auto eph = make_ephemeral();
    if (!eph.is_ok() || !fill_random(a.random.data(), a.random.size()).is_ok())
      return malformed(c, "no randomness for a handshake");
    a.static_key = keys->public_key;
    a.ephemeral_key = eph->public_key;
    encode_accept(a, accept);
    auto k = derive_keys(c->in, accept, keys->secret_key, hello->static_key, eph->secret_key,
                         hello->ephemeral_key);
    sodium_memzero(eph->secret_key.data(), eph->secret_key.size());
    if (!k.is_ok()) return malformed(c, k.status().message());
    c->rx = std::make_unique<RecordCipher>(a.suite, k->reader_to_holder);
    c->tx = std::make_unique<RecordCipher>(a.suite, k->holder_to_reader);
    sodium_memzero(&*k, sizeof(SessionKeys));
    c->wire.assign(accept, accept + kAcceptBytes);
    c->wire_sent = 0;
    c->phase = Conn::Phase::kSecure;
    c->in_need = kRecordHeaderBytes;
    ++stats.handshakes;
    return Unit::kSent;
  }

  // Answers the request (kRequestBytes at `request`). False when the connection was dropped (a
  // malformed request, or too many refused).
  bool queue_reply(Conn* c, const std::uint8_t* request) {
    auto req = decode_request(request, kRequestBytes);
    if (!req.is_ok()) {
      ++stats.refused;
      count_refusal("malformed", "chunk stream " + c->ip,
                    "a request with a bad magic or version: connection closed");
      drop(c, false);
      return false;
    }
    ++stats.requests;
    Reply rep;
    ReplyHeader h;
    h.id = req->id;
    auto it = regions.find(req->token);
    if (it == regions.end()) {
      h.status = kUnknownRegion;
    } else if (!range_inside(it->second.size, req->offset, req->length)) {
      h.status = kOutOfRange;
    }
    if (h.status != kOk) {
      // A reader with a plan from before a copy was withdrawn asks for a token that is gone, so
      // this is not always hostile; counted all the same, and logged once per peer. Such a
      // reader sends a few (its requests in flight); a connection that keeps asking is closed.
      ++stats.refused;
      count_refusal(h.status == kUnknownRegion ? "unknown_region" : "range",
                    "chunk stream " + c->ip,
                    h.status == kUnknownRegion ? "a request for a region this holder does not serve"
                                               : "a range outside the region");
      if (++c->refused > opt.max_refused_per_connection) {
        log::debug("chunk server: {} had {} requests refused: closed", c->peer, c->refused);
        drop(c, false);
        return false;
      }
    } else {
      ++c->served;
      h.length = req->length;
      rep.data = it->second.data + req->offset;
      rep.length = req->length;
      rep.token = std::move(req->token);
    }
    encode_reply_header(h, rep.header);
    c->out.push_back(std::move(rep));
    return true;
  }
};

namespace {

// The IPv4 address of this host's interface that sends toward `ip` (a UDP connect routes
// without sending anything), or nothing when no route leads there.
std::optional<std::string> local_address_toward(const in_addr& ip, std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr = ip;
  to.sin_port = htons(port == 0 ? 9 : port);
  std::optional<std::string> out;
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) out = text;
  }
  ::close(fd);
  return out;
}

}  // namespace

Result<std::string> chunk_server_host(const std::string& configured, const std::string& reach) {
  if (configured != "auto") return configured;
  if (!reach.empty()) {
    // "tcp://host:port", "host:port" or "host".
    std::string rest = reach;
    if (auto scheme = rest.find("://"); scheme != std::string::npos) rest = rest.substr(scheme + 3);
    std::string host = rest;
    std::uint16_t port = 0;
    if (auto colon = rest.rfind(':'); colon != std::string::npos) {
      host = rest.substr(0, colon);
      port = static_cast<std::uint16_t>(std::strtoul(rest.c_str() + colon + 1, nullptr, 10));
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (host.empty() || host == "*" || ::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
      return invalid_argument("chunk server: cannot tell where '" + reach +
                              "' is, to bind toward it: set stream_host");
    const in_addr ip = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    ::freeaddrinfo(found);
    if ((ntohl(ip.s_addr) >> 24) == 127) return std::string("127.0.0.1");  // all is local
    if (auto local = local_address_toward(ip, port)) return *local;
    return unavailable("chunk server: no route toward '" + reach + "' to bind on");
  }
  // No endpoint to go by: the interface of the default route (192.0.2.1 is TEST-NET-1, never
  // sent to), else loopback.
  in_addr probe{};
  ::inet_pton(AF_INET, "192.0.2.1", &probe);
  if (auto local = local_address_toward(probe, 9)) return *local;
  return std::string("127.0.0.1");
}

ChunkServer::ChunkServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ChunkServer::~ChunkServer() {
  *impl_->alive = false;
  impl_->sweep_timer.reset();
  impl_->accept_resume.reset();
  impl_->conns.clear();
  impl_->accept_watch.reset();
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
}

Result<std::unique_ptr<ChunkServer>> ChunkServer::create(EventLoop& loop, const std::string& host,
                                                         ChunkServerOptions opts,
                                                         StreamCrypto crypto,
                                                         std::shared_ptr<const StreamKeys> keys) {
  SLUICE_TRY(opts.validate());
  if (crypto != StreamCrypto::kClear && !keys)
    return invalid_argument("chunk server: encrypted streams need this process's keys");
  auto impl = std::make_unique<Impl>(loop, std::move(opts));
  impl->crypto = crypto;
  impl->keys = std::move(keys);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
    return invalid_argument("chunk server: '" + host + "' is not an IPv4 address");
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return unavailable("chunk server: socket: " + errno_text());
  impl->listen_fd = fd;
  std::unique_ptr<ChunkServer> server(new ChunkServer(std::move(impl)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return unavailable("chunk server: bind " + host + ": " + errno_text());
  if (::listen(fd, 128) != 0) return unavailable("chunk server: listen: " + errno_text());
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return unavailable("chunk server: getsockname: " + errno_text());
  const std::string port = std::to_string(ntohs(addr.sin_port));
  auto& addrs = server->impl_->addresses;
  if (host != "0.0.0.0") {
    addrs.push_back(host + ":" + port);
  } else {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return unavailable("chunk server: getifaddrs: " + errno_text());
    std::vector<std::string> loopback;
    std::set<std::string> seen;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      char ip[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if (!::inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip) || !seen.insert(ip).second) continue;
      ((i->ifa_flags & IFF_LOOPBACK) ? loopback : addrs).push_back(std::string(ip) + ":" + port);
    }
    ::freeifaddrs(list);
    addrs.insert(addrs.end(), loopback.begin(), loopback.end());
    // A reader tries these in order; a descriptor carries at most a few of them.
    if (addrs.size() > 8) addrs.resize(8);
  }
  if (addrs.empty()) return unavailable("chunk server: no IPv4 interface is up");
  Impl* raw = server->impl_.get();
  raw->accept_watch = loop.watch_readable(fd, [raw] { raw->on_accept(); });
  // Timeouts are checked a few times per the shorter of the two (at most once a second).
  constexpr Millis kSweepMin{5}, kSweepMax{1000};
  const Millis shorter(std::min(raw->opt.idle_timeout_ms, raw->opt.request_timeout_ms));
  const Millis period = std::clamp(shorter / 4, kSweepMin, kSweepMax);
  raw->sweep_timer = loop.every(period, [raw] { raw->sweep(); });
  log::debug("chunk server: listening on {}", addrs.front());
  return server;
}

StreamCrypto ChunkServer::crypto() const {
  return impl_->crypto;
}

const std::vector<std::string>& ChunkServer::addresses() const {
  return impl_->addresses;
}

Result<std::string> ChunkServer::expose(const std::uint8_t* data, std::uint64_t size) {
  if (!data || size == 0) return invalid_argument("chunk server: cannot expose empty memory");
  std::string token(kStreamTokenBytes, '\0');
  std::size_t got = 0;
  while (got < token.size()) {
    ssize_t n = ::getrandom(token.data() + got, token.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return internal_error("chunk server: getrandom: " + errno_text());
    }
    got += static_cast<std::size_t>(n);
  }
  impl_->regions[token] = Region{data, size};
  return token;
}

void ChunkServer::withdraw(const std::string& token) {
  if (impl_->regions.erase(token) == 0) return;
  std::vector<Impl::Conn*> doomed;
  for (auto& [raw, c] : impl_->conns)
    for (const auto& rep : c->out)
      if (rep.token == token) {
        doomed.push_back(raw);
        break;
      }
  for (auto* c : doomed) {
    log::debug("chunk server: closing {}: its reply's memory was withdrawn", c->peer);
    impl_->drop(c, false);
  }
}

ChunkServer::Stats ChunkServer::stats() const {
  Stats s = impl_->stats;
  s.connections = impl_->conns.size();
  return s;
}

}  // namespace sluice::core
