#include "wire/messaging.hpp"

#include "core/json_limits.hpp"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/log.hpp"
#include "core/metrics.hpp"
#include "wire/deadline.hpp"

namespace sluice::core {

namespace {

constexpr char kMagic[4] = {'S', 'L', 'C', 'E'};
// A request carries its deadline (the header's "deadline_ms": milliseconds since the Unix epoch,
// by the sender's clock: when it sent the request plus its time-out) and its time-out
// ("timeout_ms"). A server drops a request that arrives later than that, plus this allowance for
// the hosts' clocks, unread: its sender stopped waiting, and a restarted or stalled server must
// not spend its first seconds serving a backlog of requests nobody waits for. A request later
// than it can have waited at the server, or with a deadline further ahead than its time-out,
// comes from a peer whose clock is off by more than this: it is served, and the server warns
// (wire/deadline.hpp).
constexpr std::int64_t kDeadlineSlackMs = 250;
// Peers whose clock a server warned about, at most (then further ones are only counted).
constexpr std::size_t kMaxSkewWarnings = 4096;

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
// Safety net besides the edge-triggered fd: drain the socket this often anyway. ZeroMQ's fd can
// lose an edge when a send consumes the pending notification; draining after every send covers
// that, and this timer covers anything missed.
constexpr Millis kSafetyDrain{100};
// After a gap in the drains (the process stopped or starved), what arrived meanwhile can take this
// long to reach the socket through libzmq's I/O thread (longer under sanitizers or load): until
// then an empty socket does not move queue_empty_at.
constexpr Millis kGapSettle{1000};
// A request no connection could take yet is offered again this often until its time-out: the
// connection may be coming back (a reconnect after a refused handshake takes about 100 ms).
constexpr Millis kUnsentRetry{10};

zmq::context_t& zmq_ctx() {
  static zmq::context_t ctx(1);
  return ctx;
}

// libzmq asks the ZAP handler bound here, in the connecting socket's context (RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "sluice";

// A property of the connection a message came from (ZMTP metadata: "User-Id" from ZAP,
// "Peer-Address"); empty when it has none.
std::string message_property(zmq::message_t& m, const char* name) {
  const char* v = zmq_msg_gets(m.handle(), name);
  return v ? std::string(v) : std::string();
}

// Sets a socket's CURVE keys (Z85 text). Throws zmq::error_t like the other socket options.
void set_curve_keys(zmq::socket_t& sock, const KeyPair& keys) {
  sock.set(zmq::sockopt::curve_publickey, keys.public_key);
  sock.set(zmq::sockopt::curve_secretkey, keys.secret_key);
}

Status check_curve_settings(const Security& sec, bool server) {
  if (!sec.curve()) return {};
  if (!curve_available()) return unavailable("curve mode, but this libzmq has no CURVE support");
  if (sec.keys.public_key.size() != 40 || sec.keys.secret_key.size() != 40) {
    return invalid_argument("curve mode needs this process's key pair");
  }
  if (server && !sec.members) return invalid_argument("a curve server needs the job's members");
  if (!server && sec.server_key.size() != 40) {
    return invalid_argument("a curve client needs the server's public key");
  }
  return {};
}

void put_u16(char* p, std::uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}
void put_u64(char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint16_t get_u16(const char* p) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(p[0]) |
                                    (static_cast<unsigned char>(p[1]) << 8));
}
std::uint64_t get_u64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::vector<std::string> to_strings(std::vector<zmq::message_t>& msgs, std::size_t from) {
  std::vector<std::string> out;
  out.reserve(msgs.size() - std::min(from, msgs.size()));
  for (std::size_t i = from; i < msgs.size(); ++i)
    out.emplace_back(msgs[i].to_string());
  return out;
}

// Sends frames without blocking. EAGAIN means no connection can take them now: the peer's queue
// is full, or (for a DEALER) no connection is up, as after a refused handshake until the
// reconnect. That is reported, never waited on here; `would_block` (may be null) says it was that.
Status send_frames(zmq::socket_t& sock, const std::vector<std::string>& frames,
                   const std::string* routing_id, bool* would_block = nullptr) {
  if (would_block) *would_block = false;
  try {
    std::vector<zmq::const_buffer> bufs;
    if (routing_id) bufs.emplace_back(zmq::buffer(*routing_id));
    for (const auto& f : frames)
      bufs.emplace_back(zmq::buffer(f));
    auto sent = zmq::send_multipart(sock, bufs, zmq::send_flags::dontwait);
    if (!sent) {
      if (would_block) *would_block = true;
      return unavailable("send queue full");
    }
    return {};
  } catch (const zmq::error_t& e) {
    return unavailable(std::string("send failed: ") + e.what());
  }
}

}  // namespace

// ---------------------------------------------------------------- wire format

std::string Peer::describe() const {
  if (authenticated) return identity + " (" + role + ")";
  return address.empty() ? std::string("unauthenticated peer") : "unauthenticated peer " + address;
}

