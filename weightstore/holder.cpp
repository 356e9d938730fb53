#include "weightstore/holder.hpp"

#include <algorithm>

#include "core/log.hpp"

namespace sluice::weightstore {

namespace log = core::log;
using core::Result;
using core::Status;

namespace {
// close() without a drain_timeout waits this long for the store to confirm drains.
constexpr Millis kCloseWithoutDrainTimeout{30000};

std::string vname(const std::string& model, std::uint64_t version) {
  return model + "@" + std::to_string(version);
}
long long ms(Clock::duration d) {
  return static_cast<long long>(std::chrono::duration_cast<Millis>(d).count());
}
}  // namespace

Result<std::unique_ptr<Holder>> Holder::create(core::EventLoop& loop, StoreClient& store,
                                               HolderOptions options, Freed freed) {
  if (options.holder_id.empty()) return core::invalid_argument("holder: no holder id");
  if (options.request_timeout <= Millis(0) || options.drain_check <= Millis(0) ||
      options.lease_ttl <= Millis(0) || options.drain_timeout < Millis(0) ||
      options.drain_warn <= Millis(0)) {
    return core::invalid_argument(
        "holder: request_timeout, drain_check, lease_ttl and drain_warn must be positive");
  }
  if (options.log_name.empty()) options.log_name = "holder " + options.holder_id;
  std::unique_ptr<Holder> h(new Holder());
  h->loop_ = &loop;
  h->store_ = &store;
  h->options_ = std::move(options);
  h->freed_ = std::move(freed);
  return h;
}

Holder::~Holder() {
  alive_.reset();
  drain_timer_.reset();
  // No waiting here (a destructor may run inside a loop callback): the store stops naming what
  // is still served, and readers still on it fail over when its memory goes.
  for (const auto& [v, s] : served_) {
    store_->unpublish_async({options_.holder_id, s.manifest.model, v}, options_.request_timeout);
  }
  if (!retiring_.empty()) {
    log::warn("{}: destroyed with {} copies not yet drained; freed now", options_.log_name,
              retiring_.size());
  }
}

void Holder::serve(const core::Manifest& manifest, std::string descriptor, Registered done,
                   std::vector<bool> chunks) {
  Served& s = served_[manifest.version];
  s.manifest = manifest;
  s.descriptor = std::move(descriptor);
  s.chunks = std::move(chunks);
  s.registered = false;
  register_copy(manifest.version, /*again=*/false, std::move(done));
}

void Holder::update_chunks(std::uint64_t version, std::vector<bool> chunks) {
  auto it = served_.find(version);
  if (it != served_.end()) it->second.chunks = std::move(chunks);
}

void Holder::register_again() {
  for (auto& [v, s] : served_) {
    s.registered = false;
    register_copy(v, /*again=*/true, {});
  }
}

void Holder::register_copy(std::uint64_t version, bool again, Registered done) {
  auto it = served_.find(version);
  if (it == served_.end()) return;
  Served& s = it->second;
  HolderRegistration r;
  r.holder_id = options_.holder_id;
  r.endpoint = options_.endpoint;
  r.descriptor = s.descriptor;
  r.topology = options_.topology;
  r.manifest = s.manifest;
  r.chunks = s.chunks;
  r.again = again;
  s.registering = true;
  std::weak_ptr<bool> alive = alive_;
  store_->register_async(
      r, options_.request_timeout, [this, alive, version, done](Result<Committed> reply) {
        if (alive.expired()) return;
        auto it2 = served_.find(version);
        if (it2 != served_.end()) {
          it2->second.registering = false;
          it2->second.registered = reply.is_ok();
          if (!reply.is_ok()) {
            // heartbeat() tries again.
            log::warn("{}: registering {}: {}", options_.log_name,
                      vname(it2->second.manifest.model, version), reply.status().to_string());
          }
        }
        if (done) done(reply);
      });
}

void Holder::retire(std::uint64_t version, std::unique_ptr<core::RegisteredBuffer> memory) {
  auto it = served_.find(version);
  if (it == served_.end()) {
    // Never named to anyone: it may go at once.
    if (memory && freed_) freed_(std::move(memory));
    return;
  }
  std::string model = it->second.manifest.model;
  served_.erase(it);
  Retiring r;
  r.model = model;
  r.version = version;
  r.memory = std::move(memory);
  r.since = Clock::now();
  r.asking = true;
  retiring_.push_back(std::move(r));
  // The unpublish's reply says whether the copy drained already; if not, the timer asks again.
  // Requests go out on one socket in order, so the store sees the unpublish before any question.
  std::weak_ptr<bool> alive = alive_;
  store_->unpublish_async({options_.holder_id, model, version}, options_.request_timeout,
                          [this, alive, version](Result<Drained> reply) {
                            if (alive.expired()) return;
                            drain_reply(version, reply);
                          });
  if (!drain_timer_) {
    drain_timer_ = loop_->every(options_.drain_check, [this] { check_retiring(); });
  }
}

void Holder::heartbeat() {
  for (auto& [v, s] : served_) {
    if (!s.registered && !s.registering) register_copy(v, /*again=*/false, {});
  }
  std::weak_ptr<bool> alive = alive_;
  store_->heartbeat_async(options_.holder_id, options_.request_timeout, [this, alive](Status st) {
    if (alive.expired() || st.is_ok()) return;
    if (st.code() != core::Code::kNotFound) {
      log::warn("{}: heartbeat: {}", options_.log_name, st.to_string());
      return;
    }
    // The store restarted (or expired this holder): its state is soft, so the holder brings
    // back what it serves, marked `again`: readers may still hold leases the old store granted.
    log::info("{}: the store does not know this holder; registering {} copies again",
              options_.log_name, served_.size());
    if (on_forgotten_) on_forgotten_();
    register_again();
  });
}

bool Holder::registered(std::uint64_t version) const {
  auto it = served_.find(version);
  return it != served_.end() && it->second.registered;
}

std::vector<std::uint64_t> Holder::served() const {
  std::vector<std::uint64_t> out;
  for (const auto& [v, s] : served_)
    out.push_back(v);
  return out;
}

void Holder::check_retiring() {
  retired_.sweep();
  std::weak_ptr<bool> alive = alive_;
  for (auto& r : retiring_) {
    if (r.asking) continue;
    r.asking = true;
    std::uint64_t v = r.version;
    store_->drained_async({options_.holder_id, r.model, v}, options_.request_timeout,
                          [this, alive, v](Result<Drained> reply) {
                            if (alive.expired()) return;
                            drain_reply(v, reply);
                          });
  }
}

void Holder::drain_reply(std::uint64_t version, const Result<Drained>& reply) {
  auto it = std::find_if(retiring_.begin(), retiring_.end(),
                         [version](const Retiring& r) { return r.version == version && r.asking; });
  if (it == retiring_.end()) return;  // gone meanwhile (close())
  it->asking = false;
  const auto now = Clock::now();
  if (reply.is_ok() && reply->drained) return let_go(it, true, "drained");
  if (!reply.is_ok() && reply.status().code() == core::Code::kNotFound) {
    // A store that restarted since knows no lease on this copy, and those the old one granted
    // expire within one lease time-to-live.
    if (!it->unknown_since) it->unknown_since = now;
    if (now - *it->unknown_since >= options_.lease_ttl) {
      return let_go(it, true, "unknown to the store for a lease time-to-live");
    }
  } else {
    it->unknown_since.reset();
  }
  if (options_.drain_timeout > Millis(0) && now - it->since > options_.drain_timeout) {
    return let_go(it, false,
                  reply.is_ok() ? std::string("still leased") : reply.status().to_string());
  }
  // Kept. Said now and then, so that a reader holding a lease for long (or a store that stays
  // away) shows in the log.
  if (now - it->since > options_.drain_warn * (1 + it->warned)) {
    ++it->warned;
    log::warn("{}: {} retired {} ms ago and not drained yet ({}); kept", options_.log_name,
              vname(it->model, version), ms(now - it->since),
              reply.is_ok() ? std::string("still leased") : reply.status().to_string());
  }
}

void Holder::let_go(std::vector<Retiring>::iterator it, bool confirmed, const std::string& why) {
  std::string what = vname(it->model, it->version);
  if (confirmed) {
    log::debug("{}: {} may go ({})", options_.log_name, what, why);
  } else {
    ++unconfirmed_frees_;
    log::warn("{}: freeing {} after {} ms without the store confirming its leases drained ({})",
              options_.log_name, what, ms(Clock::now() - it->since), why);
  }
  std::unique_ptr<core::RegisteredBuffer> memory = std::move(it->memory);
  retiring_.erase(it);
  if (retiring_.empty()) drain_timer_.reset();  // never from the timer's own callback
  if (memory) {
    if (freed_) {
      freed_(std::move(memory));
    } else {
      retired_.sweep();
      retired_.add(std::move(memory));
    }
  }
}

Status Holder::close(Millis bound) {
  while (!served_.empty())
    retire(served_.begin()->first, nullptr);
  if (bound <= Millis(0)) {
    bound = options_.drain_timeout > Millis(0)
                ? options_.drain_timeout + options_.request_timeout + 2 * options_.drain_check
                : kCloseWithoutDrainTimeout;
  }
  std::size_t before = unconfirmed_frees_;
  loop_->run_until([this] { return retiring_.empty(); }, bound);
  if (retiring_.empty()) return {};
  if (options_.drain_timeout > Millis(0)) {
    while (!retiring_.empty())
      let_go(retiring_.begin(), false, "the store did not confirm in time");
    return core::timeout_error(options_.log_name + ": " +
                               std::to_string(unconfirmed_frees_ - before) +
                               " copies freed without the store confirming that their leases "
                               "drained");
  }
  // Without a drain time-out nothing goes on a timer: the copies stay (and their memory with
  // them) while this process does.
  return core::timeout_error(options_.log_name + ": " + std::to_string(retiring_.size()) +
                             " withdrawn copies had readers still reading after " +
                             std::to_string(bound.count()) + " ms");
}

}  // namespace sluice::weightstore
