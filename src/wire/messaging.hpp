// ZeroMQ messaging between roles, driven from the process event loop.
//
// Wire format (one ZeroMQ multipart message; ROUTER adds its routing frame in front):
//   frame 0: envelope, 16 bytes little-endian: magic "SLCE", u16 protocol version, u8 kind
//            (1 request, 2 reply, 3 one-way), u8 flags (bit 0: error reply), u64 request id
//   frame 1: JSON header {"type": "...", "body": {...}}
//   frame 2..: optional binary frames (blobs)
// A malformed envelope (wrong magic or version, truncated frame, missing header, bad JSON),
// an oversized message, or an unknown type gets an error reply and changes nothing; the server
// goes on serving others.
//
// Security (wire/security.hpp): every Server and Client is created with a core::Security. In
// curve mode a server admits only the job's members: libzmq asks this server's ZAP handler (an
// inproc REP socket in the server's own ZeroMQ context, driven from the loop like the server,
// RFC 27) about each connecting key, and the handler answers with the member's identity as the
// ZAP User-Id; every request then carries its authenticated peer (Message::peer) and a handler
// registered for some roles is refused, before it runs, with a permission_denied reply when the
// peer has another role. A client in curve mode knows the server's public key: a server with
// another key never completes the handshake, and the client's requests time out. In plain mode
// (explicit, loud) nobody is authenticated and roles are not checked. Every refusal (a key that
// is not a member, a wrong role, malformed, oversized) is counted in sluice_refused_total{reason}
// and logged once per peer and reason (core::count_refusal).
//
// Thread safety: Server and Client belong to the loop thread; create, use and destroy them there.
// They hand `this` to loop callbacks, so they are neither copyable nor movable.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "wire/security.hpp"

namespace sluice::core {

inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kEnvelopeBytes = 16;

// Who sent a received request, as the server authenticated it. Not sent on the wire: the server
// fills it from the connection (the ZAP User-Id), so a peer cannot claim another identity.
struct Peer {
  bool authenticated = false;  // curve mode: the peer's key is the job member's below
  std::string identity;        // e.g. "relay-0"; empty in plain mode
  std::string role;            // e.g. "relay" (wire/security.hpp); empty in plain mode
  std::string address;         // the peer's IP address, as ZeroMQ reports it (may be empty)
  // "relay-0 (relay)" or "unauthenticated peer 127.0.0.1", for messages.
  std::string describe() const;
};

// Message types are named constants beside their structs, in each protocol's `msg` namespace,
// as character arrays: they convert to std::string (a Message's type, a handler's registration)
// and to std::string_view alike. The built-in ones:
namespace msg {
inline constexpr char kPing[] = "sys.ping";  // answered by every Server, for any member
inline constexpr char kPong[] = "sys.pong";  // its reply
}  // namespace msg

// What a decoding error names for a reply to `type`: "store.plan reply".
inline std::string reply_name(std::string_view type) {
  return std::string(type) + " reply";
}

struct Message {
  std::string type;  // e.g. weightstore::msg::kRegister
  nlohmann::json body = nlohmann::json::object();
  std::vector<std::string> blobs;  // binary frames, each any bytes
  Peer peer;                       // received requests only (see Peer)

  Message() = default;
  Message(std::string t, nlohmann::json b = nlohmann::json::object())
      : type(std::move(t)), body(std::move(b)) {}
};

struct MessagingLimits {
  // All frames together; larger gets an error reply. Each socket's ZMQ_MAXMSGSIZE is set to 4x
  // this: a single frame beyond that is dropped by ZeroMQ with its connection before it is
  // received whole, and one between the two gets an error reply (the peer learns why).
  std::size_t max_message_bytes = 64u << 20;
  std::size_t max_header_bytes = 1u << 20;  // the JSON header frame
  std::size_t max_frames = 64;              // envelope + header + blobs
  std::size_t max_json_depth = 64;          // nesting of the header's arrays and objects
};

// Replies to one request. Copyable; the first respond() sends, later ones are ignored. Dropping
// every copy without responding leaves the client to time out, so handlers always respond.
class Responder {
 public:
  struct State;
  explicit Responder(std::shared_ptr<State> s) : s_(std::move(s)) {}
  void respond(Result<Message> reply) const;
  bool is_oneway() const;

