#include "actor/publisher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "core/log.hpp"
#include "format/shard.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::actor {

namespace log = core::log;
using core::Result;
using core::Status;

namespace {
// How often retiring copies ask whether they have drained, and how long they wait at most (a
// store that is gone cannot answer; leases expire on its side after their ttl anyway).
constexpr core::Millis kDrainCheck{200};
constexpr core::Millis kDrainWarn{60000};
// Requests to the store about a publish: longer than weightstore::kStoreRequestTimeout, as a
// manifest is the largest request (an entry per tensor).
constexpr core::Millis kPublishRequestTimeout{10000};
// The question whether a version was handed off; unanswered, it is asked at the next heartbeat.
constexpr core::Millis kHandoffAsk{2000};
}  // namespace

Publisher::~Publisher() {
  alive_.reset();
  hasher_.reset();
}

Result<std::unique_ptr<Publisher>> Publisher::create(core::EventLoop& loop,
                                                     core::TransferEngine& engine,
                                                     weightstore::StoreClient& store,
                                                     PublisherOptions options) {
  if (options.model.empty()) return core::invalid_argument("publisher: no model name");
  if (core::is_share_model(options.model)) {
    return core::invalid_argument("publisher: model name '" + options.model +
                                  "' has a '~', which marks the name of a host share");
  }
  if (options.holder_id.empty()) return core::invalid_argument("publisher: no holder id");
  if (options.chunk_bytes == 0)
    return core::invalid_argument("publisher: chunk size must be positive");
  // A version is something only the actor can make: in curve mode it signs every manifest, and
  // stores and readers refuse one it did not sign.
  const core::Security& sec = store.security();
  if (sec.versions_signed() && sec.sign.secret_key.empty()) {
    return core::permission_denied(
        "publisher: '" + sec.identity +
        "' has no version signing key: only the actor signs versions (its key file holds "
        "sign_secret_key; sluice publish takes --as actor)");
  }
  if (options.publish_timeout <= core::Millis(0))
    return core::invalid_argument("publisher: publish_timeout must be positive");
  if (options.shard_layouts.size() > core::kMaxShardLayouts) {
    return core::invalid_argument("publisher: at most " + std::to_string(core::kMaxShardLayouts) +
                                  " shard layouts");
  }
  for (const auto& l : options.shard_layouts)
    SLUICE_TRY(l.validate().with_context("publisher: a declared shard layout"));
  std::unique_ptr<Publisher> p(new Publisher());
  p->loop_ = &loop;
  p->engine_ = &engine;
  p->store_ = &store;
  p->options_ = std::move(options);
  // Every chunk gets its checksum and its digest (SHA-256, about 0.7 core-seconds per GB), on one
  // thread per core.
  p->hasher_ =
      std::make_unique<core::HashWorker>(loop, std::max(1u, std::thread::hardware_concurrency()));
  weightstore::HolderOptions ho;
  ho.holder_id = p->options_.holder_id;
  ho.endpoint = p->options_.endpoint;
  ho.topology = p->options_.topology;
  ho.request_timeout = kPublishRequestTimeout;
  ho.drain_check = kDrainCheck;
  ho.lease_ttl = p->options_.lease_ttl;
  ho.drain_warn = kDrainWarn;
  ho.log_name = "publisher " + p->options_.holder_id;
  Publisher* raw = p.get();
  SLUICE_ASSIGN_OR_RETURN(
      p->holder_, weightstore::Holder::create(loop, store, std::move(ho),
                                              [raw](std::unique_ptr<core::RegisteredBuffer> b) {
                                                raw->give_back(std::move(b));
                                              }));
  return p;
}

std::unique_ptr<core::RegisteredBuffer> Publisher::take_buffer(std::uint64_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if ((*it)->size() >= bytes && (best == free_.end() || (*it)->size() < (*best)->size()))
      best = it;
  }
  if (best == free_.end()) return nullptr;
  auto b = std::move(*best);
  free_.erase(best);
  // New bytes under a new token: a reader still holding the retired copy's descriptor is refused
  // over the chunk stream instead of served this version's bytes as the old one's.
  Status rotated = b->rotate_stream_token();
  if (!rotated.is_ok()) {
    log::warn("publisher: a drained buffer could not take a new stream token ({}): freed",
              rotated.to_string());
    retired_.add(std::move(b));
    return nullptr;
  }
  return b;
}