namespace {

// A request's deadline and time-out, as its header carries them (0: none).
struct RequestTiming {
  std::int64_t deadline_ms = 0;
  std::int64_t timeout_ms = 0;
};

// The frames of `msg`; a request with a deadline carries it and its time-out in its header.
std::vector<std::string> encode_with_deadline(const Envelope& env, const Message& msg,
                                              RequestTiming timing) {
  std::vector<std::string> frames;
  frames.reserve(2 + msg.blobs.size());
  std::string f0(kEnvelopeBytes, '\0');
  std::memcpy(f0.data(), kMagic, 4);
  put_u16(f0.data() + 4, env.version);
  f0[6] = static_cast<char>(env.kind);
  f0[7] = static_cast<char>(env.error ? 1 : 0);
  put_u64(f0.data() + 8, env.request_id);
  frames.push_back(std::move(f0));
  nlohmann::json header;
  header["type"] = msg.type;
  header["body"] = msg.body;
  if (timing.deadline_ms > 0) {
    header["deadline_ms"] = timing.deadline_ms;
    header["timeout_ms"] = timing.timeout_ms;
  }
  frames.push_back(header.dump());
  for (const auto& b : msg.blobs)
    frames.push_back(b);
  return frames;
}

}  // namespace

std::vector<std::string> encode_frames(const Envelope& env, const Message& msg) {
  return encode_with_deadline(env, msg, RequestTiming{});
}

Result<Envelope> decode_envelope(const std::string& f0) {
  if (f0.size() != kEnvelopeBytes) {
    return protocol_error("envelope frame has " + std::to_string(f0.size()) + " bytes, expected " +
                          std::to_string(kEnvelopeBytes));
  }
  if (std::memcmp(f0.data(), kMagic, 4) != 0) return protocol_error("envelope has a wrong magic");
  Envelope env;
  env.version = get_u16(f0.data() + 4);
  env.request_id = get_u64(f0.data() + 8);
  if (env.version != kProtocolVersion) {
    return protocol_error("protocol version " + std::to_string(env.version) +
                          " is not supported (this build speaks " +
                          std::to_string(kProtocolVersion) + ")");
  }
  auto kind = static_cast<std::uint8_t>(f0[6]);
  if (kind < 1 || kind > 3) return protocol_error("unknown message kind " + std::to_string(kind));
  env.kind = static_cast<MessageKind>(kind);
  env.error = (static_cast<std::uint8_t>(f0[7]) & 1) != 0;
  return env;
}

namespace {

// decode_message, also giving the request's deadline and time-out (0 when it has none).
Result<Message> decode_with_deadline(const std::vector<std::string>& frames,
                                     const MessagingLimits& lim, RequestTiming* timing) {
  if (frames.size() < 2) return protocol_error("message has no header frame");
  if (frames.size() > lim.max_frames) {
    return protocol_error("message has " + std::to_string(frames.size()) + " frames, limit " +
                          std::to_string(lim.max_frames));
  }
  std::size_t total = 0;
  for (const auto& f : frames)
    total += f.size();
  if (total > lim.max_message_bytes) {
    return protocol_error("message of " + std::to_string(total) + " bytes exceeds the limit of " +
                          std::to_string(lim.max_message_bytes) + " bytes");
  }
  const std::string& h = frames[1];
  if (h.size() > lim.max_header_bytes) {
    return protocol_error("header of " + std::to_string(h.size()) + " bytes exceeds the limit of " +
                          std::to_string(lim.max_header_bytes));
  }
  // Depth is checked on the text before a node is built: a deeply nested body would otherwise be
  // built, copied and destroyed recursively.
  JsonLimits jl;
  jl.max_bytes = lim.max_header_bytes;
  jl.max_depth = lim.max_json_depth;
  auto parsed = parse_json_bounded(h, jl);
  if (!parsed.is_ok()) return protocol_error("header: " + parsed.status().message());
  nlohmann::json header = std::move(parsed).value();
  if (!header.is_object()) return protocol_error("header is not a JSON object");
  auto t = header.find("type");
  if (t == header.end() || !t->is_string() || t->get<std::string>().empty()) {
    return protocol_error("header has no 'type' string");
  }
  Message m;
  m.type = t->get<std::string>();
  auto b = header.find("body");
  if (b != header.end()) {
    if (!b->is_object()) return protocol_error("header 'body' is not a JSON object");
    m.body = *b;
  }
  // A time in milliseconds: a positive integer that fits an int64 (a larger unsigned one would
  // read as negative).
  auto millis = [&](const char* key, std::int64_t* out) -> Status {
    auto d = header.find(key);
    if (d == header.end()) return {};
    if (!d->is_number_integer() || d->get<std::int64_t>() <= 0) {
      return protocol_error(std::string("header '") + key + "' is not a positive integer");
    }
    if (out) *out = d->get<std::int64_t>();
    return {};
  };
  SLUICE_TRY(millis("deadline_ms", timing ? &timing->deadline_ms : nullptr));
  SLUICE_TRY(millis("timeout_ms", timing ? &timing->timeout_ms : nullptr));
  m.blobs.assign(frames.begin() + 2, frames.end());
  return m;
}

}  // namespace

