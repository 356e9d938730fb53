// A read (TransferEngine::read): chunks issued to their sources within each source's window,
// verified as they arrive, retried elsewhere when a source fails or sends bytes that do not
// verify, and finished once every chunk is in or none can be.
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "core/checksum.hpp"
#include "core/device_copy.hpp"
#include "core/hash_worker.hpp"
#include "core/log.hpp"
#include "wire/transfer_impl.hpp"

namespace sluice::core {

namespace {

// How long an abandoned operation may take to come back after cancellation before its
// endpoint is force-closed (which completes it with an error).
constexpr Millis kCancelGrace{2000};
// read_sync() runs the loop this long past the read's own bound: a guard against a stuck loop.
constexpr Millis kReadSyncMargin{5000};

// Chunk i of a read: not empty, inside the destination (dst_bytes), naming only sources that
// exist, and inside the region of every source it may be read from.
Status check_chunk_read(const ChunkRead& c, std::size_t i, const std::vector<ReadSource>& sources,
                        std::uint64_t dst_bytes) {
  const std::string what = "read: chunk " + std::to_string(i);
  if (c.bytes == 0) return invalid_argument(what + " is empty");
  if (c.dst_offset > dst_bytes || c.bytes > dst_bytes - c.dst_offset)
    return invalid_argument(what + " does not fit the destination buffer");
  for (auto s : c.sources) {
    if (s >= sources.size()) {
      return invalid_argument(what + " names source " + std::to_string(s) + " of " +
                              std::to_string(sources.size()));
    }
  }
  for (std::uint32_t s = 0; s < sources.size(); ++s) {
    const bool cand =
        c.sources.empty() || std::find(c.sources.begin(), c.sources.end(), s) != c.sources.end();
    const auto& reg = sources[s].region;
    if (cand && (c.src_offset > reg.length || c.bytes > reg.length - c.src_offset))
      return invalid_argument(what + " lies outside the region of source " + sources[s].name);
  }
  return {};
}

}  // namespace

namespace transfer_detail {

struct Op {
  ReadState* read = nullptr;
  std::uint32_t chunk = 0;
  std::uint32_t source = 0;
  void* request = nullptr;
  bool mapped = false;       // a direct copy from mapped memory, not a GET
  bool get_pending = false;  // counted in Impl::gets_in_flight until complete()
  std::string error;         // why a chunk stream get failed
  std::unique_ptr<EventLoop::Timer> timer;
};

struct ChunkState {
  ChunkRead c;
  std::vector<bool> tried;  // per source
  bool done = false;
  std::string errors;    // "relay-1: digest mismatch; relay-2: ..."
  bool corrupt = false;  // some source's bytes failed verification
};

// One read in progress: its chunks, which source each is tried on, and what came back.
struct ReadState {
  TransferEngine::Impl* impl = nullptr;
  std::vector<SourceState> sources;
  std::vector<ChunkState> chunks;
  RegisteredBuffer* dst = nullptr;
  ucp_mem_h dst_memh = nullptr;
  bool dst_device = false;  // CUDA device memory: the CPU neither copies into it nor hashes it
  ReadOptions opt;
  std::function<void(Result<ReadStats>)> done;
  std::deque<std::uint32_t> pending;
  std::map<Op*, std::unique_ptr<Op>> ops;
  std::uint32_t chunks_done = 0;
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  std::optional<Status> failure;
  std::unique_ptr<EventLoop::Timer> total_timer;
  std::unique_ptr<EventLoop::Timer> grace_timer;
  Clock::time_point started;
  Clock::time_point last_progress{};
  ReadStats stats;
  bool pumping = false;
  bool pump_again = false;
  bool finished = false;

  bool candidate(const ChunkState& ch, std::uint32_t s) const {
    if (ch.c.sources.empty()) return true;
    for (auto x : ch.c.sources)
      if (x == s) return true;
    return false;
  }
  bool servable(const ChunkState& ch) const {
    for (std::uint32_t s = 0; s < sources.size(); ++s)
      if (!sources[s].dead && !ch.tried[s] && candidate(ch, s)) return true;
    return false;
  }

  void fail(Status s) {
    if (!failure) failure = std::move(s);
    cancel_all();
  }