void Publisher::give_back(std::unique_ptr<core::RegisteredBuffer> buffer) {
  constexpr std::size_t kMaxFree = 2;  // beyond this, drained buffers are freed (after a grace)
  if (free_.size() < kMaxFree) {
    free_.push_back(std::move(buffer));
  } else {
    retired_.add(std::move(buffer));
  }
}

Status Publisher::reserve(std::uint64_t bytes, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    SLUICE_ASSIGN_OR_RETURN(auto b, engine_->allocate(bytes, true));
    free_.push_back(std::move(b));
  }
  return {};
}

Status Publisher::publish_async(std::uint64_t version, const std::vector<TensorView>& tensors,
                                std::function<void(Result<core::Manifest>)> committed) {
  if (pending_.count(version)) return core::invalid_argument("version already being published");
  auto p = std::make_unique<Pending>();
  p->gen = ++next_gen_;
  const std::uint64_t gen = p->gen;
  core::Manifest& m = p->manifest;
  m.model = options_.model;
  m.version = version;
  m.chunk_bytes = options_.chunk_bytes;
  for (const auto& t : tensors) {
    if (!t.data && t.bytes > 0)
      return core::invalid_argument("tensor '" + t.name + "' has no data");
    m.tensors.push_back({t.name, t.dtype, t.shape, m.total_bytes, t.bytes});
    m.total_bytes += t.bytes;
  }
  if (m.total_bytes == 0) return core::invalid_argument("publish: nothing to publish");
  p->buffer = take_buffer(m.total_bytes);
  if (!p->buffer) {
    SLUICE_ASSIGN_OR_RETURN(p->buffer, engine_->allocate(m.total_bytes, false));
  }
  bool from_device = false;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes == 0) continue;
    if (core::device_pointer(tensors[i].data).device) {
      from_device = true;  // copied below, chunk by chunk
      continue;
    }
    std::memcpy(p->buffer->data() + m.tensors[i].offset, tensors[i].data, tensors[i].bytes);
  }
  m.checksums.assign(m.chunk_count(), 0);
  m.digests.assign(m.chunk_count(), core::Digest{});
  p->remaining = m.chunk_count();
  p->committed = std::move(committed);
  std::weak_ptr<bool> alive = alive_;
  const std::uint8_t* base = p->buffer->data();
  const std::uint64_t chunk = m.chunk_bytes, total = m.total_bytes, n = m.chunk_count();
  core::RegisteredBuffer& buffer = *p->buffer;
  const core::Manifest& manifest = p->manifest;
  pending_[version] = std::move(p);
  // Each chunk is checksummed (on the hash thread) as soon as its bytes are staged. The caller
  // may reuse its tensors once this returns; the rest runs on the loop.
  std::uint64_t submitted = 0;
  auto hash_chunk = [&](std::uint64_t i) {
    ++submitted;
    std::uint64_t off = i * chunk;
    hasher_->submit(base + off, std::min(chunk, total - off), core::SumKind::both,
                    [this, alive, version, gen, i](core::ChunkSums sums) {
                      if (alive.expired()) return;
                      if (auto a = abandoned_.find(gen); a != abandoned_.end()) {
                        // Given up: the buffer is reused once the hash thread is done with it.
                        if (--a->second->remaining > 0) return;
                        give_back(std::move(a->second->buffer));
                        abandoned_.erase(a);
                        return;
                      }
                      Pending* found = find_pending(version, gen);
                      if (!found) return;
                      Pending& pd = *found;
                      pd.manifest.checksums[i] = *sums.checksum;
                      pd.manifest.digests[i] = *sums.digest;
                      if (--pd.remaining > 0) return;
                      if (pd.failed.is_ok()) return checksummed(version);
                      finish(version, pd.failed);
                    });
  };
  if (!from_device) {
    for (std::uint64_t i = 0; i < n; ++i)
      hash_chunk(i);
    return {};
  }
  Status copied = copy_from_device(tensors, manifest, buffer, hash_chunk);
  if (copied.is_ok()) return {};
  // The hash thread may still be reading chunks submitted so far: the staging buffer goes back
  // (through finish) only once they are done. The caller hears of the failure from the return
  // value, not from `committed`.
  Pending& pd = *pending_[version];
  pd.failed = copied;
  pd.committed = nullptr;
  pd.remaining -= n - submitted;
  if (pd.remaining == 0) finish(version, copied);
  return copied;
}

