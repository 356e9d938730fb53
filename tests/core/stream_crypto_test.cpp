// Encrypted chunk streams: bytes arrive equal, a stranger is refused, a tampered byte fails the
// get rather than delivering wrong bytes, a clear end and an encrypted end that meet are told so
// at once, and the region token never crosses the wire in clear.
#include <doctest/doctest.h>
#include <poll.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../support/await_gets.hpp"
#include "../support/job_keys.hpp"
#include "core/units.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/stream_crypto.hpp"

using namespace sluice;
using namespace sluice::core;
using sluice::testing::JobKeys;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  fill_pseudo_random(v.data(), v.size(), seed);
  return v;
}

std::shared_ptr<const StreamKeys> stream_keys(const JobKeys& job, const std::string& identity) {
  auto k = StreamKeys::from_security(job.security(identity));
  REQUIRE_MESSAGE(k.is_ok(), k.status().to_string());
  return *k;
}

std::uint16_t port_of(const std::string& address) {
  return static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

// A connected socket to 127.0.0.1:port, or -1.
int connect_to(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A TCP relay between one reader and the holder, on a thread of its own: it keeps what the
// reader sent, and can flip one bit of what the holder sends (byte `flip_at` of that direction).
class Proxy {
 public:
  Proxy(std::uint16_t target, std::int64_t flip_at = -1) : target_(target), flip_at_(flip_at) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~Proxy() {
    stop_ = true;
    thread_.join();
    ::close(listen_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string from_reader() {
    std::lock_guard<std::mutex> g(mu_);
    return from_reader_;
  }

 private:
  void run() {
    pollfd l{listen_, POLLIN, 0};
    while (!stop_ && ::poll(&l, 1, 20) <= 0) {
    }
    if (stop_) return;
    int reader = ::accept(listen_, nullptr, nullptr);
    int holder = connect_to(target_);
    if (reader < 0 || holder < 0) {
      if (reader >= 0) ::close(reader);
      if (holder >= 0) ::close(holder);
      return;
    }
    std::int64_t from_holder = 0;
    char buf[65536];
    while (!stop_) {
      pollfd p[2] = {{reader, POLLIN, 0}, {holder, POLLIN, 0}};
      if (::poll(p, 2, 20) <= 0) continue;
      bool closed = false;
      if (p[0].revents) {
        ssize_t n = ::recv(reader, buf, sizeof buf, 0);
        if (n <= 0) break;
        {
          std::lock_guard<std::mutex> g(mu_);
          from_reader_.append(buf, static_cast<std::size_t>(n));
        }
        closed = ::send(holder, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n;
      }
      if (p[1].revents && !closed) {
        ssize_t n = ::recv(holder, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (flip_at_ >= from_holder && flip_at_ < from_holder + n) buf[flip_at_ - from_holder] ^= 1;
        from_holder += n;
        closed = ::send(reader, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n;
      }
      if (closed) break;
    }
    ::close(reader);
    ::close(holder);
  }

  std::uint16_t target_;
  std::int64_t flip_at_;
  int listen_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::string from_reader_;
};

struct Holder {
  std::unique_ptr<EventLoop> loop = EventLoop::create().value();
  std::unique_ptr<ChunkServer> server;
  Holder(StreamCrypto crypto, std::shared_ptr<const StreamKeys> keys, ChunkServerOptions o = {}) {
    auto s = ChunkServer::create(*loop, "127.0.0.1", o, crypto, std::move(keys));
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    server = std::move(s).value();
  }
  // Reads [offset, offset + length) pieces of `piece` bytes through one stream; the statuses.
  std::vector<Status> read(const std::string& address, const std::string& token,
                           std::shared_ptr<const StreamKeys> keys, std::uint8_t* dst,
                           std::uint64_t length, std::uint64_t piece,
                           const std::string& holder = {}) {
    auto s = ChunkStream::connect(*loop, {address}, token, Millis(2000), std::move(keys), holder)
                 .value();
    std::vector<std::optional<Status>> out((length + piece - 1) / piece);
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::uint64_t at = i * piece;
      s->get(at, std::min(piece, length - at), dst + at, [&out, i](Status st) { out[i] = st; });
    }
    return testing::await_gets(*loop, out);
  }
};

}  // namespace

TEST_SUITE("core.stream_crypto") {
  TEST_CASE("the handshake messages round-trip: a record opens once, in order, untampered") {
    namespace sc = stream_crypto;
    sc::Hello h;
    h.suites = sc::local_suites();
    h.static_key.fill(1);
    h.ephemeral_key.fill(2);
    h.random.fill(3);
    std::uint8_t hb[sc::kHelloBytes];
    sc::encode_hello(h, hb);
    auto h2 = sc::decode_hello(hb, sizeof hb);
    REQUIRE(h2.is_ok());
    CHECK(h2->static_key == h.static_key);
    CHECK(h2->suites == h.suites);
    CHECK(sc::decode_hello(hb, sizeof hb - 1).status().code() == Code::kProtocol);
    hb[4] = 1;  // version 1: the clear-only wire of older builds
    CHECK(sc::decode_hello(hb, sizeof hb).status().code() == Code::kProtocol);

    sc::Accept a;
    a.status = sc::kNotMember;
    std::uint8_t ab[sc::kAcceptBytes];
    sc::encode_accept(a, ab);
    auto a2 = sc::decode_accept(ab, sizeof ab);
    REQUIRE(a2.is_ok());
    CHECK(a2->status == sc::kNotMember);
    a.status = 9;
    sc::encode_accept(a, ab);
    CHECK(sc::decode_accept(ab, sizeof ab).status().code() == Code::kProtocol);

    // Both ends derive the same keys from their own secrets and the other's public keys.
    JobKeys job;
    auto reader = stream_keys(job, "rollout-0");
    auto holder = stream_keys(job, "relay-0");
    auto re = sc::make_ephemeral().value();
    auto he = sc::make_ephemeral().value();
    auto kr = sc::derive_keys(hb, ab, reader->secret_key, holder->public_key, re.secret_key,
                              he.public_key);
    auto kh = sc::derive_keys(hb, ab, holder->secret_key, reader->public_key, he.secret_key,
                              re.public_key);
    REQUIRE(kr.is_ok());
    REQUIRE(kh.is_ok());
    CHECK(kr->reader_to_holder == kh->reader_to_holder);
    CHECK(kr->holder_to_reader == kh->holder_to_reader);
    CHECK(kr->reader_to_holder != kr->holder_to_reader);
    StreamKey zero{};  // a low-order point: refused
    CHECK(sc::derive_keys(hb, ab, reader->secret_key, zero, re.secret_key, he.public_key)
              .status()
              .code() == Code::kPermissionDenied);

    for (std::uint16_t suite : {sc::kSuiteChacha20Poly1305, sc::kSuiteAes256Gcm}) {
      if (!(sc::local_suites() & suite)) continue;
      CAPTURE(sc::suite_name(suite));
      sc::RecordCipher seal(suite, kr->holder_to_reader);
      sc::RecordCipher open(suite, kh->holder_to_reader);
      auto text = pattern(1000, 5);
      std::vector<std::uint8_t> r1(text.size() + sc::kRecordOverhead), r2(r1.size());
      seal.seal(text.data(), text.size(), r1.data());
      seal.seal(text.data(), text.size(), r2.data());
      CHECK(std::memcmp(r1.data(), r2.data(), r1.size()) != 0);  // a new nonce each record
      REQUIRE(sc::decode_record_header(r1.data(), sc::kMaxRecordBytes).value() == text.size());
      std::vector<std::uint8_t> got(text.size());
      std::uint8_t* body = r1.data() + sc::kRecordHeaderBytes;
      REQUIRE(open.open(body, text.size(), body + text.size(), got.data()).is_ok());
      CHECK(got == text);
      // The first record again (a replay) fails: the second is expected.
      CHECK(open.open(body, text.size(), body + text.size(), got.data()).code() == Code::kDataLoss);
    }
    std::uint8_t big[4] = {0xff, 0xff, 0xff, 0x7f};
    CHECK(sc::decode_record_header(big, sc::kMaxRecordBytes).status().code() == Code::kProtocol);
  }

  TEST_CASE("bytes arrive equal through an encrypted stream, in records and in pieces") {
    JobKeys job;
    Holder h(StreamCrypto::kEncrypted, stream_keys(job, "relay-0"));
    auto mem = pattern((8u << 20) + 12345, 11);
    auto token = h.server->expose(mem.data(), mem.size()).value();
    // Pieces larger than a record (several records each) and small ones (one record each).
    for (std::uint64_t piece : {std::uint64_t{3u << 20}, std::uint64_t{4097}}) {
      CAPTURE(piece);
      std::vector<std::uint8_t> dst(mem.size(), 0);
      for (const auto& st : h.read(h.server->addresses()[0], token, stream_keys(job, "rollout-0"),
                                   dst.data(), dst.size(), piece))
        REQUIRE_MESSAGE(st.is_ok(), st.to_string());
      CHECK(dst == mem);
    }
    CHECK(h.server->stats().handshakes == 2);
    CHECK(h.server->stats().records_refused == 0);
  }

  TEST_CASE("a stranger's key is refused by the holder, and so is a role that may not read") {
    JobKeys job;
    JobKeys other;  // another job: its keys are in no members file of this one
    Holder h(StreamCrypto::kEither, stream_keys(job, "relay-0"));
    auto mem = pattern(1u << 20, 12);
    auto token = h.server->expose(mem.data(), mem.size()).value();
    std::vector<std::uint8_t> dst(mem.size(), 0);
    auto st = h.read(h.server->addresses()[0], token, stream_keys(other, "rollout-0"), dst.data(),
                     dst.size(), dst.size());
    CHECK(st[0].code() == Code::kPermissionDenied);
    CHECK_MESSAGE(st[0].message().find("not a job member") != std::string::npos, st[0].message());
    st = h.read(h.server->addresses()[0], token, stream_keys(job, "weightstore"), dst.data(),
                dst.size(), dst.size());
    CHECK(st[0].code() == Code::kPermissionDenied);
    CHECK(h.server->stats().handshakes_refused == 2);
    CHECK(h.server->stats().requests == 0);
    CHECK(std::all_of(dst.begin(), dst.end(), [](std::uint8_t b) { return b == 0; }));
  }

  TEST_CASE("a member that serves is refused when it is not the holder the read plan names") {
    JobKeys job({{"actor", core::kRoleActor},
                 {"relay-0", core::kRoleRelay},
                 {"relay-1", core::kRoleRelay},
                 {"rollout-0", core::kRoleRollout}});
    // relay-1 serves where the plan names relay-0 (a member standing in for a holder).
    Holder h(StreamCrypto::kEncrypted, stream_keys(job, "relay-1"));
    auto mem = pattern(1u << 20, 13);
    auto token = h.server->expose(mem.data(), mem.size()).value();
    const std::string at = h.server->addresses()[0];
    std::vector<std::uint8_t> dst(mem.size(), 0);
    for (const char* named : {"relay-0", "actor-0", "rollout-0"}) {
      CAPTURE(named);
      auto st = h.read(at, token, stream_keys(job, "rollout-0"), dst.data(), dst.size(), dst.size(),
                       named);
      CHECK(st[0].code() == Code::kPermissionDenied);
      CHECK_MESSAGE(st[0].message().find("not holder " + std::string(named)) != std::string::npos,
                    st[0].message());
      CHECK(std::all_of(dst.begin(), dst.end(), [](std::uint8_t b) { return b == 0; }));
    }
    // Its own ids read, and with no holder named any member that may serve does.
    for (const char* named : {"relay-1", "relay-1-b", ""}) {
      CAPTURE(named);
      std::fill(dst.begin(), dst.end(), 0);
      auto st = h.read(at, token, stream_keys(job, "rollout-0"), dst.data(), dst.size(), dst.size(),
                       named);
      REQUIRE_MESSAGE(st[0].is_ok(), st[0].to_string());
      CHECK(dst == mem);
    }
  }

  TEST_CASE("a holder id belongs to its identity, or to the identity and a suffix no member has") {
    JobKeys job({{"actor", core::kRoleActor},
                 {"relay", core::kRoleRelay},
                 {"relay-0", core::kRoleRelay},
                 {"relay-1", core::kRoleRelay}});
    auto members = job.security("actor").members;
    CHECK(members->owns_holder_id("actor", "actor"));
    CHECK(members->owns_holder_id("actor", "actor-0"));
    CHECK(members->owns_holder_id("relay-1", "relay-1-share"));
    CHECK_FALSE(members->owns_holder_id("relay-1", "relay-10"));
    CHECK_FALSE(members->owns_holder_id("relay-1", "relay-0"));
    CHECK_FALSE(members->owns_holder_id("relay-1", "relay-"));
    CHECK_FALSE(members->owns_holder_id("actor", "actorx"));
    CHECK_FALSE(members->owns_holder_id("actor", ""));
    // "relay" and a suffix, but another member's identity: not relay's.
    CHECK_FALSE(members->owns_holder_id("relay", "relay-0"));
    CHECK(members->owns_holder_id("relay", "relay-2"));
    CHECK_FALSE(members->owns_holder_id("stranger", "stranger"));  // not a member
  }

  TEST_CASE("a tampered byte on the wire closes the connection and the get fails") {
    JobKeys job;
    Holder h(StreamCrypto::kEncrypted, stream_keys(job, "relay-0"));
    auto mem = pattern(2u << 20, 13);
    auto token = h.server->expose(mem.data(), mem.size()).value();
    namespace sc = stream_crypto;
    // In the accept (the keys then differ), in a record's header, its body, and its tag.
    const std::int64_t first_record = sc::kAcceptBytes;
    for (std::int64_t at : {std::int64_t{50}, first_record + 1, first_record + 100,
                            first_record + 4 + std::int64_t{sc::kMaxRecordBytes} + 3}) {
      CAPTURE(at);
      Proxy proxy(port_of(h.server->addresses()[0]), at);
      std::vector<std::uint8_t> dst(mem.size(), 0);
      auto st = h.read(proxy.address(), token, stream_keys(job, "rollout-0"), dst.data(),
                       dst.size(), 1u << 20);
      CHECK_FALSE(st[0].is_ok());
      CHECK(st[0].code() != Code::kTimeout);
      CHECK_FALSE(st[1].is_ok());  // the connection is gone: the later get fails with it
    }
  }

  TEST_CASE("a clear end and an encrypted end are refused with a clear error, not a hang") {
    JobKeys job;
    auto mem = pattern(1u << 20, 14);
    std::vector<std::uint8_t> dst(mem.size(), 0);
    {
      Holder encrypted(StreamCrypto::kEncrypted, stream_keys(job, "relay-0"));
      auto token = encrypted.server->expose(mem.data(), mem.size()).value();
      auto st = encrypted.read(encrypted.server->addresses()[0], token, nullptr, dst.data(),
                               dst.size(), 4096);
      CHECK(st[0].code() == Code::kFailedPrecondition);
      CHECK_MESSAGE(st[0].message().find("encrypted streams only") != std::string::npos,
                    st[0].message());
      CHECK(encrypted.server->stats().handshakes_refused == 1);
    }
    {
      Holder clear(StreamCrypto::kClear, nullptr);
      auto token = clear.server->expose(mem.data(), mem.size()).value();
      auto st = clear.read(clear.server->addresses()[0], token, stream_keys(job, "rollout-0"),
                           dst.data(), dst.size(), 4096);
      CHECK(st[0].code() == Code::kFailedPrecondition);
      CHECK_MESSAGE(st[0].message().find("clear streams only") != std::string::npos,
                    st[0].message());
    }
    {
      // A holder that accepts either serves both.
      Holder either(StreamCrypto::kEither, stream_keys(job, "relay-0"));
      auto token = either.server->expose(mem.data(), mem.size()).value();
      for (auto keys : {std::shared_ptr<const StreamKeys>(), stream_keys(job, "rollout-0")}) {
        std::fill(dst.begin(), dst.end(), 0);
        for (const auto& st :
             either.read(either.server->addresses()[0], token, keys, dst.data(), dst.size(), 65536))
          REQUIRE_MESSAGE(st.is_ok(), st.to_string());
        CHECK(dst == mem);
      }
    }
    CHECK(ChunkServer::create(*EventLoop::create().value(), "127.0.0.1", {},
                              StreamCrypto::kEncrypted, nullptr)
              .status()
              .code() == Code::kInvalidArgument);
  }

  TEST_CASE("the region token does not appear on the wire of an encrypted stream") {
    JobKeys job;
    Holder h(StreamCrypto::kEither, stream_keys(job, "relay-0"));
    auto mem = pattern(1u << 20, 15);
    auto token = h.server->expose(mem.data(), mem.size()).value();
    for (bool encrypt : {false, true}) {
      CAPTURE(encrypt);
      Proxy proxy(port_of(h.server->addresses()[0]));
      std::vector<std::uint8_t> dst(mem.size(), 0);
      for (const auto& st :
           h.read(proxy.address(), token, encrypt ? stream_keys(job, "rollout-0") : nullptr,
                  dst.data(), dst.size(), 65536))
        REQUIRE_MESSAGE(st.is_ok(), st.to_string());
      CHECK(dst == mem);
      const std::string seen = proxy.from_reader();
      CHECK(seen.size() >= 16 * 48);
      // Clear, the capture shows the token (so it would have caught one); encrypted, it does not.
      CHECK((seen.find(token) != std::string::npos) == !encrypt);
    }
  }

  TEST_CASE("a handshake left unfinished is closed by the request timeout") {
    JobKeys job;
    ChunkServerOptions o;
    o.request_timeout_ms = 100;
    Holder h(StreamCrypto::kEncrypted, stream_keys(job, "relay-0"), o);
    int fd = connect_to(port_of(h.server->addresses()[0]));
    REQUIRE(fd >= 0);
    REQUIRE(::send(fd, "SLCH\x02\x00", 6, MSG_NOSIGNAL) == 6);
    h.loop->run_until([&] { return h.server->stats().connections_timed_out >= 1; }, Millis(5000));
    CHECK(h.server->stats().connections_timed_out == 1);
    CHECK(h.server->stats().connections == 0);
    ::close(fd);
  }
}
