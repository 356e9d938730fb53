#include "actor/publisher.hpp"

#include <cstring>

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
constexpr auto kDrainLimit = std::chrono::seconds(30);
}  // namespace

Publisher::~Publisher() {
  alive_.reset();
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

Result<core::Manifest> Publisher::publish(std::uint64_t version,
                                          const std::vector<TensorView>& tensors) {
  std::uint64_t total = 0;
  std::vector<core::TensorSpec> specs;
  for (const auto& t : tensors) {
    if (!t.data && t.bytes > 0)
      return core::invalid_argument("tensor '" + t.name + "' has no data");
    specs.push_back({t.name, t.dtype, t.shape, total, t.bytes});
    total += t.bytes;
  }
  if (total == 0) return core::invalid_argument("publish: nothing to publish");
  SLUICE_ASSIGN_OR_RETURN(auto buf, engine_->allocate(total, false));
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].bytes > 0) {
      std::memcpy(buf->data() + specs[i].offset, tensors[i].data, tensors[i].bytes);
    }
  }
  SLUICE_ASSIGN_OR_RETURN(auto manifest,
                          core::make_manifest(options_.model, version, specs, buf->data(), total,
                                              options_.chunk_bytes));
  SLUICE_TRY(store_->put_manifest(manifest));
  Held h{manifest, std::move(buf)};
  SLUICE_ASSIGN_OR_RETURN(bool committed, store_->register_holder(registration(h)));
  if (!committed) return core::internal_error("the store did not commit a complete version");
  held_.push_back(std::move(h));
  retire_old();
  log::info("publisher {}: {}@{} committed ({} bytes, {} chunks)", options_.holder_id,
            options_.model, version, total, manifest.chunk_count());
  return manifest;
}

void Publisher::retire_old() {
  while (held_.size() > options_.keep_versions) {
    Held old = std::move(held_.front());
    held_.erase(held_.begin());
    Status s = store_->unpublish(options_.holder_id, old.manifest.model, old.manifest.version);
    if (!s.is_ok()) {
      log::warn("publisher {}: unpublish {}@{}: {}", options_.holder_id, old.manifest.model,
                old.manifest.version, s.to_string());
    }
    retiring_.push_back({std::move(old), Clock::now()});
  }
  if (!retiring_.empty() && !drain_timer_) {
    drain_timer_ = loop_->every(kDrainCheck, [this] { check_retiring(); });
  }
}

// Runs in a loop timer, so it only sends requests and handles their replies when they come:
// a blocking call here would run the loop from inside one of its own handlers.
void Publisher::check_retiring() {
  std::weak_ptr<bool> alive = alive_;
  for (auto& r : retiring_) {
    if (r.asking) continue;
    r.asking = true;
    core::Message req("store.drained");
    req.body = {{"holder_id", options_.holder_id},
                {"model", r.held.manifest.model},
                {"version", r.held.manifest.version}};
    std::uint64_t version = r.held.manifest.version;
    store_->raw().request(req, kDrainCheck * 5, [this, alive, version](Result<core::Message> rep) {
      if (alive.expired()) return;
      for (auto it = retiring_.begin(); it != retiring_.end(); ++it) {
        if (it->held.manifest.version != version) continue;
        it->asking = false;
        bool drained = rep.is_ok() && rep->body.value("drained", false);
        bool overdue = Clock::now() - it->since > kDrainLimit;
        if (!drained && !overdue) return;
        if (!drained) {
          log::warn(
              "publisher {}: freeing {}@{} after {} s without the store confirming its "
              "leases drained ({})",
              options_.holder_id, it->held.manifest.model, version,
              std::chrono::duration_cast<std::chrono::seconds>(kDrainLimit).count(),
              rep.is_ok() ? "still leased" : rep.status().to_string());
        }
        retiring_.erase(it);  // frees the registered memory
        break;
      }
      if (retiring_.empty()) drain_timer_.reset();
    });
  }
}

void Publisher::heartbeat() {
  std::weak_ptr<bool> alive = alive_;
  core::Message req("store.heartbeat");
  req.body["holder_id"] = options_.holder_id;
  store_->raw().request(req, core::Millis(2000), [this, alive](Result<core::Message> rep) {
    if (alive.expired() || rep.is_ok()) return;
    if (rep.status().code() != core::Code::kNotFound) {
      log::warn("publisher {}: heartbeat: {}", options_.holder_id, rep.status().to_string());
      return;
    }
    // The store restarted and lost its soft state: bring back what this holder holds.
    log::info("publisher {}: the store does not know this holder; registering again",
              options_.holder_id);
    for (const auto& h : held_) {
      store_->raw().request(weightstore::encode_registration(registration(h)), core::Millis(5000),
                            [this, alive](Result<core::Message> r) {
                              if (!alive.expired() && !r.is_ok()) {
                                log::warn("publisher {}: register again: {}", options_.holder_id,
                                          r.status().to_string());
                              }
                            });
    }
  });
}

}  // namespace sluice::actor