Status Publisher::copy_from_device(const std::vector<TensorView>& tensors,
                                   const core::Manifest& manifest, core::RegisteredBuffer& buffer,
                                   const std::function<void(std::uint64_t)>& landed) {
  std::vector<core::DeviceSpan> spans;
  int device = -1;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes == 0) continue;
    core::DevicePointer dp = core::device_pointer(tensors[i].data);
    if (!dp.device) continue;
    if (device >= 0 && dp.ordinal != device) {
      return core::invalid_argument("publish: tensors on devices " + std::to_string(device) +
                                    " and " + std::to_string(dp.ordinal) +
                                    " (one device per publisher call)");
    }
    device = dp.ordinal;
    // The copier never writes through `data`: it copies from it.
    spans.push_back(
        {const_cast<std::uint8_t*>(tensors[i].data), manifest.tensors[i].offset, tensors[i].bytes});
  }
  SLUICE_ASSIGN_OR_RETURN(auto layout,
                          core::DeviceLayout::make(std::move(spans), manifest.total_bytes));
  if (!copier_ || copier_->options().device != device ||
      copier_->options().chunk_bytes != manifest.chunk_bytes) {
    core::DeviceCopyOptions co;
    co.device = device;
    co.chunk_bytes = manifest.chunk_bytes;
    SLUICE_ASSIGN_OR_RETURN(copier_, core::DeviceCopier::create(co));
  }
  if (Status pinned = buffer.pin_for_device(); !pinned.is_ok() && !pin_warned_) {
    pin_warned_ = true;
    log::warn(
        "publisher {}: staging memory not page-locked ({}): copies from the GPU run "
        "synchronously and slower",
        options_.holder_id, pinned.to_string());
  }
  return copier_->to_host(layout, buffer.data(), landed)
      .with_context("publish: copy from device " + std::to_string(device));
}

Publisher::Pending* Publisher::find_pending(std::uint64_t version, std::uint64_t gen) {
  auto it = pending_.find(version);
  return it == pending_.end() || it->second->gen != gen ? nullptr : it->second.get();
}

void Publisher::checksummed(std::uint64_t version) {
  Pending& p = *pending_[version];
  Status valid = p.manifest.validate();
  for (const auto& layout : options_.shard_layouts) {
    if (!valid.is_ok()) break;
    valid = core::add_shard_checksums(p.manifest, layout, p.buffer->data())
                .with_context("publish: declared shard layout tp_size " +
                              std::to_string(layout.tp_size));
  }
  if (valid.is_ok() && store_->security().versions_signed()) {
    valid = core::sign_manifest(p.manifest, store_->security().sign);
  }
  if (!valid.is_ok()) return finish(version, valid);
  std::weak_ptr<bool> alive = alive_;
  const std::uint64_t gen = p.gen;
  // Replies to a publish given up after its time-out find no pending of their gen and end there
  // (a retry of the same version is another gen).
  store_->put_manifest_async(
      p.manifest, kPublishRequestTimeout, [this, alive, version, gen](Status r) {
        if (alive.expired() || !find_pending(version, gen)) return;
        if (!r.is_ok()) return finish(version, r);
        Pending* pd = find_pending(version, gen);
        // The actor made these bytes: its copy is the verified one (RegionDescriptor::verified).
        holder_->serve(pd->manifest, pd->buffer->verified_descriptor().encode(),
                       [this, alive, version, gen](Result<weightstore::Committed> rr) {
                         if (alive.expired()) return;
                         Pending* mine = find_pending(version, gen);
                         if (!mine) return;
                         if (!rr.is_ok()) return finish(version, rr.status());
                         if (!rr->committed) {
                           return finish(
                               version,
                               core::internal_error("the store did not commit a complete version"));
                         }
                         finish(version, mine->manifest);
                       });
      });
}

