// The transfer engine (wire/transfer.hpp): made, progressed and shut down here, with the
// registered buffers it serves. A read is transfer_read.cpp; how it reaches each source,
// transfer_source.cpp.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/hash_worker.hpp"
#include "core/log.hpp"
#include "wire/segment_owner.hpp"
#include "wire/transfer_impl.hpp"
#include "wire/transport_choice.hpp"

namespace sluice::core {

namespace {

// Idle progress period (see TransferOptions::Progress and TransferEngine::create).
constexpr Millis kIdlePoll{1};
constexpr Millis kQuietPoll{100};
constexpr auto kActiveWindow = std::chrono::seconds(1);
// Closing the engine waits this long for cancelled operations to come back through progress.
constexpr Millis kShutdownWait{5000};

// What the engine's chunk server accepts for TransferOptions::stream_encryption.
StreamCrypto server_crypto(const std::string& setting, const std::shared_ptr<const StreamKeys>& k) {
  if (setting == "off" || !k) return StreamCrypto::kClear;
  return setting == "on" ? StreamCrypto::kEncrypted : StreamCrypto::kEither;
}

}  // namespace

void TransferEngine::Impl::kick() {
  if (poll_posted || closing) return;
  poll_posted = true;
  std::weak_ptr<bool> a = alive;
  loop.post([this, a] {
    if (a.expired()) return;
    poll_posted = false;
    poll();
  });
}

void TransferEngine::Impl::poll() {
  unsigned n = 0;
  for (int i = 0; i < 64; ++i) {
    unsigned k = worker->progress();
    n += k;
    if (k == 0) break;
  }
  auto now = Clock::now();
  if (n > 0 || in_flight > 0) last_activity = now;
  // With an event fd, sleep on it as soon as the worker has nothing to do, even with GETs in
  // flight or data still arriving: the next packet wakes it. Polling on after each burst of
  // progress (2 ms, as sluice once did) kept a relay receiving at 31 MB/s over TCP at 100% of a
  // core, and 8 relays behind 250 Mbit/s links saturated both cores of the dev box; without it
  // one relay used about a third of that, and a loopback 1 GiB TCP read ran as fast (2.41 vs
  // 2.48 GB/s, within run-to-run noise). Without an event fd, GETs in flight are polled for.
  if (gets_in_flight > 0 && worker->event_fd() < 0) {
    kick();
  } else if (worker->progress_and_arm()) {
    kick();
  }
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TransferEngine::~TransferEngine() {
  shutdown();
}

void TransferEngine::shutdown() {
  Impl* impl = impl_.get();
  if (impl->closing) return;
  impl->closing = true;
  impl->hasher.reset();  // results not yet delivered are dropped
  impl->cancel_reads(cancelled("transfer engine shutting down"));
  // Cancelled operations return through progress; bound the wait.
  auto deadline = Clock::now() + kShutdownWait;
  while (impl->gets_outstanding() && Clock::now() < deadline)
    impl->worker->progress();
  for (auto& [addr, p] : impl->peers)
    p->failed = true;
  impl->reads.clear();
  impl->peers.clear();
  impl->watch.reset();
  impl->idle_poll.reset();
  *impl->alive = false;
}

Result<std::unique_ptr<TransferEngine>> TransferEngine::create(EventLoop& loop,
                                                               TransferOptions opts) {
  auto impl = std::make_unique<Impl>(loop);
  impl->tls = "default";
  for (const auto& e : opts.environment)
    if (e.rfind("UCX_TLS=", 0) == 0) impl->tls = e.substr(8);
  for (const auto& [name, value] : opts.ucx_config)
    if (name == "TLS") impl->tls = value;
  for (const auto& [k, v] : ucx_env_defaults(opts.environment, !opts.tcp_stream))
    impl->defaults.push_back(k + "=" + v);
  impl->shm_only = ucx_tls::shm_only(impl->tls);
  if (opts.verify_on_thread) {
    const unsigned threads = opts.verify_threads > 0
                                 ? opts.verify_threads
                                 : std::max(2u, std::thread::hardware_concurrency());
    impl->hasher = std::make_unique<HashWorker>(loop, threads);
  }
  impl->copy_mapped = opts.copy_mapped && impl->hasher && ucx_tls::shm_allowed(impl->tls);
  impl->tcp_stream = opts.tcp_stream;
  impl->trust_same_user = opts.trust_same_user;
  impl->private_segments = opts.private_segments;
  SLUICE_TRY(check_stream_encryption(opts.stream_encryption, opts.stream_keys != nullptr,
                                     "transfer engine"));
  impl->stream_encryption = opts.stream_encryption;
  impl->datacenter = opts.datacenter;
  impl->stream_keys = opts.stream_keys;
  auto ucx_config = opts.ucx_config;
  if (opts.tcp_stream && ucx_tls::tcp_allowed(impl->tls)) {
    auto host = chunk_server_host(opts.stream_host, opts.stream_reach);
    if (!host.is_ok()) return host.status().with_context("transfer engine");
    if (*host == "0.0.0.0")
      log::info("transfer: chunk server on every interface (stream_host 0.0.0.0, as configured)");
    auto server = ChunkServer::create(loop, *host, opts.stream_server,
                                      server_crypto(opts.stream_encryption, opts.stream_keys),
                                      opts.stream_keys);
    if (!server.is_ok()) return server.status().with_context("transfer engine");
    impl->chunk_server = std::move(server).value();
    // tcp reads are chunk streams, so UCX goes without tcp: over it UCX 1.13 aborts a holder
    // whose reader dies (get_window()), and lets a peer write into memory registered for remote
    // reads only (ucx.cpp). impl->tls stays what the user chose; it decides what reaches what.
    std::erase_if(ucx_config, [](const auto& kv) { return kv.first == "TLS"; });
    ucx_config.emplace_back("TLS", ucx_tls::without_tcp(impl->tls));
  }
  bool wakeup = opts.progress == TransferOptions::Progress::kEventFd;
  if (opts.progress == TransferOptions::Progress::kAuto) wakeup = ucx_tls::event_capable(impl->tls);
  SLUICE_ASSIGN_OR_RETURN(impl->ctx, ucx::Context::create(wakeup, ucx_config));
  impl->net_rdma = ucx_tls::network_rdma(impl->ctx->transport_names());
  // What UCX opened, not only what UCX_TLS named: with chunk streams taking tcp, an engine whose
  // UCX has no network transport reaches peers by shared memory only, where UCX 1.13 has no peer
  // failure handler (trying one anyway makes UCX print an error for every new peer).
  if (!ucx_tls::any_network(impl->ctx->transport_names())) impl->shm_only = true;
  SLUICE_ASSIGN_OR_RETURN(impl->worker, ucx::Worker::create(*impl->ctx));
  Impl* raw = impl.get();
  std::unique_ptr<TransferEngine> engine(new TransferEngine(std::move(impl)));
  if (raw->worker->event_fd() >= 0) {
    raw->watch = loop.watch_readable(raw->worker->event_fd(), [raw] { raw->poll(); });
  }
  // Also with an event fd: UCX's TCP transport arms it for arriving data only, so a holder whose
  // socket send buffer filled up would not be woken to send the rest of a GET reply (measured
  // behind a 1 Gbit/s link: one source delivered half the link rate). A 1 ms poll keeps such
  // sends moving; it costs about a thousand cheap wake-ups a second.
  raw->idle_poll = loop.every(kIdlePoll, [raw] {
    if (raw->poll_posted) return;
    // Every millisecond while there has been traffic in the last second; every 100 ms when
    // idle (measured: an idle holder polling every millisecond used 5-9% of a core).
    auto now = Clock::now();
    if (now - raw->last_activity > kActiveWindow && now - raw->last_idle_poll < kQuietPoll) return;
    raw->last_idle_poll = now;
    raw->poll();
  });
  raw->worker->progress_and_arm();
  std::string applied;
  for (const auto& a : engine->defaults_applied())
    applied += (applied.empty() ? "" : ", ") + a;
  log::info(
      "transfer: ucx transports {}, progress by {}; sluice defaults: {}; chunk streams {}; "
      "stream_encryption {}{}",
      raw->tls, wakeup ? "event fd" : "polling",
      applied.empty() ? "none (all set by the user)" : applied,
      raw->chunk_server ? "on " + raw->chunk_server->addresses().front()
                        : std::string(raw->tcp_stream ? "off (no tcp)" : "off"),
      raw->stream_encryption, raw->stream_keys ? "" : " (no keys: clear)");
  return engine;
}

std::vector<std::string> TransferEngine::defaults_applied() const {
  return impl_->defaults;
}

std::string TransferEngine::transports() const {
  return impl_->tls;
}

bool TransferEngine::uses_event_fd() const {
  return impl_->worker->event_fd() >= 0;
}

Status TransferEngine::serve_over_stream(Impl& impl, RegisteredBuffer& b) {
  if (!impl.chunk_server) return {};
  SLUICE_ASSIGN_OR_RETURN(b.reg_->stream_token, impl.chunk_server->expose(b.data_, b.size_));
  b.reg_->server = impl.chunk_server.get();
  return {};
}

Result<std::unique_ptr<RegisteredBuffer>> TransferEngine::allocate(std::size_t bytes,
                                                                   bool prefault) {
  if (bytes == 0) return invalid_argument("cannot allocate an empty buffer");
  std::unique_ptr<RegisteredBuffer> b(new RegisteredBuffer());
  b->reg_ = std::make_unique<RegisteredBuffer::Registration>();
  SLUICE_ASSIGN_OR_RETURN(b->reg_->mr, ucx::MemoryRegion::allocate(*impl_->ctx, bytes));
  b->data_ = static_cast<std::uint8_t*>(b->reg_->mr->address());
  b->size_ = bytes;
  b->engine_ = this;
  if (prefault) std::memset(b->data_, 0, bytes);
  if (impl_->private_segments) {
    // Before anyone is handed its key: a segment its group may write is no one user's (see
    // wire/segment_owner.hpp), and same-user readers would check it by digest.
    auto made = restrict_segment(b->data_);
    if (!made.is_ok()) log::warn("transfer: {}", made.status().message());
  }
  SLUICE_TRY(serve_over_stream(*impl_, *b));
  return b;
}

Result<std::unique_ptr<RegisteredBuffer>> TransferEngine::wrap(void* data, std::size_t bytes) {
  if (!data || bytes == 0) return invalid_argument("cannot register an empty buffer");
  std::unique_ptr<RegisteredBuffer> b(new RegisteredBuffer());
  b->reg_ = std::make_unique<RegisteredBuffer::Registration>();
  SLUICE_ASSIGN_OR_RETURN(b->reg_->mr, ucx::MemoryRegion::map(*impl_->ctx, data, bytes));
  b->data_ = static_cast<std::uint8_t*>(data);
  b->size_ = bytes;
  b->engine_ = this;
  SLUICE_TRY(serve_over_stream(*impl_, *b));
  return b;
}

bool TransferEngine::cuda_memory() const {
  return impl_->ctx->cuda_memory();
}

Result<std::unique_ptr<RegisteredBuffer>> TransferEngine::wrap_device(void* data,
                                                                      std::size_t bytes) {
  if (!data || bytes == 0) return invalid_argument("cannot register an empty buffer");
  if (!cuda_memory()) {
    return failed_precondition(
        "this process's UCX cannot register CUDA memory (built without CUDA support): stage "
        "device memory through pinned host buffers");
  }
  std::unique_ptr<RegisteredBuffer> b(new RegisteredBuffer());
  b->reg_ = std::make_unique<RegisteredBuffer::Registration>();
  SLUICE_ASSIGN_OR_RETURN(b->reg_->mr, ucx::MemoryRegion::map_device(*impl_->ctx, data, bytes));
  b->data_ = static_cast<std::uint8_t*>(data);
  b->size_ = bytes;
  b->device_ = true;
  b->engine_ = this;
  return b;  // not on the chunk server: a chunk stream reads with the CPU
}

RegisteredBuffer::~RegisteredBuffer() = default;  // unregistering frees what UCX allocated

Status RegisteredBuffer::pin_for_device() {
  if (device_) return failed_precondition("a device buffer needs no pinning");
  if (reg_->pin) return {};
  SLUICE_ASSIGN_OR_RETURN(reg_->pin, PinnedHost::pin(data_, size_));
  return {};
}

bool RegisteredBuffer::pinned() const {
  return reg_->pin != nullptr;
}

Status RegisteredBuffer::rotate_stream_token() {
  if (!reg_->server) return {};
  SLUICE_ASSIGN_OR_RETURN(std::string fresh, reg_->server->expose(data_, size_));
  reg_->server->withdraw(reg_->stream_token);
  reg_->stream_token = std::move(fresh);
  return {};
}

RegionDescriptor RegisteredBuffer::descriptor() const {
  RegionDescriptor d;
  d.worker_address = engine_->impl_->worker->address();
  d.base = reinterpret_cast<std::uint64_t>(data_);
  d.length = size_;
  d.rkey = reg_->mr->packed_rkey();
  d.host = local_host_id();
  if (reg_->server) {
    d.stream = reg_->server->addresses();
    d.stream_token = reg_->stream_token;
    d.stream_crypto = reg_->server->crypto();
  }
  d.datacenter = engine_->impl_->datacenter;
  d.uid = static_cast<std::uint32_t>(::geteuid());
  return d;
}

RegionDescriptor RegisteredBuffer::verified_descriptor() const {
  RegionDescriptor d = descriptor();
  d.verified = true;
  return d;
}

}  // namespace sluice::core