  void cancel_all() {
    for (auto& [raw, op] : ops) {
      if (op->request) ucp_request_cancel(impl->worker->get(), op->request);
    }
    for (auto& src : sources)
      if (src.stream && !src.stream->failed()) src.stream->close(cancelled("read cancelled"));
    if (!ops.empty() && !grace_timer) {
      // Cancelled GETs normally return at once; if one does not, closing its endpoint ends it.
      grace_timer = impl->loop.after(kCancelGrace, [this] {
        for (auto& [raw, op] : ops) {
          auto& src = sources[op->source];
          if (src.peer && !src.peer->failed) {
            src.peer->failed = true;
            src.peer->why = "abandoned after cancellation";
          }
        }
        impl->forget_failed_peers();
        for (auto& src : sources) {
          src.rkey = nullptr;
          src.peer.reset();  // the last reference force-closes the endpoint
        }
      });
    }
    impl->kick();
  }

  void mark_dead(std::uint32_t s, const std::string& why) {
    auto& src = sources[s];
    if (src.dead) return;
    src.dead = true;
    src.why = why;
    stats.failed_sources.push_back(src.src.name + ": " + why);
    log::warn("transfer: source {} failed: {}", src.src.name, why);
    // Its other in-flight GETs come back with errors (or are cancelled here).
    for (auto& [raw, op] : ops)
      if (op->source == s && op->request) ucp_request_cancel(impl->worker->get(), op->request);
    if (src.stream) src.stream->close(unavailable(why));
  }

  void issue(std::uint32_t ci, std::uint32_t s) {
    auto& src = sources[s];
    auto& ch = chunks[ci];
    auto owned = std::make_unique<Op>();
    Op* op = owned.get();
    op->read = this;
    op->chunk = ci;
    op->source = s;
    ops.emplace(op, std::move(owned));
    ++src.in_flight;
    ++impl->in_flight;

    if (src.stream) {
      src.stream->get(ch.c.src_offset, ch.c.bytes, dst->data() + ch.c.dst_offset,
                      [this, op](Status st) {
                        if (!st.is_ok()) op->error = st.message();
                        complete(op, st.is_ok() ? UCS_OK : UCS_ERR_IO_ERROR);
                      });
      op->timer = impl->loop.after(opt.op_timeout, [this, op] {
        mark_dead(op->source, "a chunk stream read did not finish within " +
                                  std::to_string(opt.op_timeout.count()) + " ms");
        pump();
      });
      return;
    }

    void* mapped = nullptr;
    if (impl->copy_mapped && !dst_device &&
        ucp_rkey_ptr(src.rkey, src.src.region.base + ch.c.src_offset, &mapped) == UCS_OK) {
      // The holder's memory is mapped here: copy and checksum it on the verify threads. It
      // cannot hang; the holder's segment stays mapped while the key is cached.
      op->mapped = true;
      impl->hasher->submit_copy(
          dst->data() + ch.c.dst_offset, static_cast<const std::uint8_t*>(mapped), ch.c.bytes,
          sum_kind(ch.c, src), [this, op](ChunkSums got) { settle(op, UCS_OK, got); });
      return;
    }

    op->get_pending = true;
    ++impl->gets_in_flight;
    ucp_request_param_t p{};
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
    p.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      auto* o = static_cast<Op*>(user_data);
      o->request = nullptr;
      ucp_request_free(request);
      o->read->complete(o, status);
    };
    p.user_data = op;
    p.memh = dst_memh;
    ucs_status_ptr_t r = ucp_get_nbx(src.peer->ep->get(), dst->data() + ch.c.dst_offset, ch.c.bytes,
                                     src.src.region.base + ch.c.src_offset, src.rkey, &p);
    if (r == nullptr) {
      complete(op, UCS_OK);
      return;
    }
    if (UCS_PTR_IS_ERR(r)) {
      complete(op, UCS_PTR_STATUS(r));
      return;
    }
    op->request = r;
    op->timer = impl->loop.after(opt.op_timeout, [this, op] {
      mark_dead(op->source,
                "a GET did not finish within " + std::to_string(opt.op_timeout.count()) + " ms");
      pump();
    });
    impl->kick();
  }

