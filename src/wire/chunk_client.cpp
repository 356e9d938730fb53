// The reader's end of a chunk stream (wire/chunk_stream.hpp): ChunkStream, one connection to
// one holder with its gets pipelined, clear or encrypted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

#include "wire/chunk_socket.hpp"
#include "wire/chunk_stream.hpp"

namespace sluice::core {

namespace {

using namespace chunk_wire;
using chunk_socket::errno_text;
using chunk_socket::set_nodelay;
using chunk_socket::would_block;
// Requests a reader may have sent and not yet had answered; more wait in its own queue.
constexpr std::size_t kMaxReaderPipeline = 64;
static_assert(kMaxReaderPipeline == kMaxRequestsPerRecord);

Result<std::pair<std::string, std::uint16_t>> split_address(const std::string& a) {
  auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size())
    return invalid_argument("chunk stream address '" + a + "' is not ip:port");
  unsigned long port = 0;
  for (std::size_t i = colon + 1; i < a.size(); ++i) {
    if (a[i] < '0' || a[i] > '9' || port > 65535)
      return invalid_argument("chunk stream address '" + a + "' has a bad port");
    port = port * 10 + static_cast<unsigned long>(a[i] - '0');
  }
  if (port == 0 || port > 65535)
    return invalid_argument("chunk stream address '" + a + "' has a bad port");
  return std::make_pair(a.substr(0, colon), static_cast<std::uint16_t>(port));
}

struct Get {
  std::uint64_t id = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint8_t* dst = nullptr;
  ChunkStream::Done done;
};

}  // namespace

struct ChunkStream::Impl {
  explicit Impl(EventLoop& l) : loop(l) {}
  EventLoop& loop;
  std::vector<std::string> addresses;
  std::size_t next_address = 0;
  std::string token;
  Millis connect_timeout{0};
  int fd = -1;
  bool connected = false;
  std::optional<Status> failure;
  std::unique_ptr<EventLoop::FdWatch> read_watch;
  std::unique_ptr<EventLoop::FdWatch> write_wait;
  std::unique_ptr<EventLoop::Timer> connect_timer;
  std::deque<Get> waiting;  // not yet sent
  std::deque<Get> sent;     // sent, answered in this order
  std::string out;          // request bytes not yet written
  std::uint64_t next_id = 1;
  std::uint8_t header[kReplyBytes];
  std::size_t header_have = 0;
  bool in_payload = false;
  std::uint64_t payload_have = 0;
  std::string last_error;
  // Encrypted connections (keys set): the handshake, then a cipher per direction.
  std::shared_ptr<const StreamKeys> keys;
  std::string holder;        // the holder id the server's key must own (empty: any member)
  bool handshaking = false;  // the hello is sent, the accept not yet read
  stream_crypto::Ephemeral ephemeral;
  std::uint8_t hello[stream_crypto::kHelloBytes];
  std::uint8_t accept[stream_crypto::kAcceptBytes];
  std::size_t accept_have = 0;
  std::unique_ptr<stream_crypto::RecordCipher> tx, rx;
  // The record being read: its header, then its body (into the oldest get's destination when
  // the whole record is its payload, else into `scratch`) and its tag.
  std::uint8_t record_header[stream_crypto::kRecordHeaderBytes];
  std::size_t record_header_have = 0;
  std::size_t record_length = 0;  // 0: the header is next
  std::uint8_t* record_body = nullptr;
  std::size_t record_body_have = 0;
  bool record_direct = false;
  std::vector<std::uint8_t> scratch;
  std::uint8_t tag[stream_crypto::kTagBytes];
  std::size_t tag_have = 0;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  ~Impl() {
    *alive = false;
    close_fd();
    sodium_memzero(ephemeral.secret_key.data(), ephemeral.secret_key.size());
  }

  void close_fd() {
    connect_timer.reset();
    write_wait.reset();
    read_watch.reset();
    if (fd >= 0) ::close(fd);
    fd = -1;
    connected = false;
  }

  // Runs `done` on a later loop turn unless the stream has been destroyed by then.
  void later(Done done, Status s) {
    std::weak_ptr<bool> a = alive;
    loop.post([a, done = std::move(done), s = std::move(s)] {
      if (!a.expired()) done(s);
    });
  }

  void fail(Status s) {
    if (!failure) failure = s;
    close_fd();
    for (auto* q : {&sent, &waiting}) {
      for (auto& g : *q)
        later(std::move(g.done), *failure);
      q->clear();
    }
  }

