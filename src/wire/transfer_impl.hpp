// The transfer engine's internals (wire/transfer.hpp), shared by its files: the engine's state
// (TransferEngine::Impl), its UCX peers, and a read's state for one source. Internal to
// src/wire, so UCX types may appear here.
//
//   transfer_engine.cpp  the engine: create, progress, shutdown, registered buffers
//   transfer_source.cpp  how a read reaches a source: a UCX endpoint and remote key, or a chunk
//                        stream
//   transfer_read.cpp    a read: chunks issued, verified, retried and finished
//
// Thread safety: the loop thread only, as the engine.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device_copy.hpp"
#include "core/hash_worker.hpp"
#include "wire/chunk_stream.hpp"
#include "wire/transfer.hpp"
#include "wire/ucx.hpp"

namespace sluice::core {

struct RegisteredBuffer::Registration {
  std::unique_ptr<ucx::MemoryRegion> mr;
  std::unique_ptr<PinnedHost> pin;  // after mr: unpinned before the memory is unregistered
  ChunkServer* server = nullptr;    // the engine's, when it serves this memory over a chunk stream
  std::string stream_token;
  ~Registration() {
    if (server) server->withdraw(stream_token);  // before the memory goes
  }
};

namespace transfer_detail {

struct UcxPeer {
  std::unique_ptr<ucx::Endpoint> ep;
  // GETs this reader keeps in flight to the peer at most, over ReadOptions' bound (see
  // get_window()).
  std::uint32_t get_window = UINT32_MAX;
  bool failed = false;
  std::string why;
  // Unpacked remote keys by their packed bytes. Kept across reads: unpacking a shared-memory
  // key maps the holder's segment anew, and every page of a new mapping faults on first touch
  // (measured: 256 MiB over sm took 0.2 s read after read when each read unpacked its key).
  // Keys must be destroyed before the endpoint, hence declared after it.
  std::map<std::string, std::unique_ptr<ucx::RemoteKey>> rkeys;
  std::deque<std::string> rkey_order;  // oldest first, for eviction

  // The unpacked key for `packed`, from the cache or unpacked now (the oldest evicted past
  // kMaxCachedRkeys); UCX's error when it cannot be unpacked.
  Result<ucp_rkey_h> rkey(const std::string& packed);
  static constexpr std::size_t kMaxCachedRkeys = 64;
  ~UcxPeer() {
    rkeys.clear();  // before the endpoint closes
  }
};

struct ReadState;  // transfer_read.cpp

// A read's source: reached over UCX (peer and rkey) or over its chunk stream (stream).
struct SourceState {
  ReadSource src;
  std::shared_ptr<UcxPeer> peer;
  std::unique_ptr<ChunkStream> stream;  // reads go here instead of the peer when set
  ucp_rkey_h rkey = nullptr;            // owned by the peer's cache
  // Chunks with a digest are checked by their checksum alone: a verified copy of this user on
  // this host, confirmed by the kernel (TransferOptions::trust_same_user).
  bool checksum_only = false;
  // It claimed to be such a copy, but the kernel did not confirm it (counted in ReadStats).
  bool owner_unconfirmed = false;
  std::uint32_t in_flight = 0;
  bool dead = false;
  std::string why;
  std::uint64_t bytes = 0;
};

}  // namespace transfer_detail

struct TransferEngine::Impl {
  Impl(EventLoop& l) : loop(l) {}
  EventLoop& loop;
  std::unique_ptr<ucx::Context> ctx;
  std::unique_ptr<ucx::Worker> worker;
  std::unique_ptr<EventLoop::FdWatch> watch;
  std::unique_ptr<EventLoop::Timer> idle_poll;
  std::string tls;
  std::vector<std::string> defaults;
  std::unique_ptr<HashWorker> hasher;         // null: verify on the loop thread
  std::unique_ptr<ChunkServer> chunk_server;  // null: this engine serves no stream
  bool tcp_stream = false;                    // TransferOptions::tcp_stream
  std::string stream_encryption;              // TransferOptions' (checked)
  std::string datacenter;
  std::shared_ptr<const StreamKeys> stream_keys;
  bool net_rdma = false;  // UCX reaches other hosts without tcp (see ucx_tls::network_rdma())
  std::map<std::string, std::shared_ptr<transfer_detail::UcxPeer>> peers;  // by worker address
  std::map<transfer_detail::ReadState*, std::shared_ptr<transfer_detail::ReadState>> reads;
  std::uint64_t in_flight = 0;
  // GETs UCX still has to progress (copies from mapped memory run on the verify threads and need
  // no progress: polling for them kept a same-host reader's loop thread spinning on one of the
  // two cores its copies need; measured in bench transfer over sm, 7-8 GB/s before).
  std::uint64_t gets_in_flight = 0;
  bool poll_posted = false;
  bool closing = false;
  bool shm_only = false;         // UCX_TLS names only shared-memory transports
  bool copy_mapped = false;      // see TransferOptions::copy_mapped
  bool trust_same_user = true;   // TransferOptions'
  bool private_segments = true;  // TransferOptions'
  Clock::time_point last_activity{};
  Clock::time_point last_idle_poll{};
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  // transfer_engine.cpp: progress. kick() polls on a later loop turn; poll() progresses the
  // worker and re-arms its event fd, or polls again while it must.
  void kick();
  void poll();

  // transfer_source.cpp. The endpoint to the holder at a worker address (one reused unless it
  // failed); UCX's error when it cannot connect.
  Result<std::shared_ptr<transfer_detail::UcxPeer>> peer(const std::string& address);
  void forget_failed_peers();
  // Makes `st` ready to read: a chunk stream, or a UCX endpoint and remote key whose region is
  // checked against what is mapped here, and whether its chunks may be checked by checksum alone
  // (st.checksum_only). On failure, the source is dead for this read: returns why (what st it set
  // up so far stays, for the read to release).
  std::optional<std::string> open_source(transfer_detail::SourceState& st, Millis op_timeout,
                                         bool dst_device);
  // Sets st.checksum_only (or st.owner_unconfirmed) for a source reached over UCX.
  void decide_checksum_only(transfer_detail::SourceState& st) const;

  // transfer_read.cpp. Fails every read with `why`; whether any still has a GET UCX owes.
  void cancel_reads(const Status& why);
  bool gets_outstanding() const;
};

}  // namespace sluice::core
