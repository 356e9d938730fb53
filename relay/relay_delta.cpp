#include "relay/relay_delta.hpp"

#include <algorithm>
#include <cstring>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "format/delta.hpp"
#include "wire/region_server.hpp"

namespace sluice::relay {

namespace log = core::log;
using core::Clock;
using core::Millis;
using core::Result;
using core::Status;

namespace {
constexpr Millis kDrainCheck{200};
}  // namespace

DeltaOffers::DeltaOffers(core::EventLoop& loop, core::TransferEngine& engine,
                         weightstore::StoreClient& store, DeltaOptions options)
    : loop_(loop), engine_(engine), store_(store), options_(std::move(options)) {
  timer_ = loop_.every(kDrainCheck, [this] { check_dropping(); });
}

DeltaOffers::~DeltaOffers() {
  *alive_ = false;
  timer_.reset();
}

void DeltaOffers::make(const core::Manifest& base, const std::uint8_t* base_bytes,
                       const core::Manifest& target, const std::uint8_t* target_bytes) {
  const auto key = std::make_pair(base.version, target.version);
  if (offered_.count(key)) return;
  if (base.total_bytes != target.total_bytes || base.chunk_bytes != target.chunk_bytes) {
    log::info("{}: no delta {}->{}: the versions are of different layouts", options_.log_name,
              base.version, target.version);
    return;
  }
  const std::size_t n = target.total_bytes;
  const auto t0 = Clock::now();
  auto blob = core::encode_delta({base_bytes, n}, {target_bytes, n}, base.version, target.version,
                                 target.chunk_bytes);
  if (!blob.is_ok()) {
    log::warn("{}: delta {}->{}: {}", options_.log_name, base.version, target.version,
              blob.status().to_string());
    return;
  }
  auto memory = engine_.allocate(blob->size(), false);
  if (!memory.is_ok()) {
    log::warn("{}: delta {}->{}: {}", options_.log_name, base.version, target.version,
              memory.status().to_string());
    return;
  }
  std::memcpy((*memory)->data(), blob->data(), blob->size());
  Offer o;
  o.reg.holder_id = options_.holder_id;
  o.reg.endpoint = options_.endpoint;
  o.reg.topology = options_.topology;
  o.reg.descriptor = (*memory)->descriptor().encode();
  o.reg.delta.model = target.model;
  o.reg.delta.base = base.version;
  o.reg.delta.target = target.version;
  o.reg.delta.bytes = blob->size();
  o.reg.delta.chunk_bytes = target.chunk_bytes;
  for (std::uint64_t at = 0; at < blob->size(); at += target.chunk_bytes) {
    const std::uint64_t len = std::min<std::uint64_t>(target.chunk_bytes, blob->size() - at);
    o.reg.delta.checksums.push_back(core::chunk_checksum((*memory)->data() + at, len));
  }
  o.memory = std::move(memory).value();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  log::info("{}: offers delta {}@{}->{}: {} bytes for {} ({:.3f}), made in {:.0f} ms",
            options_.log_name, target.model, base.version, target.version, o.reg.delta.bytes, n,
            static_cast<double>(o.reg.delta.bytes) / static_cast<double>(n), ms);
  offer(o);
  offered_[key] = std::move(o);
}

void DeltaOffers::offer(const Offer& o) {
  std::string name = options_.log_name;
  std::uint64_t b = o.reg.delta.base, t = o.reg.delta.target;
  store_.register_delta_async(o.reg, options_.request_timeout, [name, b, t](Status s) {
    if (!s.is_ok()) log::warn("{}: offering delta {}->{}: {}", name, b, t, s.to_string());
  });
}

void DeltaOffers::register_again() {
  for (const auto& [key, o] : offered_)
    offer(o);
}

void DeltaOffers::drop_with(std::uint64_t version) {
  for (auto it = offered_.begin(); it != offered_.end();) {
    if (it->first.first != version && it->first.second != version) {
      ++it;
      continue;
    }
    auto d = std::make_unique<Dropping>();
    d->ref.holder_id = options_.holder_id;
    d->ref.model = it->second.reg.delta.model;
    d->ref.base = it->first.first;
    d->ref.target = it->first.second;
    d->memory = std::move(it->second.memory);
    d->since = Clock::now();
    Dropping* raw = d.get();
    dropping_.push_back(std::move(d));
    it = offered_.erase(it);
    raw->asking = true;
    weightstore::UnpublishDelta u;
    static_cast<weightstore::DeltaRef&>(u) = raw->ref;
    std::weak_ptr<bool> alive = alive_;
    store_.unpublish_delta_async(
        u, options_.request_timeout, [this, raw, alive](Result<weightstore::Drained> r) {
          if (alive.expired() || !*alive.lock()) return;
          raw->asking = false;
          if (r.is_ok() && r->drained) {
            retired_.add(std::move(raw->memory));
            std::erase_if(dropping_, [raw](const auto& p) { return p.get() == raw; });
          } else if (!r.is_ok() && r.status().code() == core::Code::kNotFound) {
            raw->unknown_since = Clock::now();
          }
        });
  }
}

void DeltaOffers::check_dropping() {
  retired_.sweep();
  const auto now = Clock::now();
  for (auto& d : dropping_) {
    if (d->asking) continue;
    if (d->unknown_since && now - *d->unknown_since >= options_.lease_ttl) {
      // The store does not know it (it restarted): every lease it granted has expired by now.
      retired_.add(std::move(d->memory));
      d->ref.holder_id.clear();  // marks it done
      continue;
    }
    d->asking = true;
    Dropping* raw = d.get();
    weightstore::DeltaDrainedQuery q;
    static_cast<weightstore::DeltaRef&>(q) = raw->ref;
    std::weak_ptr<bool> alive = alive_;
    store_.delta_drained_async(
        q, options_.request_timeout, [this, raw, alive](Result<weightstore::Drained> r) {
          if (alive.expired() || !*alive.lock()) return;
          raw->asking = false;
          if (r.is_ok() && r->drained) {
            retired_.add(std::move(raw->memory));
            raw->ref.holder_id.clear();
          } else if (!r.is_ok() && r.status().code() == core::Code::kNotFound) {
            if (!raw->unknown_since) raw->unknown_since = Clock::now();
          }
        });
  }
  std::erase_if(dropping_, [](const auto& p) { return p->ref.holder_id.empty() && !p->asking; });
}

void DeltaOffers::close(Millis bound) {
  std::vector<std::uint64_t> versions;
  for (const auto& [key, o] : offered_)
    versions.push_back(key.first);
  for (auto v : versions)
    drop_with(v);
  loop_.run_until([this] { return dropping_.empty(); }, bound);
  if (!dropping_.empty()) {
    log::warn("{}: {} deltas still leased when leaving", options_.log_name, dropping_.size());
  }
}

void fetch_delta(core::TransferEngine& engine, weightstore::StoreClient& store,
                 const std::string& model, std::uint64_t base, const core::Manifest& target,
                 const weightstore::Topology& where, const std::uint8_t* base_bytes,
                 core::RegisteredBuffer& dst, std::vector<bool>& have,
                 std::function<void(Result<DeltaFetched>)> done) {
  weightstore::DeltaPlanRequest req{model, base, target.version, where};
  store.delta_plan_async(
      req, weightstore::kStoreRequestTimeout,
      [&engine, &store, base, target, base_bytes, &dst, &have,
       done](Result<weightstore::DeltaPlan> r) {
        if (!r.is_ok()) return done(r.status());
        DeltaFetched f;
        f.expected = r->expected;
        f.target_bytes = r->target_bytes;
        if (!r->available) return done(f);
        const std::uint64_t lease = r->lease_id;
        auto fail = [&store, lease, done](Status s) {
          store.release_async(lease, weightstore::kStoreRequestTimeout);
          done(s);
        };
        const weightstore::DeltaObject& d = r->delta;
        // A delta as large as the version saves nothing (and bounds what is allocated here).
        if (d.bytes >= target.total_bytes) {
          store.release_async(lease, weightstore::kStoreRequestTimeout);
          f.available = false;
          f.expected = false;
          return done(f);
        }
        std::vector<core::ReadSource> sources;
        for (const auto& h : r->holders) {
          auto desc = core::RegionDescriptor::decode(h.descriptor);
          if (!desc.is_ok()) return fail(desc.status());
          sources.push_back({h.holder_id, std::move(desc).value(), h.holder_id});
        }
        auto buf = engine.allocate(d.bytes, false);
        if (!buf.is_ok()) return fail(buf.status());
        std::shared_ptr<core::RegisteredBuffer> blob = std::move(buf).value();
        core::ReadOptions ro;
        ro.op_timeout = kRelayGetTimeout;
        ro.total_timeout = kRelayReadTimeout;
        // The lease is renewed while the read runs (a holder frees a delta once its leases
        // drain), and a renewal that fails stops the read, as a version's pull does.
        ro.cancel = std::make_shared<core::ReadCancel>();
        std::shared_ptr<core::EventLoop::Timer> renew = store.keep_lease(
            lease, weightstore::kLeaseRenewPeriod, weightstore::kStoreRequestTimeout, ro.cancel,
            "delta " + target.model + "@" + std::to_string(base) + "->" +
                std::to_string(target.version));
        engine.read(
            std::move(sources), core::whole_region_chunks(d.layout()), *blob, ro,
            [&store, lease, blob, f, base, target, base_bytes, &dst, &have, done,
             renew](Result<core::ReadStats> st) mutable {
              renew->cancel();
              store.release_async(lease, weightstore::kStoreRequestTimeout);
              if (!st.is_ok()) return done(st.status());
              std::span<const std::uint8_t> bytes(blob->data(), blob->size());
              auto view = core::parse_delta(bytes);
              if (!view.is_ok()) return done(view.status());
              const core::DeltaHeader& h = view->header;
              if (Status fits = core::check_delta_fits(h, base, target.version, target.total_bytes,
                                                       target.chunk_bytes);
                  !fits.is_ok()) {
                return done(core::protocol_error("the delta read is not the one asked for: " +
                                                 fits.message()));
              }
              f.available = true;
              f.delta_bytes = blob->size();
              for (std::uint64_t i = 0; i < view->chunks.size() && i < have.size(); ++i) {
                if (have[i]) continue;
                const std::uint64_t at = i * h.chunk_bytes;
                const std::uint64_t n = view->chunk_size(i);
                std::span<std::uint8_t> out(dst.data() + at, n);
                Status s = core::apply_delta_chunk(*view, bytes, i, {base_bytes + at, n}, out);
                // A signed target's chunk must match its digest; the checksum only where the
                // version has none (plain mode, an older actor).
                const bool match = !target.digests.empty()
                                       ? core::chunk_digest(out.data(), n) == target.digests[i]
                                       : core::chunk_checksum(out.data(), n) == target.checksums[i];
                if (s.is_ok() && match) {
                  have[i] = true;
                  ++f.rebuilt;
                } else {
                  ++f.mismatched;
                }
              }
              done(f);
            });
      });
}

}  // namespace sluice::relay