  void try_next_address() {
    close_fd();
    while (next_address < addresses.size()) {
      const std::string& a = addresses[next_address++];
      auto hp = split_address(a);
      if (!hp.is_ok()) {
        last_error = hp.status().message();
        continue;
      }
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(hp->second);
      if (::inet_pton(AF_INET, hp->first.c_str(), &addr.sin_addr) != 1) {
        last_error = "'" + a + "' is not an IPv4 address";
        continue;
      }
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return fail(unavailable("chunk stream: socket: " + errno_text()));
      set_nodelay(fd);
      int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      if (rc == 0) return on_connected();
      if (errno != EINPROGRESS) {
        last_error = a + ": " + errno_text();
        close_fd();
        continue;
      }
      write_wait = loop.wait_writable(fd, [this, a] {
        write_wait.reset();
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) {
          last_error = a + ": " + std::strerror(err);
          return try_next_address();
        }
        on_connected();
      });
      connect_timer = loop.after(connect_timeout, [this, a] {
        last_error = a + ": no answer within " + std::to_string(connect_timeout.count()) + " ms";
        try_next_address();
      });
      return;
    }
    fail(unavailable("chunk stream: cannot connect to the holder (" + last_error + ")"));
  }

  void on_connected() {
    connect_timer.reset();
    read_watch = loop.watch_readable(fd, [this] { on_readable(); });
    if (keys) return start_handshake();
    connected = true;
    send_waiting();
  }

  void start_handshake() {
    using namespace stream_crypto;
    auto e = make_ephemeral();
    if (!e.is_ok()) return fail(e.status());
    ephemeral = *e;
    Hello h;
    h.suites = local_suites();
    h.static_key = keys->public_key;
    h.ephemeral_key = ephemeral.public_key;
    if (auto st = fill_random(h.random.data(), h.random.size()); !st.is_ok()) return fail(st);
    encode_hello(h, hello);
    handshaking = true;
    accept_have = 0;
    out.assign(reinterpret_cast<const char*>(hello), kHelloBytes);
    connect_timer = loop.after(connect_timeout, [this] {
      fail(timeout_error("chunk stream: the holder did not answer the handshake within " +
                         std::to_string(connect_timeout.count()) + " ms"));
    });
    flush();
  }

  // The holder's accept is in: checks it, and agrees the connection's keys.
  void finish_handshake() {
    using namespace stream_crypto;
    handshaking = false;
    connect_timer.reset();
    auto a = decode_accept(accept, kAcceptBytes);
    if (!a.is_ok()) return fail(a.status().with_context("chunk stream handshake"));
    if (a->status == kClearOnly)
      return fail(failed_precondition(
          "chunk stream: the holder serves clear streams only and this reader encrypts (see "
          "stream_encryption: both ends must agree)"));
    if (a->status == kNotMember)
      return fail(permission_denied("chunk stream: the holder refused this reader's key " +
                                    keys->identity + " (not a job member that may read)"));
    if (a->status == kNoCommonSuite)
      return fail(
          failed_precondition("chunk stream: the holder runs none of this reader's ciphers"));
    const Member* server = keys->holder(a->static_key);
    if (!server)
      return fail(permission_denied("chunk stream: the holder's key is not a job member"));
    if (!holder.empty() &&
        !(keys->members && keys->members->owns_holder_id(server->identity, holder)))
      return fail(permission_denied("chunk stream: the server is " + server->identity +
                                    ", not holder " + holder + " that the read plan names"));
    auto k = derive_keys(hello, accept, keys->secret_key, a->static_key, ephemeral.secret_key,
                         a->ephemeral_key);
    sodium_memzero(ephemeral.secret_key.data(), ephemeral.secret_key.size());
    if (!k.is_ok()) return fail(k.status());
    tx = std::make_unique<RecordCipher>(a->suite, k->reader_to_holder);
    rx = std::make_unique<RecordCipher>(a->suite, k->holder_to_reader);
    sodium_memzero(&*k, sizeof(SessionKeys));
    connected = true;
    send_waiting();
  }

  void send_waiting() {
    if (!connected || failure) return;
    if (tx) return send_waiting_sealed();
    while (!waiting.empty() && sent.size() < kMaxReaderPipeline) {
      Get& g = waiting.front();
      std::uint8_t r[kRequestBytes];
      encode_request({token, g.offset, g.length, g.id}, r);
      out.append(reinterpret_cast<const char*>(r), kRequestBytes);
      sent.push_back(std::move(g));
      waiting.pop_front();
    }
    flush();
  }

  // Encrypted: up to kMaxRequestsPerRecord requests per record.
  void send_waiting_sealed() {
    std::uint8_t plain[kMaxRequestsPerRecord * kRequestBytes];
    while (!waiting.empty() && sent.size() < kMaxReaderPipeline) {
      std::size_t n = 0;
      while (!waiting.empty() && sent.size() < kMaxReaderPipeline && n < sizeof plain) {
        Get& g = waiting.front();
        encode_request({token, g.offset, g.length, g.id}, plain + n);
        n += kRequestBytes;
        sent.push_back(std::move(g));
        waiting.pop_front();
      }
      const std::size_t at = out.size();
      out.resize(at + n + stream_crypto::kRecordOverhead);
      tx->seal(plain, n, reinterpret_cast<std::uint8_t*>(out.data() + at));
    }
    flush();
  }

  void flush() {
    if (write_wait || fd < 0) return;
    while (!out.empty()) {
      ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (would_block(errno)) {
          write_wait = loop.wait_writable(fd, [this] {
            write_wait.reset();
            flush();
          });
          return;
        }
        return fail(unavailable("chunk stream: send to the holder: " + errno_text()));
      }
      out.erase(0, static_cast<std::size_t>(n));
    }
  }

  // recv's result: the bytes received, or nothing when the socket is drained or the stream
  // failed (fd < 0 then).
  std::optional<std::size_t> received(ssize_t n, const char* during) {
    if (n == 0) {
      fail(unavailable(std::string("chunk stream: the holder closed the connection") + during));
      return std::nullopt;
    }
    if (n < 0) {
      if (!would_block(errno))
        fail(unavailable("chunk stream: receive from the holder: " + errno_text()));
      return std::nullopt;
    }
    return static_cast<std::size_t>(n);
  }

  void on_readable() {
    if (handshaking) {
      while (fd >= 0 && handshaking) {
        auto n = received(::recv(fd, accept + accept_have, sizeof accept - accept_have, 0),
                          " during the handshake (it may serve clear streams only, or be an "
                          "older sluice)");
        if (!n) return;
        accept_have += *n;
        if (accept_have == sizeof accept) finish_handshake();
      }
    }
    if (rx) return read_records();
    while (fd >= 0 && !failure) {
      if (!in_payload) {
        ssize_t n = ::recv(fd, header + header_have, kReplyBytes - header_have, 0);
        if (n == 0) return fail(unavailable("chunk stream: the holder closed the connection"));
        if (n < 0) {
          if (would_block(errno)) return;
          return fail(unavailable("chunk stream: receive from the holder: " + errno_text()));
        }
        header_have += static_cast<std::size_t>(n);
        if (header_have < kReplyBytes) continue;
        header_have = 0;
        if (!take_header()) return;
        continue;
      }
      Get& g = sent.front();
      ssize_t n = ::recv(fd, g.dst + payload_have, g.length - payload_have, 0);
      if (n == 0) return fail(unavailable("chunk stream: the holder closed the connection"));
      if (n < 0) {
        if (would_block(errno)) return;
        return fail(unavailable("chunk stream: receive from the holder: " + errno_text()));
      }
      payload_have += static_cast<std::uint64_t>(n);
      if (payload_have == g.length) {
        in_payload = false;
        finish_front(Status());
      }
    }
  }

  void read_records() {
    using namespace stream_crypto;
    while (fd >= 0 && !failure) {
      if (record_length == 0) {
        auto n = received(::recv(fd, record_header + record_header_have,
                                 kRecordHeaderBytes - record_header_have, 0),
                          "");
        if (!n) return;
        record_header_have += *n;
        if (record_header_have < kRecordHeaderBytes) continue;
        record_header_have = 0;
        auto len = decode_record_header(record_header, kMaxRecordBytes);
        if (!len.is_ok()) return fail(len.status());
        record_length = *len;
        record_body_have = 0;
        tag_have = 0;
        // A record that is all payload of the oldest get is received and decrypted in place in
        // its destination: no copy.
        record_direct = in_payload && !sent.empty() && *len <= sent.front().length - payload_have;
        if (record_direct) {
          record_body = sent.front().dst + payload_have;
        } else {
          scratch.resize(*len);
          record_body = scratch.data();
        }
        continue;
      }
      iovec iov[2];
      int n_iov = 0;
      if (record_body_have < record_length)
        iov[n_iov++] = {record_body + record_body_have, record_length - record_body_have};
      iov[n_iov++] = {tag + tag_have, kTagBytes - tag_have};
      auto n = received(::readv(fd, iov, n_iov), "");
      if (!n) return;
      const std::size_t to_body = std::min(*n, record_length - record_body_have);
      record_body_have += to_body;
      tag_have += *n - to_body;
      if (tag_have < kTagBytes) continue;
      const std::size_t len = record_length;
      record_length = 0;
      if (auto st = rx->open(record_body, len, tag, record_body); !st.is_ok()) return fail(st);
      if (record_direct) {
        payload_have += len;
        if (payload_have == sent.front().length) {
          in_payload = false;
          finish_front(Status());
        }
      } else if (!consume(scratch.data(), len)) {
        return;
      }
    }
  }

  // Takes decrypted bytes of the reply stream: reply headers and payloads. False when the stream
  // failed.
  bool consume(const std::uint8_t* p, std::size_t n) {
    while (n > 0) {
      if (!in_payload) {
        const std::size_t k = std::min(n, kReplyBytes - header_have);
        std::memcpy(header + header_have, p, k);
        header_have += k;
        p += k;
        n -= k;
        if (header_have < kReplyBytes) continue;
        header_have = 0;
        if (!take_header()) return false;
        continue;
      }
      Get& g = sent.front();
      const std::size_t k =
          static_cast<std::size_t>(std::min<std::uint64_t>(n, g.length - payload_have));
      std::memcpy(g.dst + payload_have, p, k);
      payload_have += k;
      p += k;
      n -= k;
      if (payload_have == g.length) {
        in_payload = false;
        finish_front(Status());
      }
    }
    return true;
  }

  // Checks a reply header against the oldest request; false when the stream failed.
  bool take_header() {
    auto h = decode_reply_header(header, kReplyBytes);
    if (!h.is_ok()) {
      fail(h.status());
      return false;
    }
    if (sent.empty()) {
      fail(protocol_error("chunk stream: a reply to no request"));
      return false;
    }
    const auto status = h->status;
    const auto id = h->id;
    const auto length = h->length;
    if (status == kEncryptionRequired) {
      fail(failed_precondition(
          "chunk stream: the holder serves encrypted streams only and this reader sends clear "
          "(see stream_encryption: both ends must agree)"));
      return false;
    }
    const Get& g = sent.front();
    if (id != g.id) {
      fail(protocol_error("chunk stream: reply " + std::to_string(id) + " out of order (expected " +
                          std::to_string(g.id) + ")"));
      return false;
    }
    if (status == kUnknownRegion) {
      finish_front(not_found("the holder does not serve this region (withdrawn or never exposed)"));
      return true;
    }
    if (status == kOutOfRange) {
      finish_front(invalid_argument("the holder refused a range outside its region"));
      return true;
    }
    if (status != kOk || length != g.length) {
      fail(protocol_error("chunk stream: reply of status " + std::to_string(status) + " and " +
                          std::to_string(length) + " bytes to a request for " +
                          std::to_string(g.length)));
      return false;
    }
    in_payload = true;
    payload_have = 0;
    return true;
  }

  void finish_front(Status s) {
    Get g = std::move(sent.front());
    sent.pop_front();
    later(std::move(g.done), std::move(s));
    send_waiting();
  }
};

