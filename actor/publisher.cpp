#include "actor/publisher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/log.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::actor {

namespace log = core::log;
using core::Result;
using core::Status;

namespace {
// How often retiring copies ask whether they have drained, and how long they wait at most (a
// store that is gone cannot answer; leases expire on its side after their ttl anyway).
constexpr core::Millis kDrainCheck{200};
constexpr auto kDrainWarn = std::chrono::seconds(60);
}  // namespace

Publisher::~Publisher() {
  alive_.reset();
  hasher_.reset();
  drain_timer_.reset();
}

Result<std::unique_ptr<Publisher>> Publisher::create(core::EventLoop& loop,
                                                     core::TransferEngine& engine,
                                                     weightstore::StoreClient& store,
                                                     PublisherOptions options) {
  if (options.model.empty()) return core::invalid_argument("publisher: no model name");
  if (options.holder_id.empty()) return core::invalid_argument("publisher: no holder id");
  if (options.chunk_bytes == 0)
    return core::invalid_argument("publisher: chunk size must be positive");
  std::unique_ptr<Publisher> p(new Publisher());
  p->loop_ = &loop;
  p->engine_ = &engine;
  p->store_ = &store;
  p->options_ = std::move(options);
  p->hasher_ = std::make_unique<core::HashWorker>(loop);
  return p;
}

weightstore::HolderRegistration Publisher::registration(const Held& h) const {
  weightstore::HolderRegistration r;
  r.holder_id = options_.holder_id;
  r.endpoint = options_.endpoint;
  r.descriptor = h.buffer->descriptor().encode();
  r.topology = options_.topology;
  r.manifest = h.manifest;
  return r;
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
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes > 0) {
      std::memcpy(p->buffer->data() + m.tensors[i].offset, tensors[i].data, tensors[i].bytes);
    }
  }
  // The caller may reuse its tensors from here on. Everything below runs on the loop.
  m.checksums.assign(m.chunk_count(), 0);
  p->remaining = m.chunk_count();
  p->committed = std::move(committed);
  std::weak_ptr<bool> alive = alive_;
  const std::uint8_t* base = p->buffer->data();
  const std::uint64_t chunk = m.chunk_bytes, total = m.total_bytes, n = m.chunk_count();
  pending_[version] = std::move(p);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t off = i * chunk;
    hasher_->submit(base + off, std::min(chunk, total - off),
                    [this, alive, version, i](std::uint64_t sum) {
                      if (alive.expired()) return;
                      auto it = pending_.find(version);
                      if (it == pending_.end()) return;
                      it->second->manifest.checksums[i] = sum;
                      if (--it->second->remaining == 0) checksummed(version);
                    });
  }
  return {};
}

