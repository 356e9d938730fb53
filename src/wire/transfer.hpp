// The data plane: reader-driven one-sided GET of chunks over UCX (ucp), on the process event loop.
//
// A holder registers memory (RegisteredBuffer) and hands out RegionDescriptors (worker address,
// base address, length, packed rkey). A reader asks the TransferEngine to read a list of chunks
// from one or more sources into its own registered buffer: at most max_in_flight_per_source
// GETs per source, chunks striped across sources by who has a free slot, every chunk verified on
// arrival (against its signed digest, or its checksum where TransferOptions::trust_same_user
// allows), a failed or corrupt chunk retried from another source, a timeout on every
// operation and on the whole read, and progress reported as bytes done of total.
//
// UCX types stay out of this header. Transport choice comes from UCX's own environment
// (UCX_TLS and friends). Where the user has not set them, the process's edge (the CLI, a test's
// main) sets the measured better defaults of ucx_env_defaults() in the environment before the
// first engine is made, and never overrides what the user set. (ucp_config_modify would avoid
// touching the environment, but UCX 1.13 applies a TCP_* key to every transport's table, warns
// "invalid configurations", and measured no faster than UCX's default segment size with it.)
//
// Thread safety: a TransferEngine, its buffers and its reads belong to the loop thread.
// The engine hands `this` to UCX callbacks: not copyable, not movable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/region_descriptor.hpp"

namespace sluice::core {

class TransferEngine;

// Memory registered with UCX: page-aligned memory this buffer owns (allocate) or memory the
// caller owns and keeps alive longer than the buffer (wrap).
class RegisteredBuffer {
 public:
  ~RegisteredBuffer();
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  // CUDA device memory (TransferEngine::wrap_device): the CPU must not touch data().
  bool device() const { return device_; }
  // Page-locks this host buffer for CUDA copies (core::PinnedHost) until the buffer goes; the pin
  // is released before the memory is. Idempotent. failed_precondition without CUDA or a device,
  // or for a device buffer; internal with CUDA's error. Pinning takes time (about a second per
  // ten GiB): do it once, ahead of the copies. No copy may use the buffer when it is destroyed.
  Status pin_for_device();
  bool pinned() const;
  // The descriptor a reader needs to GET from this buffer: not verified.
  RegionDescriptor descriptor() const;
  // The same, saying that every byte now in the buffer is one the holder verified against its
  // signed digest or made itself (RegionDescriptor::verified). A holder hands it out only for
  // such a copy, and stops before it writes other bytes into the buffer.
  RegionDescriptor verified_descriptor() const;
  // Serves this buffer's chunk stream under a new token and withdraws the old one (a connection
  // with a reply from it still being written is closed): a holder that reuses the buffer for
  // other bytes calls it first, so that a reader with the old descriptor is refused over the
  // stream rather than served the new bytes. descriptor() carries the new token. ok and nothing
  // done when the buffer has no chunk stream; the chunk server's error when it cannot expose.
  Status rotate_stream_token();

 private:
  friend class TransferEngine;
  RegisteredBuffer() = default;
  struct Registration;
  std::unique_ptr<Registration> reg_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool device_ = false;
  const TransferEngine* engine_ = nullptr;
};

// Registered memory kept for a grace period after its holder is done with it. A reader that was
// handed a read plan naming a copy just before the copy was unpublished may unpack the copy's
// remote key a moment later; with UCX 1.13 that reader crashes (inside ucp_ep_rkey_unpack's
// error path) when the shared memory behind the key is already gone. Holders therefore free
// drained copies through this list: the memory outlives the last plan that could name it.
class RetiredBuffers {
 public:
  // Long enough for a reader to act on the read plan it was just handed.
  static constexpr Clock::duration kDefaultGrace = std::chrono::seconds(5);
  explicit RetiredBuffers(Clock::duration grace = kDefaultGrace) : grace_(grace) {}
  // Keeps `buffer` until `grace` from now (a null buffer is ignored).
  void add(std::unique_ptr<RegisteredBuffer> buffer);
  // Frees the buffers whose grace has passed.
  void sweep();
  // Frees them all now (before their engine goes).
  void clear() { buffers_.clear(); }
  std::size_t size() const { return buffers_.size(); }
  bool empty() const { return buffers_.empty(); }