Result<Message> decode_message(const std::vector<std::string>& frames, const MessagingLimits& lim) {
  return decode_with_deadline(frames, lim, nullptr);
}

Message error_message(const Status& status) {
  Message m("error");
  m.body["code"] = static_cast<int>(status.code());
  m.body["message"] = status.message();
  return m;
}

Status status_from_error(const Message& msg) {
  int code = static_cast<int>(Code::kInternal);
  std::string text = "peer sent an error without a message";
  if (auto c = msg.body.find("code"); c != msg.body.end() && c->is_number_integer()) {
    code = c->get<int>();
    if (code <= 0 || code > static_cast<int>(Code::kPermissionDenied))
      code = static_cast<int>(Code::kInternal);
  }
  if (auto m = msg.body.find("message"); m != msg.body.end() && m->is_string()) {
    text = m->get<std::string>();
  }
  return {static_cast<Code>(code), text};
}

namespace {

// Receives every message waiting on `sock`, passing each to `handle`: drained fully, since ZMQ_FD
// is edge-triggered. A handler that replies re-enters through the owner's post_drain, not
// recursion (`draining` refuses it), and one that destroys the owner (`alive` expires) ends the
// loop before anything of the owner is touched again. A receive error is logged as
// "<kind> <endpoint>: receive failed: ...".
template <typename Handle>
void drain_socket(zmq::socket_t& sock, bool& draining, const std::shared_ptr<bool>& alive,
                  const char* kind, const std::string& endpoint, Handle handle) {
  if (draining) return;
  draining = true;
  std::weak_ptr<bool> a = alive;
  try {
    while (true) {
      if (a.expired()) return;
      auto events = sock.get(zmq::sockopt::events);
      if (!(events & ZMQ_POLLIN)) break;
      std::vector<zmq::message_t> msgs;
      auto got = zmq::recv_multipart(sock, std::back_inserter(msgs), zmq::recv_flags::dontwait);
      if (!got) break;
      handle(msgs);
    }
  } catch (const zmq::error_t& e) {
    log::error("{} {}: receive failed: {}", kind, endpoint, e.what());
  }
  if (!a.expired()) draining = false;
}

}  // namespace

// ---------------------------------------------------------------- server

struct Responder::State {
  Server::Impl* server = nullptr;
  std::weak_ptr<bool> alive;
  std::string routing_id;
  std::uint64_t request_id = 0;
  std::string type;
  bool oneway = false;
  bool done = false;
};

struct Server::Impl {
  // A curve server gets its own ZeroMQ context: the ZAP endpoint is one per context, so each
  // server's allow-list is its own and its ZAP socket is driven from its own loop. Members are
  // declared in construction order; the context outlives the sockets.
  Impl(EventLoop& l, const Security& sec, MessagingLimits li)
      : own_ctx(sec.curve() ? std::make_unique<zmq::context_t>(1) : nullptr),
        loop(l),
        sock(own_ctx ? *own_ctx : zmq_ctx(), zmq::socket_type::router),
        security(sec),
        limits(li) {}

  struct Entry {
    Handler handler;
    Roles roles;  // empty: any member
  };

  std::unique_ptr<zmq::context_t> own_ctx;
  EventLoop& loop;
  zmq::socket_t sock;
  std::optional<zmq::socket_t> zap;      // curve: the ZAP handler (REP)
  std::optional<zmq::socket_t> monitor;  // curve: handshake failures that never reach ZAP
  Security security;
  std::string endpoint;
  MessagingLimits limits;
  std::map<std::string, Entry> handlers;
  Stats stats;
  // When the socket was last found with nothing to read: whatever is read later arrived after it
  // (how long a request can have waited here, for its deadline). And when the last drain ended.
  Clock::time_point queue_empty_at = Clock::now();
  Clock::time_point drained_at = Clock::now();
  Clock::time_point gap_ended_at{};   // the first drain after the last gap
  std::set<std::string> skew_warned;  // peers whose clock this server warned about
  std::unique_ptr<EventLoop::FdWatch> zap_watch;
  std::unique_ptr<EventLoop::FdWatch> monitor_watch;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::unique_ptr<EventLoop::FdWatch> watch;
  std::unique_ptr<EventLoop::Timer> safety;
  bool draining = false;
  bool drain_posted = false;

