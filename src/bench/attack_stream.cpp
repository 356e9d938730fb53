// The attack suite's chunk-server attempts (bench/attack.hpp). They speak the chunk-stream wire
// format (wire/chunk_stream.hpp) over plain sockets of their own, blocking with a deadline on
// every step, and check each time that the server still gives a real reader a verified chunk.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "bench/attack_internal.hpp"
#include "core/checksum.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli::attack {

namespace {

using core::Clock;
using core::Millis;
using core::Result;
using core::Status;
namespace wire = core::chunk_wire;

// One socket, closed with its owner.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Server {
  std::string holder_id;
  std::string address;  // "ip:port"
  std::string ip() const { return address.substr(0, address.rfind(':')); }
};

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Connects to "ip:port" from address `from` (empty: the kernel's choice), within `timeout`.
Result<Fd> dial(const std::string& address, const std::string& from, Millis timeout) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return core::invalid_argument("not ip:port: " + address);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
  if (::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr) != 1) {
    return core::invalid_argument("not an IPv4 address: " + address);
  }
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return core::unavailable(fmt::format("socket: {}", std::strerror(errno)));
  if (!from.empty()) {
    sockaddr_in me{};
    me.sin_family = AF_INET;
    ::inet_pton(AF_INET, from.c_str(), &me.sin_addr);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&me), sizeof(me)) != 0) {
      return core::unavailable(fmt::format("bind {}: {}", from, std::strerror(errno)));
    }
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 &&
      errno != EINPROGRESS) {
    return core::unavailable(fmt::format("connect {}: {}", address, std::strerror(errno)));
  }
  pollfd p{fd.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) {
    return core::timeout_error(
        fmt::format("connect {}: no answer in {} ms", address, timeout.count()));
  }
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    return core::unavailable(fmt::format("connect {}: {}", address, std::strerror(err)));
  return fd;
}

Status send_all(int fd, const std::uint8_t* data, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data += w;
      n -= static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return core::unavailable(fmt::format("send: {}", std::strerror(errno)));
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) != 1) return core::timeout_error("send timed out");
  }
  return {};
}

// Reads exactly n bytes; unavailable when the peer closes first, timeout at the deadline.
Status recv_all(int fd, std::uint8_t* out, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t r = ::recv(fd, out, n, MSG_DONTWAIT);
    if (r > 0) {
      out += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return core::unavailable("closed by the server");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return core::unavailable(fmt::format("recv: {}", std::strerror(errno)));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) != 1) return core::timeout_error("no reply in time");
  }
  return {};
}