 private:
  std::shared_ptr<State> s_;
};

class Server {
 public:
  using Handler = std::function<void(const Message& request, Responder responder)>;
  using SyncHandler = std::function<Result<Message>(const Message& request)>;
  // The roles that may send a message type; empty: any member of the job.
  using Roles = std::vector<std::string>;

  // Binds `endpoint` (e.g. "tcp://127.0.0.1:5555", or "tcp://127.0.0.1:*" for any free port).
  // In curve mode `security` needs the key pair and the members; invalid_argument without them.
  static Result<std::unique_ptr<Server>> create(EventLoop& loop, const std::string& endpoint,
                                                const Security& security,
                                                MessagingLimits limits = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound endpoint with the real port.
  const std::string& endpoint() const;

  // Registers a handler for a message type (replacing any earlier one), for the peers with one
  // of `roles` (empty: any member). In curve mode a request from another role is refused with a
  // permission_denied reply before the handler runs. "sys.ping" is built in, for any member.
  void on(const std::string& type, Handler handler, Roles roles = {});
  void on_sync(const std::string& type, SyncHandler handler, Roles roles = {});

  // Whether this server authenticates its peers (curve mode).
  bool authenticates() const;

  struct Stats {
    std::uint64_t requests = 0;
    std::uint64_t oneway = 0;
    std::uint64_t rejected = 0;  // malformed, oversized, unknown type
    // A key that is not a member (at ZAP), a failed handshake (no keys, or another server's
    // key), a role not allowed.
    std::uint64_t refused = 0;
  };
  const Stats& stats() const;

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Client {
 public:
  using Callback = std::function<void(Result<Message> reply)>;

  // Connects to `endpoint`. Connecting never blocks: a peer that is not there yet (or dead) shows
  // up as a request timeout, and so does a server whose key is not `security.server_key` (curve
  // mode; invalid_argument when the key pair or server_key is missing).
  static Result<std::unique_ptr<Client>> create(EventLoop& loop, const std::string& endpoint,
                                                const Security& security,
                                                MessagingLimits limits = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& endpoint() const;

  // Sends a request; `done` runs exactly once on the loop thread: with the reply, with the
  // peer's error (an error reply becomes a Status with the peer's code and message), or with a
  // timeout error after `timeout`. Destroying the client drops pending requests without
  // calling their callbacks.
  void request(Message msg, Millis timeout, Callback done);

  // Sends a one-way message (no reply). Fails only if the local send queue is full.
  Status send(Message msg);

  // Blocking request for command-line tools and tests: runs the loop until the reply or the
  // timeout. Never call it from a loop callback.
  Result<Message> call(Message msg, Millis timeout);

  // The built-in sys.ping, blocking as call(): the peer's reply (its pid and protocol version).
  Result<Message> ping(Millis timeout);

  std::size_t pending() const;

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Encodes/decodes the frames of one message (exposed for tests and for tools that speak the
// protocol over raw sockets). decode checks sizes before reading.
enum class MessageKind : std::uint8_t { kRequest = 1, kReply = 2, kOneway = 3 };
struct Envelope {
  std::uint16_t version = kProtocolVersion;
  MessageKind kind = MessageKind::kRequest;
  bool error = false;
  std::uint64_t request_id = 0;
};
std::vector<std::string> encode_frames(const Envelope& env, const Message& msg);
Result<Envelope> decode_envelope(const std::string& frame0);
Result<Message> decode_message(const std::vector<std::string>& frames, const MessagingLimits& lim);

// The body of an error reply, and the Status it maps back to.
Message error_message(const Status& status);
Status status_from_error(const Message& msg);

}  // namespace sluice::core