  void drain();
  void drain_zap();
  void drain_monitor();
  void dispatch(std::vector<zmq::message_t>& msgs);
  // Whether a request with `timing` is served (false: dropped unread, its sender gave up on it).
  bool in_time(const Message& msg, const RequestTiming& timing, const Peer& peer);
  void reply(const std::string& routing, std::uint64_t id, const Result<Message>& r);
  void reject(const std::string& routing, std::uint64_t id, const Status& why,
              const std::string& reason, const Peer& peer);
  Status authenticate(std::vector<zmq::message_t>& msgs, Peer& peer);
  void post_drain() {
    if (drain_posted) return;
    drain_posted = true;
    std::weak_ptr<bool> a = alive;
    loop.post([this, a] {
      if (a.expired()) return;
      drain_posted = false;
      drain();
    });
  }
};

void Responder::respond(Result<Message> reply) const {
  if (!s_ || s_->done) return;
  s_->done = true;
  if (s_->oneway || s_->alive.expired()) return;
  s_->server->reply(s_->routing_id, s_->request_id, reply);
}

bool Responder::is_oneway() const {
  return s_ && s_->oneway;
}

void Server::Impl::reply(const std::string& routing, std::uint64_t id, const Result<Message>& r) {
  Envelope env;
  env.kind = MessageKind::kReply;
  env.request_id = id;
  env.error = !r.is_ok();
  auto frames = encode_frames(env, r.is_ok() ? r.value() : error_message(r.status()));
  Status s = send_frames(sock, frames, &routing);
  if (!s.is_ok())
    log::warn("server {}: reply to request {} not sent: {}", endpoint, id, s.to_string());
  post_drain();  // a send can swallow the fd's edge
}

void Server::Impl::reject(const std::string& routing, std::uint64_t id, const Status& why,
                          const std::string& reason, const Peer& peer) {
  if (reason == "role" || reason == "unauthenticated")
    ++stats.refused;
  else
    ++stats.rejected;
  count_refusal(reason, peer.describe(), "server " + endpoint + ": " + why.to_string());
  reply(routing, id, why);
}

// The peer of a received message: in curve mode the member whose identity ZAP returned as the
// User-Id (a message without one never passed ZAP: refused).
Status Server::Impl::authenticate(std::vector<zmq::message_t>& msgs, Peer& peer) {
  zmq::message_t& m = msgs.size() > 1 ? msgs[1] : msgs[0];
  peer.address = message_property(m, "Peer-Address");
  if (!security.curve()) return {};
  std::string user = message_property(m, "User-Id");
  const Member* member = user.empty() ? nullptr : security.members->by_identity(user);
  if (!member) return permission_denied("the sender is not an authenticated member of the job");
  peer.authenticated = true;
  peer.identity = member->identity;
  peer.role = member->role;
  return {};
}

void Server::Impl::dispatch(std::vector<zmq::message_t>& msgs) {
  if (msgs.empty()) return;
  std::string routing = msgs[0].to_string();
  Peer peer;
  // The request id, when it can be read, so that even a rejection reaches the right caller.
  std::uint64_t id = 0;
  if (msgs.size() > 1 && msgs[1].size() == kEnvelopeBytes)
    id = get_u64(static_cast<const char*>(msgs[1].data()) + 8);
  if (Status a = authenticate(msgs, peer); !a.is_ok()) {
    reject(routing, id, a, "unauthenticated", peer);
    return;
  }
  if (msgs.size() < 2) {
    reject(routing, 0, protocol_error("message has no envelope frame"), "malformed", peer);
    return;
  }

  auto env = decode_envelope(msgs[1].to_string());
  if (!env.is_ok()) {
    reject(routing, id, env.status(), "malformed", peer);
    return;
  }
  if (env->kind == MessageKind::kReply) {
    reject(routing, id, protocol_error("a server does not accept replies"), "malformed", peer);
    return;
  }
  // Sizes first, so that an oversized message is told apart from a malformed one.
  std::size_t total = 0;
  for (std::size_t i = 1; i < msgs.size(); ++i)
    total += msgs[i].size();
  bool oversized = total > limits.max_message_bytes || msgs.size() - 1 > limits.max_frames ||
                   (msgs.size() > 2 && msgs[2].size() > limits.max_header_bytes);
  auto frames = to_strings(msgs, 1);
  RequestTiming timing;
  auto msg = decode_with_deadline(frames, limits, &timing);
  if (!msg.is_ok()) {
    reject(routing, id, msg.status(), oversized ? "oversized" : "malformed", peer);
    return;
  }
  if (!in_time(*msg, timing, peer)) return;
  msg->peer = peer;
  auto h = handlers.find(msg->type);
  if (h == handlers.end()) {
    reject(routing, id, protocol_error("unknown message type '" + msg->type + "'"), "malformed",
           peer);
    return;
  }
  const Roles& roles = h->second.roles;
  if (security.curve() && !roles.empty() &&
      std::find(roles.begin(), roles.end(), peer.role) == roles.end()) {
    std::string allowed;
    for (const auto& r : roles)
      allowed += (allowed.empty() ? "" : ", ") + r;
    reject(routing, id,
           permission_denied(peer.identity + " (role " + peer.role + ") may not send '" +
                             msg->type + "' (allowed: " + allowed + ")"),
           "role", peer);
    return;
  }
  auto state = std::make_shared<Responder::State>();
  state->server = this;
  state->alive = alive;
  state->routing_id = std::move(routing);
  state->request_id = id;
  state->type = msg->type;
  state->oneway = env->kind == MessageKind::kOneway;
  if (state->oneway)
    ++stats.oneway;
  else
    ++stats.requests;
  Responder responder(state);
  try {
    h->second.handler(msg.value(), responder);
  } catch (const std::exception& e) {
    // Handlers convert their own errors; an exception is a bug, reported to the caller as such.
    log::error("server {}: handler for '{}' threw: {}", endpoint, state->type, e.what());
    responder.respond(internal_error("handler for '" + state->type + "' failed: " + e.what()));
  }
}