  // A GET finished. Its bytes are verified (on the hash worker when there is one; the operation
  // keeps its in-flight slot until then, which also bounds how far copying runs ahead of
  // verifying), then settled.
  void complete(Op* op, ucs_status_t status) {
    op->timer.reset();
    op->request = nullptr;
    if (op->get_pending) {
      op->get_pending = false;
      --impl->gets_in_flight;
    }
    const auto& ch = chunks[op->chunk];
    const SumKind kind = sum_kind(ch.c, sources[op->source]);
    if (status == UCS_OK && !failure && opt.verify && dst_device) {
      // The bytes are in device memory: copied to the host to be checksummed there.
      auto checked = [this, op](Result<ChunkSums> got) {
        if (!got.is_ok()) {
          fail(got.status().with_context("verify a chunk in device memory"));
          settle(op, UCS_OK, std::nullopt);  // ends as not done, and the read with the failure
          return;
        }
        settle(op, UCS_OK, *got);
      };
      if (impl->hasher) {
        impl->hasher->submit_device(dst->data() + ch.c.dst_offset, ch.c.bytes, kind,
                                    std::move(checked));
        return;
      }
      checked(device_chunk_sums(dst->data() + ch.c.dst_offset, ch.c.bytes, kind));
      return;
    }
    if (status == UCS_OK && !failure && opt.verify) {
      if (impl->hasher) {
        impl->hasher->submit(dst->data() + ch.c.dst_offset, ch.c.bytes, kind,
                             [this, op](ChunkSums got) { settle(op, UCS_OK, got); });
        return;
      }
      settle(op, status, chunk_sums(dst->data() + ch.c.dst_offset, ch.c.bytes, kind));
      return;
    }
    settle(op, status, std::nullopt);
  }

  // A chunk is checked against its signed digest, but by its checksum alone from a verified copy
  // of this user on this host (SourceState::checksum_only), and without a digest by its checksum.
  static SumKind sum_kind(const ChunkRead& c, const SourceState& src) {
    return c.digest && !src.checksum_only ? SumKind::digest : SumKind::checksum;
  }

  // Whether a chunk's sums, of `kind`, match what it was expected to hash to; the reason when not.
  static std::optional<std::string> mismatch(const ChunkRead& c, SumKind kind,
                                             const ChunkSums& got) {
    if (kind == SumKind::digest) {
      if (got.digest && *got.digest == *c.digest) return std::nullopt;
      return "digest mismatch (" + (got.digest ? digest_hex(*got.digest) : std::string("none")) +
             ", expected " + digest_hex(*c.digest) + ")";
    }
    if (got.checksum && *got.checksum == c.checksum) return std::nullopt;
    return "checksum mismatch (" + (got.checksum ? checksum_hex(*got.checksum) : "none") +
           ", expected " + checksum_hex(c.checksum) + ")";
  }

  void settle(Op* op, ucs_status_t status, std::optional<ChunkSums> got) {
    std::unique_ptr<Op> owned = std::move(ops[op]);
    ops.erase(op);
    auto& src = sources[op->source];
    auto& ch = chunks[op->chunk];
    --src.in_flight;
    --impl->in_flight;
    if (status == UCS_OK && !failure) {
      bool good = true;
      std::optional<std::string> wrong;
      const SumKind kind = sum_kind(ch.c, src);
      if (opt.verify && got) wrong = mismatch(ch.c, kind, *got);
      if (wrong) {
        good = false;
        ++stats.checksum_failures;
        ch.errors += src.src.name + ": " + *wrong + "; ";
        ch.corrupt = true;
        log::warn("transfer: chunk at {} from {} failed verification ({}): retrying elsewhere",
                  ch.c.src_offset, src.src.name, *wrong);
      }
      if (good) {
        ch.done = true;
        ++chunks_done;
        bytes_done += ch.c.bytes;
        src.bytes += ch.c.bytes;
        if (op->mapped) stats.mapped_bytes += ch.c.bytes;
        if (opt.verify && ch.c.digest && kind == SumKind::checksum)
          stats.checksum_only_bytes += ch.c.bytes;
        if (opt.on_chunk) opt.on_chunk(ch.c);
        report_progress(false);
      }
    } else if (status != UCS_OK) {
      std::string why = !op->error.empty()             ? op->error
                        : src.peer && src.peer->failed ? src.peer->why
                                                       : ucs_status_string(status);
      ch.errors += src.src.name + ": " + why + "; ";
      mark_dead(op->source, why);
    }
    if (!ch.done) {
      ch.tried[op->source] = true;
      if (!failure) {
        ++stats.retries;
        pending.push_front(op->chunk);
      }
    }
    pump();
  }