 private:
  Clock::duration grace_;
  std::vector<std::pair<Clock::time_point, std::unique_ptr<RegisteredBuffer>>> buffers_;
};

// The UCX_* settings sluice chooses when they are missing from `environment` ("K=V" entries),
// for a process whose UCX carries tcp (`ucx_tcp`: engines with TransferOptions::tcp_stream off;
// with it on UCX has no tcp and there is nothing to choose): {"UCX_TCP_TX_SEG_SIZE", "2M"}, ...
// Measured on loopback with 8 MiB GETs: about 0.6 GB/s with UCX's default TCP segment size
// against about 1.6 GB/s with 2 MiB segments.
std::vector<std::pair<std::string, std::string>> ucx_env_defaults(
    const std::vector<std::string>& environment, bool ucx_tcp);

// The version of the UCX library this process runs with (ucp_get_version).
struct UcxVersion {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
};
UcxVersion ucx_version();

struct TransferOptions;

// Whether a holder made with `opts` survives a reader that dies while the holder answers its
// reads over TCP. Over TCP a UCX GET is emulated with messages that the holder answers; UCX 1.13
// aborts the holder when such an answer meets the dead reader's closed connection
// (ucp_request_try_send: "Fatal: unexpected error: Endpoint timeout", or "Assertion `0' failed"
// under uct_tcp_ep_pending_purge), and no UCX setting avoids it. With chunk streams
// (TransferOptions::tcp_stream, on by default) TCP reads never take that path: true. Without them,
// false for UCX 1.13 and older (readers keep one GET in flight to a tcp-only peer, which took
// holder deaths from 14 of 40 to 1 of 60 reader kills, but a holder can still die); newer
// versions are assumed to have it fixed, untested.
bool tcp_holder_survives_reader_death(const TransferOptions& opts);

struct TransferOptions {
  // The process environment as the user gave it ("K=V"), before any defaults were added, passed
  // in by the caller (library code never reads it): tells which UCX_* settings were sluice's.
  std::vector<std::string> environment;

  // UCX settings the caller chooses explicitly, without the UCX_ prefix ({"TLS", "tcp"}): applied
  // over the environment, and used for UCX_TLS when deciding how to progress (below).
  std::vector<std::pair<std::string, std::string>> ucx_config;

  // How the UCX worker is progressed when no read is in flight (while reads are in flight it is
  // polled). kEventFd sleeps on the worker's event fd (ucp_worker_get_efd/ucp_worker_arm).
  // It needs UCX's WAKEUP feature, and UCX then leaves out transports without events, cma among
  // them, which would put same-host GETs on TCP (about 1.6 GB/s) instead of cma (about 8.6 GB/s).
  // kPolling progresses on a 1 ms loop timer instead. kAuto picks kEventFd when UCX_TLS is set
  // and names no shared-memory transport, else kPolling.
  enum class Progress { kAuto, kEventFd, kPolling };
  Progress progress = Progress::kAuto;

  // Verify chunk checksums on a thread of the engine's own (overlapping with the next GETs)
  // rather than on the loop thread.
  bool verify_on_thread = true;
  // Threads that verify (and, below, copy) chunks. 0: one per core the host has (at least 2).
  // Digests (SHA-256) cost about 0.7 core-seconds per GB here, so a fast link needs several.
  unsigned verify_threads = 0;

  // A same-host holder's memory that UCX has mapped into this process (shared-memory
  // transports; ucp_rkey_ptr) is read by copying it directly on the verify threads, checksummed
  // as it is copied, instead of by a GET that one thread copies. Needs verify_on_thread, and
  // UCX_TLS allowing shared memory. Measured reading 1 GiB over sm: about 6 GB/s by GET against
  // about 11 GB/s this way (docs/benchmarks.md).
  bool copy_mapped = true;