bool Server::Impl::in_time(const Message& msg, const RequestTiming& timing, const Peer& peer) {
  if (timing.deadline_ms <= 0) return true;
  ArrivedRequest a;
  a.now_ms = unix_ms();
  a.deadline_ms = timing.deadline_ms;
  a.timeout_ms = timing.timeout_ms;
  a.waited_at_most_ms = std::chrono::duration_cast<Millis>(Clock::now() - queue_empty_at).count();
  const DeadlineCheck check = check_deadline(a, kDeadlineSlackMs);
  switch (check.verdict) {
    case DeadlineVerdict::kServe:
      return true;
    case DeadlineVerdict::kExpired: {
      // Its sender gave up on it: dropped unread, with no reply (nobody waits for one).
      static Counter& expired = process_metrics().counter(
          "sluice_requests_expired_total",
          "requests dropped unread: they arrived after the deadline their sender set");
      expired.inc();
      log::debug("server {}: dropped '{}' from {}: {} ms past its deadline", endpoint, msg.type,
                 peer.describe(), a.now_ms - a.deadline_ms);
      return false;
    }
    case DeadlineVerdict::kClockBehind:
    case DeadlineVerdict::kClockAhead:
      break;
  }
  // The peer's clock is off: its deadline says nothing about how long it waits. Served (as a
  // request without a deadline is), counted, and said once per peer.
  static Counter& skewed = process_metrics().counter(
      "sluice_requests_clock_skew_total",
      "requests served whose sender's clock is off by more than the deadline allowance");
  skewed.inc();
  const bool behind = check.verdict == DeadlineVerdict::kClockBehind;
  const std::string who = peer.describe();
  if (skew_warned.size() < kMaxSkewWarnings &&
      skew_warned.insert(who + (behind ? " behind" : " ahead")).second) {
    log::warn(
        "server {}: the clock of {} is at least {:.1f} s {} this host's ('{}' with a {} ms "
        "time-out has a deadline {} ms {}); its requests are served without their deadlines "
        "(sluice_requests_clock_skew_total counts them); synchronize the hosts' clocks",
        endpoint, who, static_cast<double>(check.skew_ms) / 1000.0, behind ? "behind" : "ahead of",
        msg.type, a.timeout_ms, behind ? a.now_ms - a.deadline_ms : a.deadline_ms - a.now_ms,
        behind ? "in the past" : "ahead");
  }
  return true;
}

void Server::Impl::drain() {
  if (draining) return;  // drain_socket refuses it: another drain is running
  // A drain long after the last one (the process was stopped, or its loop busy elsewhere): what
  // was sent meanwhile may still be on its way into the socket (libzmq's I/O thread, the kernel),
  // so finding it empty says nothing of when its messages came, now or for kGapSettle after.
  const bool after_gap = Clock::now() - drained_at > 2 * kSafetyDrain;
  std::weak_ptr<bool> a = alive;
  drain_socket(sock, draining, alive, "server", endpoint,
               [this](std::vector<zmq::message_t>& msgs) { dispatch(msgs); });
  if (a.expired()) return;  // a handler destroyed the server
  drained_at = Clock::now();
  if (after_gap) gap_ended_at = drained_at;
  // It ended with nothing left to read, unless a gap ended too recently for that to be known.
  if (!after_gap && drained_at - gap_ended_at > kGapSettle) queue_empty_at = drained_at;
}