void Publisher::finish(std::uint64_t version, Result<core::Manifest> result) {
  auto it = pending_.find(version);
  if (it == pending_.end()) return;
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  if (result.is_ok()) {
    held_.push_back({p->manifest, std::move(p->buffer)});
    log::info("publisher {}: {}@{} committed ({} bytes, {} chunks)", options_.holder_id,
              options_.model, version, p->manifest.total_bytes, p->manifest.chunk_count());
    retire_old();
  } else {
    // The registration may have reached the store even when its reply did not: the memory goes
    // the way of any retired copy (at once if it was never offered).
    holder_->retire(version, std::move(p->buffer));
  }
  if (p->committed) p->committed(std::move(result));
}

Result<core::Manifest> Publisher::publish(std::uint64_t version,
                                          const std::vector<TensorView>& tensors) {
  std::optional<Result<core::Manifest>> out;
  SLUICE_TRY(publish_async(version, tensors,
                           [&out](Result<core::Manifest> r) { out.emplace(std::move(r)); }));
  loop_->run_until([&out] { return out.has_value(); }, options_.publish_timeout);
  if (out) return std::move(*out);
  const Status timed_out =
      core::timeout_error(fmt::format("publish {}@{}: not committed within {} ms", options_.model,
                                      version, options_.publish_timeout.count()));
  auto it = pending_.find(version);
  if (it == pending_.end()) return timed_out;
  it->second->committed = nullptr;  // `out` goes with this call
  if (it->second->remaining > 0) {
    // Still hashing: never offered to anyone, but the hash thread reads the buffer. It comes
    // back once the last hash lands; the version may be published again meanwhile.
    abandoned_[it->second->gen] = std::move(it->second);
    pending_.erase(it);
    return timed_out;
  }
  // The manifest or the registration is out: the store may have committed the copy and named it
  // to readers already. So it is retired like any copy: unpublished, and its memory kept until
  // the store says its leases drained (never freed here, where a reader may still read it).
  finish(version, timed_out);
  return timed_out;
}

Status Publisher::close(core::Millis timeout) {
  while (!held_.empty()) {
    Held h = std::move(held_.back());
    held_.pop_back();
    retire(std::move(h));
  }
  return holder_->close(timeout);
}

void Publisher::retire_old() {
  while (held_.size() > options_.keep_versions) {
    Held old = std::move(held_.front());
    held_.erase(held_.begin());
    retire(std::move(old));
  }
}

void Publisher::retire(Held old) {
  holder_->retire(old.manifest.version, std::move(old.buffer));
}

void Publisher::check_handoff(std::uint64_t version) {
  if (!asking_holders_.insert(version).second) return;  // the last question is still out
  std::weak_ptr<bool> alive = alive_;
  weightstore::HoldersRequest req;
  req.model = options_.model;
  req.version = version;
  store_->holders_async(
      req, kHandoffAsk, [this, alive, version](Result<weightstore::Holders> holders) {
        if (alive.expired()) return;
        asking_holders_.erase(version);
        // No answer means no hand-off yet: keep serving and ask again at the next heartbeat.
        if (!holders.is_ok()) {
          if (holders.status().code() == core::Code::kProtocol) {
            log::warn("publisher {}: holders of {}@{}: {}", options_.holder_id, options_.model,
                      version, holders.status().to_string());
          }
          return;
        }
        const weightstore::HolderState* taker = nullptr;
        std::size_t takers = 0;
        for (const auto& h : holders->holders) {
          if (h.holder_id != options_.holder_id && h.relay && h.complete && !h.unpublished) {
            if (!taker) taker = &h;
            ++takers;
          }
        }
        if (!taker) return;
        auto it = std::find_if(held_.begin(), held_.end(),
                               [version](const Held& h) { return h.manifest.version == version; });
        if (it == held_.end()) return;  // already retired meanwhile
        // The newest version is handed off only once two relays hold it (see the header).
        bool newest = std::all_of(held_.begin(), held_.end(), [version](const Held& h) {
          return h.manifest.version <= version;
        });
        if (newest && takers < 2) return;
        log::info("publisher {}: relay {} holds {}@{}; handing it off", options_.holder_id,
                  taker->holder_id, options_.model, version);
        Held h = std::move(*it);
        held_.erase(it);
        ++handed_off_;
        retire(std::move(h));
      });
}

void Publisher::heartbeat() {
  if (options_.handoff) {
    for (const auto& h : held_)
      check_handoff(h.manifest.version);
  }
  holder_->heartbeat();
}

}  // namespace sluice::actor