  // Reads over TCP go through chunk streams (wire/chunk_stream.hpp) instead of UCX's emulated
  // GET: the engine serves what it registers on a chunk server of its own (when UCX may use
  // tcp), and reads a source over its chunk stream when the source is on another machine or UCX
  // may not use shared memory here. See tcp_holder_survives_reader_death().
  bool tcp_stream = true;
  // The IPv4 address the chunk server listens on. "auto" (the default) binds only where the
  // job's hosts reach this one: loopback when `stream_reach` is on loopback (all is local), else
  // the interface that routes toward it (the address the engine advertises), and with no
  // `stream_reach` the default route's interface (see chunk_server_host()). "0.0.0.0" is every
  // interface (descriptors then list each interface's address, loopback last): only when
  // configured so. Anything else is the address to bind.
  std::string stream_host = "auto";
  // An endpoint of the job that its other hosts reach (the store's, "tcp://10.0.0.1:5555"), to
  // choose the interface for "auto"; empty: none known.
  std::string stream_reach;
  // Verify once per host (design.md, where bytes are verified): a chunk that has a signed digest
  // is checked by its checksum alone when its source is a holder on this host, under this
  // process's user, that says it verified the copy, and the kernel confirms that the memory the
  // chunk is copied from belongs to this user alone (wire/segment_owner.hpp). Every other source
  // (another host, a chunk stream, another user, an unverified copy, a claim the kernel does not
  // confirm) is checked against the digests. Default true; false checks every chunk against its
  // digest, whoever holds it (about 0.2x the speed over shared memory: 2.2 against 10.9 GB/s).
  bool trust_same_user = true;
  // Memory this engine allocates in System V shared memory (allocate()) is made readable and
  // writable by this user only, so that same-user readers can trust it (UCX creates it with mode
  // 0660: the group could write it). Default true. Readers under another user of the group then
  // cannot map it; set false where they must (readers then check its chunks by digest).
  bool private_segments = true;
  // Connection caps, timeouts and per-turn budgets of the chunk server (defaults there).
  ChunkServerOptions stream_server;
  // Whether chunk streams are encrypted and authenticated (wire/stream_crypto.hpp: keys agreed
  // from the job's CURVE identities, AES-256-GCM or ChaCha20-Poly1305 records). Same-host shared
  // memory and UCX's own transports are not chunk streams and stay as they are.
  //   "auto" (the default): a reader encrypts its stream from a holder in another datacenter
  //          (their `datacenter` labels differ; a label on one side only counts as different,
  //          so a job that labels no datacenter is one) and from a holder that serves
  //          encrypted streams only; within a datacenter it reads clear. The chunk server
  //          accepts both. Without stream_keys (a job with auth plain): off, with one warning
  //          the first time a stream would have been encrypted.
  //   "on":  every stream this engine serves or reads is encrypted; needs stream_keys
  //          (create() refuses it without them).
  //   "off": none is; the chunk server refuses encrypted connections.
  // A reader and a holder that disagree ("on" against "off") fail the read with a
  // failed_precondition that says so.
  std::string stream_encryption = "auto";
  // This process's datacenter label (its topology), for "auto"; descriptors carry it.
  std::string datacenter;
  // This process's key pair and the job's members (StreamKeys::from_security); null: none.
  std::shared_ptr<const StreamKeys> stream_keys;
};

// Checks a stream_encryption value: "auto", "on" or "off"; "on" needs keys (`have_keys`: the
// job authenticates with curve). invalid_argument naming `where` otherwise.
Status check_stream_encryption(const std::string& value, bool have_keys, const std::string& where);
// Sets `to`'s stream_encryption, datacenter and (with curve security) stream_keys for a role:
// check_stream_encryption's errors, with `who` named.
Status set_stream_security(TransferOptions& to, const std::string& stream_encryption,
                           const std::string& datacenter, const Security& security,
                           const std::string& who);

struct ReadSource {
  ReadSource() = default;
  ReadSource(std::string n, RegionDescriptor r, std::string h = {})
      : name(std::move(n)), region(std::move(r)), holder(std::move(h)) {}

  std::string name;  // for messages and stats ("relay-2", "tcp://10.0.0.2:5555", ...)
  RegionDescriptor region;
  // The holder id a read plan names for this region (empty: none). On an encrypted chunk
  // stream the serving key must be that holder's member (Members::owns_holder_id), not just any
  // member that may serve.
  std::string holder;
};

struct ChunkRead {
  std::uint64_t src_offset = 0;  // offset in the source region
  std::uint64_t dst_offset = 0;  // offset in the destination buffer
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;  // XXH3 of the expected bytes (see checksum.hpp)
  // SHA-256 of the expected bytes, from a signed manifest. Set: the chunk is verified against it
  // (and not the checksum), so that no bytes other than the signed ones are accepted; from a
  // verified copy of this user on this host, by the checksum (TransferOptions::trust_same_user).
  std::optional<Digest> digest;
  // Indices into the source list that hold this chunk; empty means every source.
  std::vector<std::uint32_t> sources;
};

struct ReadProgress {
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::uint32_t chunks_done = 0;
  std::uint32_t chunks_total = 0;
};

// Ends a read from outside: the owner of its sources' memory may reuse it now (the lease that
// kept it still was lost), so reading on could only tear. Loop thread only.
class ReadCancel {
 public:
  // Fails the read with `why` (its `done` reports it once its operations have ended); a read not
  // yet started fails as it starts. Later calls change nothing.
  void cancel(Status why);
  bool cancelled() const { return why_.has_value(); }