// Answers libzmq's ZAP requests (RFC 27): version, request id, domain, address, routing id,
// mechanism, then the credentials (for CURVE the client's 32-byte public key). A member's key is
// admitted with its identity as the User-Id; any other key is refused (status 400), counted and
// logged. The REP socket is strictly request-reply, so every request gets exactly one reply.
void Server::Impl::drain_zap() {
  if (!zap) return;
  try {
    while (zap->get(zmq::sockopt::events) & ZMQ_POLLIN) {
      std::vector<zmq::message_t> req;
      if (!zmq::recv_multipart(*zap, std::back_inserter(req), zmq::recv_flags::dontwait)) break;
      std::string request_id = req.size() > 1 ? req[1].to_string() : std::string();
      std::string address = req.size() > 3 ? req[3].to_string() : std::string();
      std::string status = "400", text = "not a member of this job", user;
      if (req.size() < 7 || req[0].to_string() != "1.0") {
        text = "malformed ZAP request";
      } else if (req[5].to_string() != "CURVE") {
        text = "mechanism " + req[5].to_string() + " is not allowed";
      } else if (req[6].size() == 32) {
        char z85[41] = {};
        zmq_z85_encode(z85, static_cast<const std::uint8_t*>(req[6].data()), 32);
        if (const Member* m = security.members->by_key(z85)) {
          status = "200";
          text = "OK";
          user = m->identity;
        } else {
          text = "key " + std::string(z85) + " is not a member of this job";
        }
      }
      if (status != "200") {
        ++stats.refused;
        count_refusal("unauthenticated", "unauthenticated peer " + address,
                      "server " + endpoint + ": handshake refused: " + text);
      }
      std::vector<zmq::const_buffer> rep{zmq::buffer(std::string_view("1.0")),
                                         zmq::buffer(request_id),
                                         zmq::buffer(status),
                                         zmq::buffer(text),
                                         zmq::buffer(user),
                                         zmq::buffer(std::string_view())};
      if (!zmq::send_multipart(*zap, rep, zmq::send_flags::dontwait)) {
        log::error("server {}: ZAP reply not sent", endpoint);
      }
    }
  } catch (const zmq::error_t& e) {
    log::error("server {}: ZAP handler failed: {}", endpoint, e.what());
  }
}

// A peer that fails the CURVE handshake before ZAP is asked (a client in plain mode, or one that
// holds another server's public key, whose HELLO this server cannot open) is refused inside
// libzmq; the socket monitor reports it, and it is counted as unauthenticated. Refusals at ZAP
// are counted there (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH is not watched).
void Server::Impl::drain_monitor() {
  if (!monitor) return;
  try {
    while (monitor->get(zmq::sockopt::events) & ZMQ_POLLIN) {
      std::vector<zmq::message_t> ev;
      if (!zmq::recv_multipart(*monitor, std::back_inserter(ev), zmq::recv_flags::dontwait)) {
        break;
      }
      if (ev.empty() || ev[0].size() < 2) continue;
      std::uint16_t event = 0;
      std::memcpy(&event, ev[0].data(), sizeof event);  // host order, as libzmq writes it
      if (event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL &&
          event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        continue;
      }
      ++stats.refused;
      count_refusal("unauthenticated", "a peer of " + endpoint + " that failed the handshake",
                    "server " + endpoint +
                        ": CURVE handshake failed (a client without keys, or one that expects "
                        "another server's key)");
    }
  } catch (const zmq::error_t& e) {
    log::error("server {}: socket monitor failed: {}", endpoint, e.what());
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  *impl_->alive = false;
  impl_->alive.reset();
  impl_->safety.reset();
  impl_->watch.reset();
  impl_->zap_watch.reset();
  impl_->monitor_watch.reset();
}

Result<std::unique_ptr<Server>> Server::create(EventLoop& loop, const std::string& endpoint,
                                               const Security& security, MessagingLimits limits) {
  SLUICE_TRY(check_curve_settings(security, true).with_context("server " + endpoint));
  auto impl = std::make_unique<Impl>(loop, security, limits);
  try {
    if (security.curve()) {
      // The handler is bound before the server binds: no connection is ever accepted unasked.
      impl->zap.emplace(*impl->own_ctx, zmq::socket_type::rep);
      impl->zap->set(zmq::sockopt::linger, 0);
      impl->zap->bind(kZapEndpoint);
      impl->sock.set(zmq::sockopt::curve_server, true);
      set_curve_keys(impl->sock, security.keys);
      impl->sock.set(zmq::sockopt::zap_domain, kZapDomain);
      // The context is this server's own, so one fixed inproc name serves.
      constexpr const char* kMonitor = "inproc://sluice-server-monitor";
      if (zmq_socket_monitor(
              impl->sock.handle(), kMonitor,
              ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) != 0) {
        throw zmq::error_t();
      }
      impl->monitor.emplace(*impl->own_ctx, zmq::socket_type::pair);
      impl->monitor->set(zmq::sockopt::linger, 0);
      impl->monitor->connect(kMonitor);
    } else {
      warn_plain("server " + endpoint);
    }
    impl->sock.set(zmq::sockopt::linger, 0);
    // Hard cap well above the soft limit: messages between the two get an error reply; ZeroMQ
    // drops the connection of a peer that sends a single frame beyond the hard cap.
    impl->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_message_bytes * 4));
    impl->sock.bind(endpoint);
    impl->endpoint = impl->sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return unavailable("cannot bind " + endpoint + ": " + e.what());
  }
  int fd = impl->sock.get(zmq::sockopt::fd);
  Impl* raw = impl.get();
  std::unique_ptr<Server> server(new Server(std::move(impl)));
  raw->handlers[msg::kPing].handler = [](const Message& req, Responder r) {
    Message pong(msg::kPong);
    pong.body["pid"] = static_cast<int>(::getpid());
    pong.body["protocol_version"] = kProtocolVersion;
    if (req.body.contains("echo")) pong.body["echo"] = req.body["echo"];
    pong.blobs = req.blobs;
    r.respond(std::move(pong));
  };
  raw->watch = loop.watch_readable(fd, [raw] { raw->drain(); });
  if (raw->zap) {
    int zfd = raw->zap->get(zmq::sockopt::fd);
    raw->zap_watch = loop.watch_readable(zfd, [raw] { raw->drain_zap(); });
    int mfd = raw->monitor->get(zmq::sockopt::fd);
    raw->monitor_watch = loop.watch_readable(mfd, [raw] { raw->drain_monitor(); });
  }
  raw->safety = loop.every(kSafetyDrain, [raw] {
    raw->drain_zap();
    raw->drain_monitor();
    raw->drain();
  });
  raw->post_drain();
  log::debug("server: listening on {} ({})", raw->endpoint, security.curve() ? "curve" : "plain");
  return server;
}