  void report_progress(bool force) {
    if (!opt.on_progress) return;
    auto now = Clock::now();
    if (!force && chunks_done != chunks.size() && now - last_progress < opt.progress_interval)
      return;
    last_progress = now;
    ReadProgress p{bytes_done, bytes_total, chunks_done, static_cast<std::uint32_t>(chunks.size())};
    opt.on_progress(p);
  }

  void pump() {
    if (pumping) {
      pump_again = true;
      return;
    }
    pumping = true;
    do {
      pump_again = false;
      pump_once();
    } while (pump_again && !finished);
    pumping = false;
  }

  void pump_once() {
    if (finished) return;
    if (failure) {
      if (ops.empty()) finish(*failure);
      return;
    }
    if (chunks_done == chunks.size()) {
      finish(Status());
      return;
    }
    for (std::uint32_t s = 0; s < sources.size() && !failure; ++s) {
      auto& src = sources[s];
      const std::uint32_t window =
          std::min(opt.max_in_flight_per_source, src.peer ? src.peer->get_window : UINT32_MAX);
      while (!src.dead && src.in_flight < window && !failure) {
        auto it = pending.begin();
        for (; it != pending.end(); ++it) {
          const auto& ch = chunks[*it];
          if (!ch.tried[s] && candidate(ch, s)) break;
        }
        if (it == pending.end()) break;
        std::uint32_t ci = *it;
        pending.erase(it);
        issue(ci, s);  // may complete at once and re-enter pump (deferred by pump_again)
      }
    }
    if (failure) return;
    // A chunk that no live, untried source can supply fails the read.
    for (auto ci : pending) {
      const auto& ch = chunks[ci];
      if (!servable(ch)) {
        std::string errors = ch.errors;
        // Sources that failed before this chunk was tried on them: their reasons.
        for (std::uint32_t s = 0; s < sources.size(); ++s)
          if (sources[s].dead && !ch.tried[s] && candidate(ch, s))
            errors += sources[s].src.name + ": " + sources[s].why + "; ";
        if (errors.empty()) errors = "no source holds it";
        if (errors.size() >= 2 && errors.compare(errors.size() - 2, 2, "; ") == 0)
          errors.resize(errors.size() - 2);
        const bool corrupt = ch.corrupt;
        std::string m = "chunk at offset " + std::to_string(ch.c.src_offset) + " (" +
                        std::to_string(ch.c.bytes) + " bytes) failed on every source: " + errors;
        fail(corrupt ? data_loss(m) : unavailable(m));
        if (ops.empty()) finish(*failure);
        return;
      }
    }
  }

  void finish(Status s) {
    if (finished) return;
    log::trace("transfer: read finished: {} ({} of {} chunks)", s.to_string(), chunks_done,
               chunks.size());
    finished = true;
    total_timer.reset();
    grace_timer.reset();
    stats.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    stats.bytes = bytes_done;
    for (const auto& src : sources)
      stats.bytes_per_source.push_back(src.bytes);
    // This state is still on the call stack (pump, settle, a UCX callback): it is released on a
    // later loop turn, not here. Its endpoints go back to the engine's cache now, so that what
    // is released later holds nothing of UCX's.
    std::shared_ptr<ReadState> self;
    if (auto it = impl->reads.find(this); it != impl->reads.end()) {
      self = std::move(it->second);
      impl->reads.erase(it);
    }
    for (auto& src : sources) {
      src.rkey = nullptr;
      src.peer.reset();
      src.stream.reset();
    }
    impl->forget_failed_peers();
    if (self) impl->loop.post([self] {});
    if (s.is_ok()) report_progress(true);
    auto cb = std::move(done);
    if (impl->closing || !cb) return;
    if (s.is_ok())
      cb(stats);
    else
      cb(s);
  }
};

}  // namespace transfer_detail

using transfer_detail::ChunkState;
using transfer_detail::ReadState;
using transfer_detail::SourceState;

void TransferEngine::Impl::cancel_reads(const Status& why) {
  for (auto& [raw, r] : reads) {
    (void)raw;
    r->fail(why);
  }
}