ChunkStream::ChunkStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChunkStream::~ChunkStream() = default;

Result<std::unique_ptr<ChunkStream>> ChunkStream::connect(EventLoop& loop,
                                                          std::vector<std::string> addresses,
                                                          std::string token, Millis connect_timeout,
                                                          std::shared_ptr<const StreamKeys> keys,
                                                          std::string holder) {
  if (addresses.empty()) return invalid_argument("chunk stream: no address to connect to");
  if (token.size() != kStreamTokenBytes)
    return invalid_argument("chunk stream: a region token is " + std::to_string(kStreamTokenBytes) +
                            " bytes");
  auto impl = std::make_unique<Impl>(loop);
  impl->addresses = std::move(addresses);
  impl->token = std::move(token);
  impl->connect_timeout = connect_timeout;
  impl->keys = std::move(keys);
  impl->holder = std::move(holder);
  std::unique_ptr<ChunkStream> s(new ChunkStream(std::move(impl)));
  s->impl_->try_next_address();
  return s;
}

void ChunkStream::get(std::uint64_t offset, std::uint64_t length, std::uint8_t* dst, Done done) {
  Impl* impl = impl_.get();
  if (impl->failure) return impl->later(std::move(done), *impl->failure);
  if (length == 0 || !dst) return impl->later(std::move(done), invalid_argument("empty get"));
  impl->waiting.push_back(Get{impl->next_id++, offset, length, dst, std::move(done)});
  impl->send_waiting();
}

void ChunkStream::close(Status why) {
  impl_->fail(std::move(why));
}

bool ChunkStream::failed() const {
  return impl_->failure.has_value();
}

}  // namespace sluice::core