const std::string& Server::endpoint() const {
  return impl_->endpoint;
}

void Server::on(const std::string& type, Handler handler, Roles roles) {
  impl_->handlers[type] = Impl::Entry{std::move(handler), std::move(roles)};
}

void Server::on_sync(const std::string& type, SyncHandler handler, Roles roles) {
  on(
      type, [h = std::move(handler)](const Message& req, Responder r) { r.respond(h(req)); },
      std::move(roles));
}

bool Server::authenticates() const {
  return impl_->security.curve();
}

const Server::Stats& Server::stats() const {
  return impl_->stats;
}

// ---------------------------------------------------------------- client

struct Client::Impl {
  Impl(EventLoop& l, std::string ep, MessagingLimits li)
      : loop(l), sock(zmq_ctx(), zmq::socket_type::dealer), endpoint(std::move(ep)), limits(li) {}

  struct Pending {
    Callback done;
    std::unique_ptr<EventLoop::Timer> timer;
    std::string type;
    // A request no connection took yet: its frames, offered again by `retry` until sent.
    std::vector<std::string> unsent;
    std::unique_ptr<EventLoop::Timer> retry;
  };

  EventLoop& loop;
  zmq::socket_t sock;
  std::string endpoint;
  MessagingLimits limits;
  std::uint64_t next_id = 1;
  std::map<std::uint64_t, Pending> pending;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::unique_ptr<EventLoop::FdWatch> watch;
  std::unique_ptr<EventLoop::Timer> safety;
  bool draining = false;

  void drain();
  void receive(std::vector<zmq::message_t>& msgs);  // one reply, from drain()
  void complete(std::uint64_t id, Result<Message> r) {
    auto it = pending.find(id);
    if (it == pending.end()) {
      log::debug("client {}: reply to request {} arrived after it ended", endpoint, id);
      return;
    }
    auto done = std::move(it->second.done);
    pending.erase(it);
    done(std::move(r));
  }
  // Offers an unsent request again; stops offering once a connection took it.
  void offer_again(std::uint64_t id) {
    auto it = pending.find(id);
    if (it == pending.end() || it->second.unsent.empty()) return;
    bool would_block = false;
    Status s = send_frames(sock, it->second.unsent, nullptr, &would_block);
    if (would_block) return;
    it->second.unsent.clear();
    it->second.retry.reset();  // safe inside its own callback (the loop holds a copy of it)
    if (!s.is_ok()) complete(id, s.with_context("request to " + endpoint));
    post_drain();
  }
  void post_drain() {
    std::weak_ptr<bool> a = alive;
    loop.post([this, a] {
      if (!a.expired()) drain();
    });
  }
};

void Client::Impl::drain() {
  drain_socket(sock, draining, alive, "client", endpoint,
               [this](std::vector<zmq::message_t>& msgs) { receive(msgs); });
}

void Client::Impl::receive(std::vector<zmq::message_t>& msgs) {
  auto frames = to_strings(msgs, 0);
  if (frames.empty()) return;
  auto env = decode_envelope(frames[0]);
  if (!env.is_ok()) {
    log::warn("client {}: dropped a malformed reply: {}", endpoint, env.status().to_string());
    return;
  }
  auto msg = decode_message(frames, limits);
  if (!msg.is_ok()) {
    complete(env->request_id, msg.status().with_context("reply from " + endpoint));
  } else if (env->error) {
    complete(env->request_id, status_from_error(msg.value()).with_context(endpoint));
  } else {
    complete(env->request_id, std::move(msg).value());
  }
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  *impl_->alive = false;
  impl_->alive.reset();
  impl_->safety.reset();
  impl_->watch.reset();
  impl_->pending.clear();  // timers cancelled; callbacks dropped uncalled
}