bool TransferEngine::Impl::gets_outstanding() const {
  for (auto& [raw, r] : reads)
    for (auto& [op, owned] : r->ops)
      if (op->request) return true;
  return false;
}

void TransferEngine::read(std::vector<ReadSource> sources, std::vector<ChunkRead> chunks,
                          RegisteredBuffer& dst, ReadOptions options,
                          std::function<void(Result<ReadStats>)> done) {
  Impl* impl = impl_.get();
  auto fail_now = [&](Status s) { impl->loop.post([d = std::move(done), s] { d(s); }); };
  if (impl->closing) return;  // shut down: reads end with their callbacks dropped
  if (sources.empty()) return fail_now(invalid_argument("read: no sources"));
  if (options.max_in_flight_per_source == 0)
    return fail_now(invalid_argument("read: max_in_flight_per_source must be at least 1"));

  auto rs = std::make_shared<ReadState>();
  rs->impl = impl;
  rs->dst = &dst;
  rs->dst_memh = dst.reg_->mr->get();
  rs->dst_device = dst.device();
  rs->opt = std::move(options);
  rs->started = Clock::now();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    if (Status bad = check_chunk_read(c, i, sources, dst.size()); !bad.is_ok())
      return fail_now(bad);
    ChunkState st;
    st.c = c;
    st.tried.assign(sources.size(), false);
    rs->bytes_total += c.bytes;
    rs->chunks.push_back(std::move(st));
    rs->pending.push_back(static_cast<std::uint32_t>(i));
  }
  rs->done = std::move(done);  // every check passed: from here on the read reports through rs
  // Connect to every source; one that cannot be reached is dead from the start.
  for (std::uint32_t s = 0; s < sources.size(); ++s) {
    SourceState st;
    st.src = std::move(sources[s]);
    rs->sources.push_back(std::move(st));
  }
  impl->reads[rs.get()] = rs;
  for (std::uint32_t s = 0; s < rs->sources.size(); ++s) {
    if (auto dead = impl->open_source(rs->sources[s], rs->opt.op_timeout, dst.device()))
      rs->mark_dead(s, *dead);
    if (rs->sources[s].owner_unconfirmed) ++rs->stats.owner_unconfirmed;
  }
  ReadState* raw = rs.get();
  raw->total_timer = impl->loop.after(raw->opt.total_timeout, [raw] {
    raw->fail(timeout_error("read of " + std::to_string(raw->bytes_total) +
                            " bytes did not finish within " +
                            std::to_string(raw->opt.total_timeout.count()) + " ms (" +
                            std::to_string(raw->bytes_done) + " bytes done)"));
    raw->pump();
  });
  if (raw->opt.cancel) {
    // On a later turn: cancel() may be called from inside this read's own callbacks.
    std::weak_ptr<ReadState> target = rs;
    EventLoop* loop = &impl->loop;
    raw->opt.cancel->hook_ = [target, loop](const Status& why) {
      loop->post([target, why] {
        if (auto r = target.lock()) {
          r->fail(why);
          r->pump();
        }
      });
    };
    if (raw->opt.cancel->why_) raw->fail(*raw->opt.cancel->why_);
  }
  // Start on the next loop turn so that `done` never runs inside read().
  log::trace("transfer: read of {} chunks ({} bytes) from {} sources", raw->chunks.size(),
             raw->bytes_total, raw->sources.size());
  std::weak_ptr<ReadState> weak = rs;
  impl->loop.post([weak] {
    if (auto r = weak.lock()) r->pump();
  });
}

Result<ReadStats> TransferEngine::read_sync(std::vector<ReadSource> sources,
                                            std::vector<ChunkRead> chunks, RegisteredBuffer& dst,
                                            ReadOptions options) {
  std::optional<Result<ReadStats>> out;
  Millis limit = options.total_timeout + kCancelGrace + kReadSyncMargin;
  read(std::move(sources), std::move(chunks), dst, std::move(options),
       [&out](Result<ReadStats> r) { out.emplace(std::move(r)); });
  impl_->loop.run_until([&out] { return out.has_value(); }, limit);
  if (!out) return internal_error("read did not finish within its own timeout (a bug)");
  return std::move(*out);
}

}  // namespace sluice::core