 private:
  friend class TransferEngine;
  std::optional<Status> why_;
  std::function<void(const Status&)> hook_;
};

struct ReadOptions {
  std::uint32_t max_in_flight_per_source = 8;
  Millis op_timeout{10000};      // one GET; past it the source counts as failed for this read
  Millis total_timeout{600000};  // the whole read
  bool verify = true;            // check every chunk's digest (or checksum) on arrival
  // Called on the loop thread after each chunk, at most every progress_interval.
  std::function<void(const ReadProgress&)> on_progress;
  Millis progress_interval{200};
  // Called on the loop thread as soon as a chunk is final in the destination (verified, when
  // verify is on): its bytes are dst.data() + chunk.dst_offset and stay as they are until the
  // read ends. Every chunk is reported once, before `done`; a read that fails later has reported
  // some chunks (what the caller did with them is then its own to undo). For copies onward (to
  // a GPU, wire/device_read.hpp) that overlap the rest of the read.
  std::function<void(const ChunkRead&)> on_chunk;
  // A pull refuses a version larger than this before it allocates anything for it.
  std::uint64_t max_total_bytes = 256ull << 30;
  // Set to end the read from outside (null: only its own timeouts end it).
  std::shared_ptr<ReadCancel> cancel;
};

struct ReadStats {
  std::uint64_t bytes = 0;
  double seconds = 0.0;
  std::uint32_t retries = 0;  // chunk attempts that failed and were tried again
  std::uint32_t checksum_failures = 0;
  std::uint64_t mapped_bytes = 0;  // of `bytes`, copied from memory mapped from the holder
  // Of `bytes`, chunks with a signed digest checked by their checksum alone: their source is a
  // verified copy of this user on this host (TransferOptions::trust_same_user).
  std::uint64_t checksum_only_bytes = 0;
  // Sources that claimed to be such a copy (verified, this host, this user) but whose memory the
  // kernel did not confirm as this user's: read all the same, every chunk against its digest.
  std::uint32_t owner_unconfirmed = 0;
  std::vector<std::uint64_t> bytes_per_source;  // by source index, verified bytes only
  std::vector<std::string> failed_sources;      // names, with the reason
};

class TransferEngine {
 public:
  static Result<std::unique_ptr<TransferEngine>> create(EventLoop& loop, TransferOptions opts);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Ends every read (their `done` callbacks are dropped) and disconnects, keeping the UCX context
  // alive so that the owner can free its registered buffers before the engine goes: a buffer
  // still registered when the context is destroyed makes UCX abort the process (ucp_cleanup,
  // "Assertion `region->refcount == 0' failed"). No read may be started afterwards. Idempotent;
  // the destructor calls it.
  void shutdown();

  // Allocates registered memory through UCX, which places it in shared memory when it can: a
  // same-host reader then maps it and copies directly (measured: ucx_perftest's 8 MiB GET over
  // sm ran at about 13 GB/s from such memory; from private anonymous memory sluice's reads ran
  // at 0.2-1.3 GB/s). Holders allocate what they serve here. Optionally touches every page so
  // that page faults do not land inside a timed transfer.
  Result<std::unique_ptr<RegisteredBuffer>> allocate(std::size_t bytes, bool prefault = true);
  // Registers memory the caller owns; it must outlive the returned buffer.
  Result<std::unique_ptr<RegisteredBuffer>> wrap(void* data, std::size_t bytes);

  // Whether this process's UCX can register and move CUDA device memory (decided at run time
  // from the UCX context's memory types; Debian's UCX 1.13 cannot). Without it, device memory
  // goes through pinned host staging (core/device_copy.hpp, wire/device_read.hpp).
  bool cuda_memory() const;
  // Registers CUDA device memory the caller owns (it must outlive the buffer) for reads straight
  // into it, or for serving it, without host staging. failed_precondition when !cuda_memory().
  // A device buffer is never offered on a chunk stream (those carry host memory): readers reach
  // it through UCX's own transports only. Reads into it verify each chunk by copying it to the
  // host (device_chunk_checksum) and never use chunk streams: a source reachable only over one
  // fails for such a read.
  Result<std::unique_ptr<RegisteredBuffer>> wrap_device(void* data, std::size_t bytes);

  // Reads `chunks` from `sources` into `dst`. `done` runs exactly once on the loop thread, after
  // every operation of this read has finished (so `dst` may be freed then, not before).
  // Errors: invalid_argument for chunks outside a region or the buffer; timeout; data_loss or
  // unavailable naming the chunk and each source's failure when no source could supply a chunk.
  void read(std::vector<ReadSource> sources, std::vector<ChunkRead> chunks, RegisteredBuffer& dst,
            ReadOptions options, std::function<void(Result<ReadStats>)> done);

  // Blocking read for tools and tests: runs the loop until done. Never call from a callback.
  Result<ReadStats> read_sync(std::vector<ReadSource> sources, std::vector<ChunkRead> chunks,
                              RegisteredBuffer& dst, ReadOptions options);

  // UCX settings that are sluice's defaults rather than the user's ("UCX_TCP_TX_SEG_SIZE=2M").
  std::vector<std::string> defaults_applied() const;
  // The transports UCX may use (UCX_TLS as the user set it, or "default").
  std::string transports() const;
  // Whether the worker sleeps on its event fd when idle (else it is polled every millisecond).
  bool uses_event_fd() const;

  struct Impl;

 private:
  friend class RegisteredBuffer;
  explicit TransferEngine(std::unique_ptr<Impl> impl);
  // Exposes b on the engine's chunk server, when it has one.
  static Status serve_over_stream(Impl& impl, RegisteredBuffer& b);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