Result<std::unique_ptr<Client>> Client::create(EventLoop& loop, const std::string& endpoint,
                                               const Security& security, MessagingLimits limits) {
  SLUICE_TRY(check_curve_settings(security, false).with_context("client of " + endpoint));
  auto impl = std::make_unique<Impl>(loop, endpoint, limits);
  try {
    if (security.curve()) {
      impl->sock.set(zmq::sockopt::curve_serverkey, security.server_key);
      set_curve_keys(impl->sock, security.keys);
    } else {
      warn_plain("client of " + endpoint);
    }
    impl->sock.set(zmq::sockopt::linger, 0);
    impl->sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits.max_message_bytes * 4));
    // Nothing is queued for a peer that is not connected: a request is taken only by a completed
    // connection (until then it waits in `unsent` until its time-out, then is dropped), and what
    // was queued on a connection that dropped goes with it. Without this, a restarted server was
    // handed every request queued while it was down, each stale.
    impl->sock.set(zmq::sockopt::immediate, true);
    impl->sock.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return invalid_argument("cannot connect to " + endpoint + ": " + e.what());
  }
  int fd = impl->sock.get(zmq::sockopt::fd);
  Impl* raw = impl.get();
  std::unique_ptr<Client> client(new Client(std::move(impl)));
  raw->watch = loop.watch_readable(fd, [raw] { raw->drain(); });
  raw->safety = loop.every(kSafetyDrain, [raw] { raw->drain(); });
  return client;
}

const std::string& Client::endpoint() const {
  return impl_->endpoint;
}

void Client::request(Message msg, Millis timeout, Callback done) {
  Impl* impl = impl_.get();
  std::uint64_t id = impl->next_id++;
  Envelope env;
  env.kind = MessageKind::kRequest;
  env.request_id = id;
  // A time-out too long to add (a "forever") sets no deadline.
  const std::int64_t now_ms = unix_ms();
  const std::int64_t deadline =
      timeout.count() > 0 && timeout.count() < std::numeric_limits<std::int64_t>::max() - now_ms
          ? now_ms + static_cast<std::int64_t>(timeout.count())
          : 0;
  auto frames =
      encode_with_deadline(env, msg, RequestTiming{deadline, deadline > 0 ? timeout.count() : 0});
  bool would_block = false;
  Status s = send_frames(impl->sock, frames, nullptr, &would_block);
  impl->post_drain();
  if (!s.is_ok() && !would_block) {
    Status err = s.with_context("request '" + msg.type + "' to " + impl->endpoint);
    impl->loop.post([done = std::move(done), err] { done(err); });
    return;
  }
  auto& p = impl->pending[id];
  p.done = std::move(done);
  p.type = msg.type;
  // No connection took it yet: to the caller this is a peer that does not answer (yet), so the
  // request waits for one until its time-out like any other, rather than failing at once.
  if (would_block) {
    p.unsent = std::move(frames);
    p.retry = impl->loop.every(kUnsentRetry, [impl, id] { impl->offer_again(id); });
  }
  p.timer = impl->loop.after(timeout, [impl, id, timeout, type = msg.type] {
    auto it = impl->pending.find(id);
    const bool sent = it != impl->pending.end() && it->second.unsent.empty();
    impl->complete(id, timeout_error("request '" + type + "' to " + impl->endpoint +
                                     " timed out after " + std::to_string(timeout.count()) +
                                     (sent ? " ms (is the peer running?)"
                                           : " ms, never sent: no connection to the peer came up "
                                             "(is it running, and does it accept this key?)")));
  });
}

Status Client::send(Message msg) {
  Envelope env;
  env.kind = MessageKind::kOneway;
  env.request_id = impl_->next_id++;
  Status s = send_frames(impl_->sock, encode_frames(env, msg), nullptr);
  impl_->post_drain();
  return s.with_context("message '" + msg.type + "' to " + impl_->endpoint);
}

Result<Message> Client::ping(Millis timeout) {
  return call(Message(msg::kPing), timeout);
}

Result<Message> Client::call(Message msg, Millis timeout) {
  std::optional<Result<Message>> out;
  std::uint64_t id = impl_->next_id;  // the id request() is about to use
  request(std::move(msg), timeout, [&out](Result<Message> r) { out.emplace(std::move(r)); });
  // The request's own timer ends it; the margin only guards against a stuck loop.
  constexpr Millis kStuckLoopMargin{1000};
  impl_->loop.run_until([&out] { return out.has_value(); }, timeout + kStuckLoopMargin);
  if (!out) {
    impl_->pending.erase(id);  // its callback refers to this frame: never call it later
    return timeout_error("request to " + impl_->endpoint + " did not finish");
  }
  return std::move(*out);
}

std::size_t Client::pending() const {
  return impl_->pending.size();
}

}  // namespace sluice::core