void Publisher::checksummed(std::uint64_t version) {
  Pending& p = *pending_[version];
  Status valid = p.manifest.validate();
  if (!valid.is_ok()) return finish(version, valid);
  std::weak_ptr<bool> alive = alive_;
  store_->put_manifest_async(p.manifest, core::Millis(10000), [this, alive, version](Status r) {
    if (alive.expired()) return;
    if (!r.is_ok()) return finish(version, r);
    auto it = pending_.find(version);
    if (it == pending_.end()) return;
    weightstore::HolderRegistration reg;
    reg.holder_id = options_.holder_id;
    reg.endpoint = options_.endpoint;
    reg.descriptor = it->second->buffer->descriptor().encode();
    reg.topology = options_.topology;
    reg.manifest = it->second->manifest;
    store_->register_async(
        reg, core::Millis(10000), [this, alive, version](Result<weightstore::Committed> rr) {
          if (alive.expired()) return;
          if (!rr.is_ok()) return finish(version, rr.status());
          if (!rr->committed) {
            return finish(version,
                          core::internal_error("the store did not commit a complete version"));
          }
          auto it2 = pending_.find(version);
          if (it2 == pending_.end()) return;
          finish(version, it2->second->manifest);
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
    give_back(std::move(p->buffer));
  }
  if (p->committed) p->committed(std::move(result));
}

Result<core::Manifest> Publisher::publish(std::uint64_t version,
                                          const std::vector<TensorView>& tensors) {
  std::optional<Result<core::Manifest>> out;
  SLUICE_TRY(publish_async(version, tensors,
                           [&out](Result<core::Manifest> r) { out.emplace(std::move(r)); }));
  loop_->run_until([&out] { return out.has_value(); }, core::Millis(60000));
  if (!out) {
    pending_.erase(version);
    return core::timeout_error("publish " + options_.model + "@" + std::to_string(version) +
                               ": not committed within 60 s");
  }
  return std::move(*out);
}

Status Publisher::close(core::Millis timeout) {
  while (!held_.empty()) {
    Held h = std::move(held_.back());
    held_.pop_back();
    retire(std::move(h));
  }
  if (retiring_.empty()) return {};
  check_retiring();  // asks at once, after the unpublish requests (one socket, in order)
  loop_->run_until([this] { return retiring_.empty(); }, timeout);
  if (retiring_.empty()) return {};
  std::size_t left = retiring_.size();
  return core::timeout_error(
      fmt::format("publisher {}: {} withdrawn copies had readers still reading after {} ms",
                  options_.holder_id, left, timeout.count()));
}

void Publisher::retire_old() {
  while (held_.size() > options_.keep_versions) {
    Held old = std::move(held_.front());
    held_.erase(held_.begin());
    retire(std::move(old));
  }
}

void Publisher::retire(Held old) {
  // A request, not a blocking call: this runs from loop callbacks too. The drain checks that
  // follow are answered only after the store has handled this (one socket, in order).
  std::string what = old.manifest.model + "@" + std::to_string(old.manifest.version);
  store_->unpublish_async(
      {options_.holder_id, old.manifest.model, old.manifest.version}, core::Millis(5000),
      [id = options_.holder_id, what](Result<weightstore::Drained> r) {
        if (!r.is_ok())
          log::warn("publisher {}: unpublish {}: {}", id, what, r.status().to_string());
      });
  Retiring r;
  r.held = std::move(old);
  r.since = Clock::now();
  retiring_.push_back(std::move(r));
  if (!drain_timer_) {
    drain_timer_ = loop_->every(kDrainCheck, [this] { check_retiring(); });
  }
}

// Runs in a loop timer, so it only sends requests and handles their replies when they come:
// a blocking call here would run the loop from inside one of its own handlers.
void Publisher::check_retiring() {
  retired_.sweep();
  std::weak_ptr<bool> alive = alive_;
  for (auto& r : retiring_) {
    if (r.asking) continue;
    r.asking = true;
    std::uint64_t version = r.held.manifest.version;
    weightstore::CopyRef copy{options_.holder_id, r.held.manifest.model, version};
    store_->drained_async(
        copy, kDrainCheck * 5, [this, alive, version](Result<weightstore::Drained> rep) {
          if (alive.expired()) return;
          for (auto it = retiring_.begin(); it != retiring_.end(); ++it) {
            if (it->held.manifest.version != version) continue;
            it->asking = false;
            bool drained = rep.is_ok() && rep->drained;
            if (!drained && !rep.is_ok() && rep.status().code() == core::Code::kNotFound) {
              // A store restarted since: it knows no lease on this copy, and those the old one
              // granted expire within its lease time-to-live.
              if (!it->unknown_since) it->unknown_since = Clock::now();
              drained = Clock::now() - *it->unknown_since >= options_.lease_ttl;
            } else if (!drained) {
              it->unknown_since.reset();
              // Still leased, or the store is away: kept. Said once a minute, so a reader that
              // holds a lease for long (or a store that stays away) shows in the log.
              if (Clock::now() - it->since > kDrainWarn * (1 + it->warned)) {
                ++it->warned;
                log::warn("publisher {}: {}@{} retired {} s ago and not drained yet ({}); kept",
                          options_.holder_id, it->held.manifest.model, version,
                          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - it->since)
                              .count(),
                          rep.is_ok() ? "still leased" : rep.status().to_string());
              }
            }
            if (!drained) return;
            give_back(std::move(it->held.buffer));  // reused for a later version, or freed
            retiring_.erase(it);
            break;
          }
          if (retiring_.empty() && retired_.empty()) drain_timer_.reset();
        });
  }
}

void Publisher::check_handoff(std::uint64_t version) {
  if (!asking_holders_.insert(version).second) return;  // the last question is still out
  std::weak_ptr<bool> alive = alive_;
  weightstore::HoldersRequest req;
  req.model = options_.model;
  req.version = version;
  store_->holders_async(
      req, core::Millis(2000), [this, alive, version](Result<weightstore::Holders> holders) {
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
  std::weak_ptr<bool> alive = alive_;
  if (options_.handoff) {
    for (const auto& h : held_)
      check_handoff(h.manifest.version);
  }
  store_->heartbeat_async(options_.holder_id, core::Millis(2000), [this, alive](Status rep) {
    if (alive.expired() || rep.is_ok()) return;
    if (rep.code() != core::Code::kNotFound) {
      log::warn("publisher {}: heartbeat: {}", options_.holder_id, rep.to_string());
      return;
    }
    // The store restarted and lost its soft state: bring back what this holder holds.
    log::info("publisher {}: the store does not know this holder; registering again",
              options_.holder_id);
    for (const auto& h : held_) {
      weightstore::HolderRegistration again = registration(h);
      again.again = true;  // readers of the old store may still hold leases on it
      store_->register_async(again, core::Millis(5000),
                             [this, alive](Result<weightstore::Committed> r) {
                               if (!alive.expired() && !r.is_ok()) {
                                 log::warn("publisher {}: register again: {}", options_.holder_id,
                                           r.status().to_string());
                               }
                             });
    }
  });
}

}  // namespace sluice::actor