// Whether the server has closed `fd` (end of stream or reset); bytes it sent are skipped.
bool closed_by_server(int fd) {
  std::uint8_t sink[4096];
  while (true) {
    ssize_t r = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (r == 0) return true;
    if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// Waits until the server closes `fd`; false at the deadline.
bool wait_closed(int fd, Clock::time_point deadline) {
  while (!closed_by_server(fd)) {
    pollfd p{fd, POLLIN, 0};
    if (remaining_ms(deadline) == 0) return false;
    ::poll(&p, 1, std::min(remaining_ms(deadline), 200));
  }
  return true;
}

std::string random_token(std::mt19937_64& rng) {
  std::string t(core::kStreamTokenBytes, '\0');
  for (auto& c : t)
    c = static_cast<char>(rng() & 0xff);
  return t;
}

// A source address of its own per purpose, so that the server's per-peer cap of one attempt
// does not refuse another (loopback answers on all of 127/8); elsewhere the kernel's choice.
std::string source(const Server& s, int k) {
  if (s.ip().rfind("127.", 0) != 0) return "";
  return fmt::format("127.0.{}.{}", 1 + k / 250, 2 + k % 250);
}
constexpr int kProbeSource = 1000;  // 127.0.5.2: the real reader's address

// Dialling a server and sending to it (the probe's dial is given longer); waiting for a server's
// answers to an attempt; the whole connection flood; the server's turn (it accepts, and refuses,
// a turn at a time).
constexpr Millis kDialTimeout{3000};
constexpr Millis kProbeDialTimeout{5000};
constexpr Millis kSendTimeout{3000};
constexpr Millis kAnswerWait{10000};
constexpr Millis kFloodWindow{60000};
constexpr Millis kServerTurn{1000};

// A region of a server as a fresh read plan names it (with the plan's lease, to release).
struct Region {
  std::string token;
  std::uint64_t length = 0;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t checksum = 0;  // of chunk 0
  std::uint64_t lease = 0;
};

// The store names the least loaded holders first (by leases held), so a plan taken while the
// earlier ones are held names others: kPlans plans reach every holder of a small job.
constexpr int kPlans = 8;

// `s`'s region in plan `p`, if it names it.
std::optional<Region> find_region(const weightstore::ReadPlan& p, const Server& s) {
  for (const auto& h : p.holders) {
    if (h.holder_id != s.holder_id) continue;
    auto d = core::RegionDescriptor::decode(h.descriptor);
    if (!d.is_ok() || std::find(d->stream.begin(), d->stream.end(), s.address) == d->stream.end())
      continue;
    Region r;
    r.token = d->stream_token;
    r.length = d->length;
    r.chunk_bytes = std::min(p.manifest.chunk_bytes, p.manifest.total_bytes);
    r.checksum = p.manifest.checksums.empty() ? 0 : p.manifest.checksums[0];
    r.lease = p.lease_id;
    return r;
  }
  return std::nullopt;
}

// `s`'s region as a fresh plan names it, with that plan's lease for the caller to release (the
// other plans' leases are released here).
Result<Region> region_of(const Server& s, const PlanSource& plan, const LeaseRelease& release) {
  std::vector<std::uint64_t> held;
  Result<Region> found = core::not_found(
      fmt::format("{} is no longer in the newest version's read plans", s.holder_id));
  for (int i = 0; i < kPlans; ++i) {
    auto p = plan();
    if (!p.is_ok()) {
      found = p.status();
      break;
    }
    if (auto r = find_region(*p, s)) {
      found = std::move(*r);
      break;
    }
    held.push_back(p->lease_id);
  }
  for (auto lease : held)
    release(lease);
  return found;
}

// A real reader: chunk 0 of the newest version from this server, its checksum checked against
// the manifest. ok, or why not.
Status real_read(const Server& s, const PlanSource& plan, const LeaseRelease& release) {
  auto region = region_of(s, plan, release);
  if (!region.is_ok()) return region.status();
  Region r = std::move(region).value();
  struct Releaser {
    const LeaseRelease& give_back;
    std::uint64_t lease_id;
    ~Releaser() { give_back(lease_id); }
  } releaser{release, r.lease};
  auto deadline = Clock::now() + kAnswerWait;
  SLUICE_ASSIGN_OR_RETURN(Fd fd, dial(s.address, source(s, kProbeSource), kProbeDialTimeout));
  std::uint8_t req[wire::kRequestBytes];
  wire::encode_request(wire::Request{r.token, 0, r.chunk_bytes, 1}, req);
  SLUICE_TRY(send_all(fd.get(), req, sizeof(req), deadline));
  std::uint8_t head[wire::kReplyBytes];
  SLUICE_TRY(recv_all(fd.get(), head, sizeof(head), deadline));
  SLUICE_ASSIGN_OR_RETURN(wire::ReplyHeader h, wire::decode_reply_header(head, sizeof(head)));
  if (h.status == wire::kEncryptionRequired) {
    return core::failed_precondition(
        "the server serves encrypted streams only (the job's stream_encryption is on), and these "
        "attempts speak the clear protocol");
  }
  if (h.status != wire::kOk || h.length != r.chunk_bytes) {
    return core::unavailable(fmt::format("refused a real read: status {}", h.status));
  }
  std::vector<std::uint8_t> data(r.chunk_bytes);
  SLUICE_TRY(recv_all(fd.get(), data.data(), data.size(), deadline));
  if (core::chunk_checksum(data.data(), data.size()) != r.checksum) {
    return core::data_loss("chunk 0 does not match the manifest's checksum");
  }
  return {};
}

// "a real read of chunk 0 was served and verified", or the failure as a breach.
void with_real_read(Attempt& a, const Server& s, const PlanSource& plan,
                    const LeaseRelease& release) {
  Status st = real_read(s, plan, release);
  if (st.is_ok()) {
    a.got += "; a real read meanwhile got chunk 0, verified";
  } else if (st.code() == core::Code::kNotFound) {
    a.got += "; no real read (" + st.message() + ")";
  } else if (st.code() == core::Code::kFailedPrecondition) {
    a.got += "; not played: " + st.message();
    a.verdict = Verdict::kSkipped;
  } else {
    a.got += "; a real read meanwhile failed: " + st.to_string();
    a.verdict = Verdict::kBreach;
  }
}

// A chunk server that a read plan named and that no longer takes a connection while its job
// runs: its holder died or stopped accepting (Report drops the verdict if the job has ended).
Attempt gone(Attempt a, const Status& why) {
  a.got = "cannot connect: " + why.message() + " (the server is gone or turns everyone away)";
  a.verdict = Verdict::kBreach;
  return a;
}

// The descriptor table this process may fill: raised to its hard limit for the idle connections.
std::size_t descriptor_room() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur > 256 ? static_cast<std::size_t>(rl.rlim_cur) - 128 : 128;
}

class ServerAttacks {
 public:
  ServerAttacks(const Server& s, const PlanSource& plan, const LeaseRelease& release,
                Report& report)
      : s_(s), plan_(plan), release_(release), report_(report) {}

  // Connections that do nothing: past the per-peer cap from one address, then up to `count` in
  // all from several, while a real read must still be served.
  void idle(std::uint32_t count) {
    const core::ChunkServerOptions limits;
    const std::uint32_t per_peer = limits.max_connections_per_peer;
    const std::size_t room = descriptor_room();
    const std::size_t total = std::min<std::size_t>(count, room);
    std::vector<Fd> one_peer, many;
    std::string dial_error;
    auto deadline = Clock::now() + kFloodWindow;
    // From one address: the cap, and 16 more.
    for (std::uint32_t i = 0; i < per_peer + 16 && Clock::now() < deadline; ++i) {
      auto fd = dial(s_.address, source(s_, 0), kDialTimeout);
      if (!fd.is_ok()) {
        dial_error = fd.status().message();
        break;
      }
      one_peer.push_back(std::move(fd).value());
    }
    // The rest from other addresses, up to the per-peer cap each.
    for (std::size_t i = one_peer.size(); i < total && Clock::now() < deadline; ++i) {
      int k = 1 + static_cast<int>((i - one_peer.size()) / (per_peer - 4));
      auto fd = dial(s_.address, source(s_, k), kDialTimeout);
      if (!fd.is_ok()) {
        if (dial_error.empty()) dial_error = fd.status().message();
        break;
      }
      many.push_back(std::move(fd).value());
    }
    std::this_thread::sleep_for(kServerTurn);
    std::size_t one_closed = 0, many_closed = 0;
    for (auto& fd : one_peer)
      one_closed += closed_by_server(fd.get()) ? 1 : 0;
    for (auto& fd : many)
      many_closed += closed_by_server(fd.get()) ? 1 : 0;
    const std::size_t one_open = one_peer.size() - one_closed;
    Attempt a{"chunk-idle " + where(),
              fmt::format("{} idle connections ({} from one address, per-peer cap {}){}",
                          one_peer.size() + many.size(), one_peer.size(), per_peer,
                          dial_error.empty() ? "" : " (stopped: " + dial_error + ")"),
              fmt::format("{} from the one address held open, {} closed; {} of the others closed",
                          one_open, one_closed, many_closed),
              Verdict::kSurvived};
    if (one_open > per_peer) {
      a.got += fmt::format(": more than the cap of {} from one address", per_peer);
      a.verdict = Verdict::kBreach;
    }
    with_real_read(a, s_, plan_, release_);
    report_.add(std::move(a));
  }

  // Bad tokens, all at once on one connection: every one refused, and the connection closed
  // after the server's limit of refusals.
  void bad_tokens() {
    const core::ChunkServerOptions limits;
    const std::uint32_t n = limits.max_refused_per_connection + 64;
    Attempt a{"chunk-bad-tokens " + where(),
              fmt::format("{} requests with random tokens on one connection", n), "",
              Verdict::kRefused};
    auto fd = dial(s_.address, source(s_, 900), kDialTimeout);
    if (!fd.is_ok()) {
      report_.add(gone(std::move(a), fd.status()));
      return;
    }
    std::mt19937_64 rng(std::random_device{}());
    std::vector<std::uint8_t> reqs(n * wire::kRequestBytes);
    for (std::uint32_t i = 0; i < n; ++i) {
      wire::encode_request(wire::Request{random_token(rng), 0, 4096, i + 1},
                           reqs.data() + i * wire::kRequestBytes);
    }
    auto deadline = Clock::now() + kAnswerWait;
    Status sent = send_all(fd->get(), reqs.data(), reqs.size(), deadline);
    std::map<std::uint16_t, std::uint32_t> statuses;
    std::string end = "still open after 10 s";
    while (true) {
      std::uint8_t head[wire::kReplyBytes];
      Status st = recv_all(fd->get(), head, sizeof(head), deadline);
      if (!st.is_ok()) {
        end = st.code() == core::Code::kTimeout ? "still open after 10 s"
                                                : "then the server closed the connection";
        break;
      }
      auto h = wire::decode_reply_header(head, sizeof(head));
      if (!h.is_ok()) {
        end = "then a malformed reply: " + h.status().message();
        break;
      }
      ++statuses[h->status];
      if (h->status == wire::kOk) {
        a.verdict = Verdict::kBreach;
        break;
      }
    }
    std::string counts;
    for (const auto& [st, k] : statuses)
      counts += fmt::format("{}{} x status {}", counts.empty() ? "" : ", ", k, st);
    a.got = fmt::format("{}{}; {}", counts.empty() ? "no replies" : counts,
                        statuses.count(wire::kOk) ? " (a random token was served)" : "", end);
    if (!sent.is_ok()) a.got += " (sending stopped: " + sent.message() + ")";
    if (end == "still open after 10 s" && a.verdict != Verdict::kBreach)
      a.verdict = Verdict::kBreach;
    with_real_read(a, s_, plan_, release_);
    report_.add(std::move(a));
  }

  // Reads outside a real region: past its end, straddling it, and a length that overflows.
  void out_of_range() {
    Attempt a{"chunk-out-of-range " + where(), "", "", Verdict::kRefused};
    auto region = region_of(s_, plan_, release_);
    if (!region.is_ok()) {
      report_.skip(a.name, region.status().message());
      return;
    }
    Region r = std::move(region).value();
    const wire::Request tries[] = {
        {r.token, r.length, 1, 1},
        {r.token, r.length - 1, 2, 2},
        {r.token, 0, ~0ull, 3},
        {r.token, ~0ull - 7, 16, 4},
    };
    a.tried = fmt::format(
        "4 reads of a real region of {} bytes: at its end, straddling it, length 2^64-1, "
        "offset 2^64-8",
        r.length);
    std::vector<std::string> got;
    auto fd = dial(s_.address, source(s_, 901), kDialTimeout);
    auto deadline = Clock::now() + kAnswerWait;
    for (const auto& t : tries) {
      if (!fd.is_ok()) {
        got.push_back("cannot connect: " + fd.status().message());
        a.verdict = Verdict::kBreach;
        break;
      }
      std::uint8_t req[wire::kRequestBytes];
      wire::encode_request(t, req);
      std::uint8_t head[wire::kReplyBytes];
      Status st = send_all(fd->get(), req, sizeof(req), deadline);
      if (st.is_ok()) st = recv_all(fd->get(), head, sizeof(head), deadline);
      if (!st.is_ok()) {
        got.push_back(st.message());
        if (st.code() == core::Code::kTimeout) a.verdict = Verdict::kBreach;
        break;
      }
      auto h = wire::decode_reply_header(head, sizeof(head));
      if (!h.is_ok()) {
        got.push_back(h.status().message());
        break;
      }
      got.push_back(h->status == wire::kOutOfRange ? "out of range"
                                                   : fmt::format("status {}", h->status));
      if (h->status == wire::kOk) a.verdict = Verdict::kBreach;
    }
    release_(r.lease);
    a.got = fmt::format("{}", fmt::join(got, ", "));
    report_.add(std::move(a));
  }

  std::string where() const { return s_.holder_id + " " + s_.address; }

 private:
  const Server& s_;
  const PlanSource& plan_;
  const LeaseRelease& release_;
  Report& report_;
};

// A request's first bytes and then nothing, on every server at once: each must close it within
// its request time-out (and a margin), and serve a real read meanwhile.
void slow_loris(const std::vector<Server>& servers, const PlanSource& plan,
                const LeaseRelease& release, Report& report) {
  const core::ChunkServerOptions limits;
  const Millis bound(limits.request_timeout_ms + 5000);
  struct Partial {
    const Server* s;
    Result<Fd> fd;
    Attempt a;
  };
  std::vector<Partial> partials;
  std::mt19937_64 rng(std::random_device{}());
  for (const auto& s : servers) {
    Partial p{
        &s, dial(s.address, source(s, 902), kDialTimeout),
        Attempt{"chunk-slow-loris " + s.holder_id + " " + s.address,
                fmt::format("20 of a request's 48 bytes, then silence (request time-out {} ms)",
                            limits.request_timeout_ms),
                "", Verdict::kSurvived}};
    if (p.fd.is_ok()) {
      std::uint8_t req[wire::kRequestBytes];
      wire::encode_request(wire::Request{random_token(rng), 0, 1, 1}, req);
      Status st = send_all(p.fd->get(), req, 20, Clock::now() + kSendTimeout);
      if (!st.is_ok()) p.a.got = "sending failed: " + st.message() + "; ";
    }
    partials.push_back(std::move(p));
  }
  // A real read while the partial requests wait.
  for (auto& p : partials) {
    if (!p.fd.is_ok()) continue;
    Attempt probe;
    with_real_read(probe, *p.s, plan, release);
    p.a.got += probe.got.substr(2);
    if (probe.verdict == Verdict::kBreach) p.a.verdict = Verdict::kBreach;
    p.a.got += "; ";
  }
  const auto start = Clock::now();
  const auto deadline = start + bound;
  for (auto& p : partials) {
    if (!p.fd.is_ok()) {
      report.add(gone(std::move(p.a), p.fd.status()));
      continue;
    }
    if (wait_closed(p.fd->get(), deadline)) {
      p.a.got += fmt::format("closed by the server after {:.1f} s",
                             std::chrono::duration<double>(Clock::now() - start).count());
    } else {
      p.a.got +=
          fmt::format("still open after {:.0f} s", std::chrono::duration<double>(bound).count());
      p.a.verdict = Verdict::kBreach;
    }
    report.add(std::move(p.a));
  }
}

}  // namespace

