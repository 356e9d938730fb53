// Chunk streams: reads of a holder's registered memory over a plain TCP connection, for readers
// that reach the holder over TCP only.
//
// Why: UCX 1.13's tcp transport has no GET. The holder's own UCX worker answers each
// GET request with an active message, and when the reader dies while such answers are queued, UCX
// aborts the holder (see get_window() in transfer_source.cpp for the two paths). A chunk stream
// keeps the same shape, a reader-driven request for (region, offset, length) answered from
// registered memory by the holder's event loop, on a socket sluice owns: a reader that dies is a
// closed connection, and the holder drops it and goes on serving everyone else.
//
// The wire format is wire/chunk_format.hpp: pipelined requests, each answered in order by a
// reply header and, when the holder serves it, the bytes asked for. An encrypted connection
// (wire/stream_crypto.hpp) opens with a hello from the reader ("SLCH") and the holder's accept
// ("SLCA"); from then on each direction is a sequence of AEAD records whose plaintext is exactly
// that clear byte stream. A reader's record holds 1 to 64 whole requests; a holder's record holds
// at most 256 KiB of one reply (its header and the first part of its payload, or later payload). A
// record that fails its tag, a malformed record, and a clear request to a holder that serves
// encrypted streams only (or a hello to one that serves clear streams only) close the connection,
// the last two after a reply that says why. The token is 16 random bytes per exposed region, handed
// to readers in the region's descriptor (so only those given a read plan can name it); a range is
// checked against what the holder exposed, overflow-safe. Nothing a peer sends can write to the
// holder's memory.
//
// The server is wire/chunk_server.cpp, the reader wire/chunk_client.cpp.
//
// Thread safety: loop thread only. Neither class is copyable or movable (both hand `this` to loop
// callbacks).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "wire/chunk_format.hpp"
#include "wire/stream_crypto.hpp"

namespace sluice::core {

// What a chunk server allows its peers (anyone who could connect could stall it). A
// reader keeps one connection per read and pipelines ReadOptions::max_in_flight_per_source
// (8 by default) requests on it, so the defaults leave a real reader far from every limit.
struct ChunkServerOptions {
  // Connections open at once, in all (>= 1). When full, the connection idle longest (nothing
  // asked, nothing owed) is closed to admit a new one; with none idle, the new one is refused.
  std::uint32_t max_connections = 1024;
  // Connections open at once from one peer address (>= 1); more are refused on accept. A host
  // opens one per read of this holder in progress (one per rollout or relay reading it).
  std::uint32_t max_connections_per_peer = 64;
  // A connection that moves no byte either way for this long is closed (ms, >= 1).
  std::uint32_t idle_timeout_ms = 60000;
  // A request's 48 bytes (on an encrypted connection: the hello, and each record) must all arrive
  // within this of its first byte (ms, >= 1).
  std::uint32_t request_timeout_ms = 10000;
  // On a full descriptor table (EMFILE, ENFILE) or no memory for a socket, accepting stops for
  // this long (ms, >= 1) rather than failing again at once.
  std::uint32_t accept_backoff_ms = 200;
  // A warning that repeats (accept failing, connections refused) is logged at most once per
  // this interval, with a count of the ones left out (ms, >= 1).
  std::uint32_t warn_interval_ms = 10000;
  // Work done for one connection in one loop callback (each >= 1): requests read, reply bytes
  // written; what is left waits for a later turn, so timers and other peers are not starved.
  std::uint32_t requests_per_turn = 64;
  std::uint64_t bytes_per_turn = 8ull << 20;
  // Connections accepted in one loop callback (>= 1).
  std::uint32_t accepts_per_turn = 64;
  // Requests refused on one connection (unknown region, range outside it) before it is closed.
  // A reader whose copy was withdrawn meets a few (its requests in flight: 8 by default); a
  // client whose requests keep failing is closed soon, so that it cannot hold a place for long.
  std::uint32_t max_refused_per_connection = 16;