void play_chunk_servers(const PlanSource& plan, const LeaseRelease& release,
                        std::uint32_t idle_connections, Report& report) {
  const char* names[] = {"chunk-idle", "chunk-slow-loris", "chunk-bad-tokens",
                         "chunk-out-of-range"};
  // Every chunk server the plans name, once (the first address each descriptor lists).
  std::vector<Server> servers;
  std::vector<std::uint64_t> held;
  Status error;
  for (int i = 0; i < kPlans; ++i) {
    auto p = plan();
    if (!p.is_ok()) {
      error = p.status();
      break;
    }
    held.push_back(p->lease_id);
    for (const auto& h : p->holders) {
      auto d = core::RegionDescriptor::decode(h.descriptor);
      if (!d.is_ok() || d->stream.empty()) continue;
      bool seen = std::any_of(servers.begin(), servers.end(),
                              [&](const Server& s) { return s.address == d->stream.front(); });
      if (!seen) servers.push_back(Server{h.holder_id, d->stream.front()});
    }
  }
  for (auto lease : held)
    release(lease);
  if (held.empty()) {
    for (const char* n : names)
      report.skip(n, "no read plan of the newest version: " + error.to_string());
    return;
  }
  if (servers.empty()) {
    for (const char* n : names) {
      report.skip(n, fmt::format("no holder of the newest version in {} read plans serves a "
                                 "chunk stream (its roles' UCX_TLS has no tcp: same-host reads go "
                                 "by shared memory)",
                                 held.size()));
    }
    return;
  }
  std::printf("sluice attack: %zu chunk servers named in %zu read plans\n", servers.size(),
              held.size());
  for (const auto& s : servers) {
    ServerAttacks attacks(s, plan, release, report);
    attacks.idle(idle_connections);
    attacks.bad_tokens();
    attacks.out_of_range();
  }
  slow_loris(servers, plan, release, report);
}

}  // namespace sluice::cli::attack