  template <typename V>
  void describe(V& v) {
    v("max_connections", max_connections, "connections open at once in all (>= 1)");
    v("max_connections_per_peer", max_connections_per_peer,
      "connections open at once from one address (>= 1)");
    v("idle_timeout_ms", idle_timeout_ms, "a connection that moves nothing this long is closed");
    v("request_timeout_ms", request_timeout_ms,
      "a request must arrive whole within this of its first byte");
    v("accept_backoff_ms", accept_backoff_ms, "pause in accepting when descriptors run out");
    v("warn_interval_ms", warn_interval_ms, "a repeated warning is logged at most this often");
    v("requests_per_turn", requests_per_turn, "requests read per connection per loop callback");
    v("bytes_per_turn", bytes_per_turn, "reply bytes written per connection per loop callback");
    v("accepts_per_turn", accepts_per_turn, "connections accepted per loop callback");
    v("max_refused_per_connection", max_refused_per_connection,
      "refused requests before a connection is closed");
  }
  Status validate() const;
};

// The address a chunk server binds for TransferOptions::stream_host `configured`: itself unless
// it is "auto". For "auto": loopback when `reach` (an endpoint of the job that every host of it
// reaches, such as the store's "tcp://host:port") is on this host's loopback, else the address
// of the interface that routes toward `reach`; with `reach` empty, the default route's
// interface, or loopback where there is none. Errors: invalid_argument when `reach` does not
// resolve, unavailable when no route leads there.
Result<std::string> chunk_server_host(const std::string& configured, const std::string& reach);

class ChunkServer {
 public:
  // Listens on `host` (an IPv4 address; "0.0.0.0" for every interface) on a free port, serving
  // connections as `crypto` says: clear only (the default), encrypted only, or either. Encrypted
  // connections are from readers whose static key `keys` lists as a member that may read.
  // invalid_argument for options that fail validate(), or for encryption without keys.
  static Result<std::unique_ptr<ChunkServer>> create(EventLoop& loop, const std::string& host,
                                                     ChunkServerOptions opts = {},
                                                     StreamCrypto crypto = StreamCrypto::kClear,
                                                     std::shared_ptr<const StreamKeys> keys = {});
  StreamCrypto crypto() const;
  ~ChunkServer();
  ChunkServer(const ChunkServer&) = delete;
  ChunkServer& operator=(const ChunkServer&) = delete;

  // "ip:port" entries a reader may connect to, in the order to try them: the bound address, or
  // for 0.0.0.0 every IPv4 interface address that is up, loopback last.
  const std::vector<std::string>& addresses() const;

  // Serves [data, data + size) under a new random token (kStreamTokenBytes) until withdraw().
  // The memory must stay valid until then.
  Result<std::string> expose(const std::uint8_t* data, std::uint64_t size);
  // Stops serving `token`. A connection with a reply from that memory still being written is
  // closed first: once this returns, nothing reads the memory.
  void withdraw(const std::string& token);

  struct Stats {
    std::uint64_t requests = 0;
    std::uint64_t bytes = 0;
    std::uint64_t refused = 0;                // unknown region, range outside it, malformed request
    std::uint64_t connections_lost = 0;       // closed by the reader mid-stream, or reset
    std::uint64_t connections_refused = 0;    // over a cap, closed on accept
    std::uint64_t connections_timed_out = 0;  // idle, a request too slow, or made room for another
    std::uint64_t accept_pauses = 0;          // times accepting stopped for lack of descriptors
    std::uint64_t connections = 0;            // open now
    std::uint64_t handshakes = 0;             // encrypted connections established
    // Hellos refused (a stranger's key, a role that may not read, no common cipher, or a hello
    // to a clear-only server) and clear requests refused by an encrypted-only server.
    std::uint64_t handshakes_refused = 0;
    std::uint64_t records_refused = 0;  // records that failed their tag or were malformed
  };
  Stats stats() const;

  struct Impl;

 private:
  explicit ChunkServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The reader's end: one connection to one holder.
class ChunkStream {
 public:
  using Done = std::function<void(Status)>;

  // Starts connecting to the first of `addresses` that accepts (each within connect_timeout).
  // With `keys`, the connection is encrypted: the handshake (within another connect_timeout)
  // agrees its keys, and the holder's static key must be a member that may serve and, when
  // `holder` names a holder id, the member that id belongs to (Members::owns_holder_id):
  // permission_denied otherwise. Gets may be issued at once; they are sent once connected (and,
  // encrypted, once the handshake is done).
  static Result<std::unique_ptr<ChunkStream>> connect(EventLoop& loop,
                                                      std::vector<std::string> addresses,
                                                      std::string token, Millis connect_timeout,
                                                      std::shared_ptr<const StreamKeys> keys = {},
                                                      std::string holder = {});
  // Drops every pending get without calling it.
  ~ChunkStream();
  ChunkStream(const ChunkStream&) = delete;
  ChunkStream& operator=(const ChunkStream&) = delete;

  // Reads `length` bytes at `offset` of the holder's region into dst (which must stay valid
  // until `done` runs). `done` runs exactly once, on a later loop turn: ok once every byte is in
  // dst; not_found or out_of_range when the holder refused the request; unavailable when the
  // connection failed (every pending get fails with it); on an encrypted connection data_loss
  // when a record failed its tag, permission_denied when the holder refused this reader or is
  // not a member; failed_precondition when the holder and this reader disagree on encryption.
  void get(std::uint64_t offset, std::uint64_t length, std::uint8_t* dst, Done done);
  // Closes the connection: every pending get fails with `why`, on a later loop turn. No byte is
  // written to any dst afterwards.
  void close(Status why);
  bool failed() const;

  struct Impl;

 private:
  explicit ChunkStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
