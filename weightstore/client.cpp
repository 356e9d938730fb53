#include "weightstore/client.hpp"

#include <optional>

#include "core/log.hpp"
#include "format/shard.hpp"

#include "weightstore/protocol.hpp"
#include "weightstore/shard_read.hpp"

namespace sluice::weightstore {

using core::Message;
using core::Result;
using core::Status;

Result<std::unique_ptr<StoreClient>> StoreClient::create(core::EventLoop& loop,
                                                         const std::string& endpoint,
                                                         const core::Security& security,
                                                         Millis timeout) {
  auto c = std::unique_ptr<StoreClient>(new StoreClient());
  SLUICE_ASSIGN_OR_RETURN(core::Security to_store, security.for_server(core::kRoleWeightstore));
  SLUICE_ASSIGN_OR_RETURN(c->client_, core::Client::create(loop, endpoint, to_store));
  c->loop_ = &loop;
  c->security_ = security;
  c->timeout_ = timeout;
  return c;
}

Result<ReadPlan> StoreClient::checked_plan(Result<ReadPlan> plan, const PlanRequest& asked,
                                           const core::Manifest* parent) {
  if (!plan.is_ok()) return plan;
  const core::Manifest& m = plan->manifest;
  Status s;
  if (m.model != asked.model || (asked.version != 0 && m.version != asked.version)) {
    s = core::protocol_error("a read plan for " + asked.model + "@" +
                             std::to_string(asked.version) + " came with the manifest of " +
                             m.model + "@" + std::to_string(m.version));
  } else if (parent) {
    s = core::check_share_follows(*parent, m);
  } else {
    s = core::check_version_signature(m, security_);
  }
  if (s.is_ok()) return plan;
  // The lease is given back at once; nothing of this version is read.
  release_async(plan->lease_id, timeout_);
  core::log::warn("store client: refused a read plan: {}", s.to_string());
  return s.with_context("read plan");
}

template <class T, class Decode>
void StoreClient::ask(Message req, Millis timeout, Decode decode, Done<T> done) {
  client_->request(std::move(req), or_default(timeout),
                   [decode, done = std::move(done)](Result<Message> reply) {
                     if (!done) return;
                     if (!reply.is_ok()) return done(reply.status());
                     done(decode(*reply));
                   });
}

void StoreClient::ask_status(Message req, Millis timeout, StatusDone done) {
  client_->request(std::move(req), or_default(timeout),
                   [done = std::move(done)](Result<Message> reply) {
                     if (done) done(reply.status());
                   });
}

template <class T, class Decode>
Result<T> StoreClient::call(Message req, Millis timeout, Decode decode) {
  SLUICE_ASSIGN_OR_RETURN(Message reply, client_->call(std::move(req), or_default(timeout)));
  return decode(reply);
}

namespace {
auto decode_plain = [](const Message& m) { return decode_plan(m); };
auto decode_holder_list = [](const Message& m) { return decode_holders(m); };
auto decode_source = [](const Message& m) { return decode_chain_source(m); };
}  // namespace

Status StoreClient::put_manifest(const core::Manifest& m) {
  return client_->call(encode(PutManifest{m}), timeout_).status();
}

Result<bool> StoreClient::register_holder(const HolderRegistration& r) {
  SLUICE_ASSIGN_OR_RETURN(auto c, call<Committed>(encode(r), timeout_, decode_committed));
  return c.committed;
}

Status StoreClient::heartbeat(const std::string& holder_id) {
  return client_->call(encode(Heartbeat{holder_id}), timeout_).status();
}

Result<std::uint64_t> StoreClient::latest(const std::string& model) {
  SLUICE_ASSIGN_OR_RETURN(
      auto l, call<Latest>(encode(LatestRequest{model, 0, 0}), timeout_, decode_latest));
  return l.version;
}

Result<ReadPlan> StoreClient::plan(const std::string& model, std::uint64_t version,
                                   const Topology& where) {
  PlanRequest req{model, version, where};
  return checked_plan(call<ReadPlan>(encode(req), timeout_, decode_plain), req);
}

Status StoreClient::release(std::uint64_t lease_id) {
  Release r;
  r.lease_id = lease_id;
  return client_->call(encode(r), timeout_).status();
}

Result<bool> StoreClient::unpublish(const std::string& holder_id, const std::string& model,
                                    std::uint64_t version, Millis timeout) {
  const Unpublish u{{holder_id, model, version}};
  SLUICE_ASSIGN_OR_RETURN(auto d, call<Drained>(encode(u), timeout, decode_drained));
  return d.drained;
}

Result<bool> StoreClient::drained(const std::string& holder_id, const std::string& model,
                                  std::uint64_t version, Millis timeout) {
  const DrainedQuery q{{holder_id, model, version}};
  SLUICE_ASSIGN_OR_RETURN(auto d, call<Drained>(encode(q), timeout, decode_drained));
  return d.drained;
}

Result<std::vector<HolderState>> StoreClient::holders(const std::string& model,
                                                      std::uint64_t version) {
  HoldersRequest h;
  h.model = model;
  h.version = version;
  SLUICE_ASSIGN_OR_RETURN(auto hs, call<Holders>(encode(h), timeout_, decode_holder_list));
  return std::move(hs.holders);
}

Status StoreClient::join_relay(const JoinRelay& j) {
  return client_->call(encode(j), timeout_).status();
}

Result<std::map<std::string, std::uint64_t>> StoreClient::copies(const std::string& model,
                                                                 std::uint64_t version) {
  CopiesRequest c;
  c.model = model;
  c.version = version;
  SLUICE_ASSIGN_OR_RETURN(auto cs, call<Copies>(encode(c), timeout_,
                                                [](const Message& m) { return decode_copies(m); }));
  return std::move(cs.chunks);
}

void StoreClient::put_manifest_async(const core::Manifest& m, Millis timeout, StatusDone done) {
  ask_status(encode(PutManifest{m}), timeout, std::move(done));
}

void StoreClient::register_async(const HolderRegistration& r, Millis timeout,
                                 Done<Committed> done) {
  ask<Committed>(encode(r), timeout, decode_committed, std::move(done));
}

void StoreClient::add_chunks_async(const AddChunks& a, Millis timeout, Done<Committed> done) {
  ask<Committed>(encode(a), timeout, decode_committed, std::move(done));
}

void StoreClient::heartbeat_async(const std::string& holder_id, Millis timeout, StatusDone done) {
  ask_status(encode(Heartbeat{holder_id}), timeout, std::move(done));
}

void StoreClient::latest_async(const std::string& model, Millis timeout, Done<Latest> done) {
  latest_async(LatestRequest{model, 0, 0}, timeout, std::move(done));
}

void StoreClient::latest_async(const LatestRequest& l, Millis timeout, Done<Latest> done) {
  ask<Latest>(encode(l), or_default(timeout) + Millis(l.wait_ms), decode_latest, std::move(done));
}

void StoreClient::plan_async(const PlanRequest& p, Millis timeout, Done<ReadPlan> done) {
  ask<ReadPlan>(encode(p), timeout, decode_plain,
                [this, p, done = std::move(done)](Result<ReadPlan> plan) {
                  if (done) done(checked_plan(std::move(plan), p));
                });
}

void StoreClient::share_plan_async(const PlanRequest& p,
                                   std::shared_ptr<const core::Manifest> parent, Millis timeout,
                                   Done<ReadPlan> done) {
  ask<ReadPlan>(
      encode(p), timeout, decode_plain,
      [this, p, parent = std::move(parent), done = std::move(done)](Result<ReadPlan> plan) {
        if (done) done(checked_plan(std::move(plan), p, parent.get()));
      });
}

void StoreClient::renew_async(std::uint64_t lease_id, Millis timeout, StatusDone done) {
  Renew r;
  r.lease_id = lease_id;
  ask_status(encode(r), timeout, std::move(done));
}

std::shared_ptr<core::EventLoop::Timer> StoreClient::keep_lease(
    std::uint64_t lease_id, Millis period, Millis timeout, std::shared_ptr<core::ReadCancel> stop,
    std::string what) {
  return loop().every(period, [this, lease_id, timeout, stop, what] {
    renew_async(lease_id, timeout, [lease_id, stop, what](Status s) {
      if (s.is_ok() || stop->cancelled()) return;
      core::log::warn("{}: lease {} not renewed, read stopped: {}", what, lease_id, s.to_string());
      stop->cancel(core::unavailable("lease " + std::to_string(lease_id) +
                                     " not renewed: " + s.to_string()));
    });
  });
}

void StoreClient::release_async(std::uint64_t lease_id, Millis timeout, StatusDone done) {
  Release r;
  r.lease_id = lease_id;
  ask_status(encode(r), timeout, std::move(done));
}

void StoreClient::unpublish_async(const CopyRef& c, Millis timeout, Done<Drained> done) {
  Unpublish u;
  static_cast<CopyRef&>(u) = c;
  ask<Drained>(encode(u), timeout, decode_drained, std::move(done));
}

void StoreClient::drained_async(const CopyRef& c, Millis timeout, Done<Drained> done) {
  DrainedQuery q;
  static_cast<CopyRef&>(q) = c;
  ask<Drained>(encode(q), timeout, decode_drained, std::move(done));
}

void StoreClient::holders_async(const HoldersRequest& h, Millis timeout, Done<Holders> done) {
  ask<Holders>(encode(h), timeout, decode_holder_list, std::move(done));
}

void StoreClient::join_relay_async(const JoinRelay& j, Millis timeout, StatusDone done) {
  ask_status(encode(j), timeout, std::move(done));
}

void StoreClient::chain_source_async(const ChainSourceRequest& c, Millis timeout,
                                     Done<ChainSource> done) {
  ask<ChainSource>(encode(c), or_default(timeout) + Millis(c.wait_ms), decode_source,
                   std::move(done));
}

namespace {
core::Status too_large(const std::string& model, const core::Manifest& m,
                       const core::ReadOptions& options) {
  return core::invalid_argument(
      "pull " + model + "@" + std::to_string(m.version) + ": " + std::to_string(m.total_bytes) +
      " bytes exceed this reader's limit of " + std::to_string(options.max_total_bytes));
}

// What a shard read asks of the store, answered by `store` (which outlives the pull).
ShareStore share_store(StoreClient& store) {
  ShareStore s;
  s.loop = &store.loop();
  s.plan = [&store](const PlanRequest& p, std::shared_ptr<const core::Manifest> parent,
                    StoreClient::Done<ReadPlan> done) {
    store.share_plan_async(p, std::move(parent), kStoreRequestTimeout, std::move(done));
  };
  s.release = [&store](std::uint64_t lease) { store.release_async(lease, kStoreRequestTimeout); };
  return s;
}
}  // namespace

Result<Pulled> pull(core::TransferEngine& engine, StoreClient& store, const std::string& model,
                    std::uint64_t version, const Topology& where, core::ReadOptions options) {
  SLUICE_ASSIGN_OR_RETURN(ReadPlan plan, store.plan(model, version, where));
  if (plan.manifest.total_bytes > options.max_total_bytes) {
    store.release(plan.lease_id).ignore();
    return too_large(model, plan.manifest, options);
  }
  std::vector<core::ReadSource> sources;
  for (const auto& h : plan.holders) {
    auto d = core::RegionDescriptor::decode(h.descriptor);
    if (!d.is_ok()) {
      store.release(plan.lease_id).ignore();
      return d.status().with_context("holder " + h.holder_id);
    }
    sources.push_back({h.holder_id, std::move(d).value(), h.holder_id});
  }
  auto layout = plan.manifest.layout();
  auto chunks = core::whole_region_chunks(layout);
  for (std::size_t i = 0; i < chunks.size(); ++i)
    chunks[i].sources = plan.chunks[i].holders;
  Pulled out;
  auto buf = engine.allocate(plan.manifest.total_bytes, false);
  if (!buf.is_ok()) {
    store.release(plan.lease_id).ignore();
    return buf.status();
  }
  out.buffer = std::move(buf).value();
  auto stats = engine.read_sync(std::move(sources), std::move(chunks), *out.buffer, options);
  // The lease ends whether or not the read worked; a store that is gone lets it expire.
  store.release(plan.lease_id).ignore();
  if (!stats.is_ok()) {
    return stats.status().with_context("pull " + model + "@" +
                                       std::to_string(plan.manifest.version));
  }
  out.stats = *stats;
  out.manifest = std::move(plan.manifest);
  return out;
}

void pull_async(core::TransferEngine& engine, StoreClient& store, const std::string& model,
                std::uint64_t version, const Topology& where, core::ReadOptions options,
                std::function<void(core::Result<Pulled>)> done,
                std::function<bool(ReadPlan&)> accept, Millis lease_renew,
                std::shared_ptr<const core::ShardLayout> shard) {
  StoreClient* sc = &store;
  core::TransferEngine* eng = &engine;
  core::log::debug("pull {}@{}: asking for a read plan", model, version);
  store.plan_async(
      PlanRequest{model, version, where}, kStoreRequestTimeout,
      [sc, eng, model, where, options, done, accept, lease_renew,
       shard](Result<ReadPlan> plan_r) mutable {
        core::log::debug("pull {}: read plan: {}", model, plan_r.status().to_string());
        if (!plan_r.is_ok()) return done(plan_r.status().with_context("pull " + model));
        auto plan = std::make_shared<ReadPlan>(std::move(plan_r).value());
        // Fire and forget: a lease that is not released expires on the store.
        auto release = [sc](std::uint64_t lease) {
          sc->release_async(lease, kStoreRequestTimeout);
        };
        if (plan->manifest.total_bytes > options.max_total_bytes) {
          release(plan->lease_id);
          return done(too_large(model, plan->manifest, options));
        }
        if (accept && !accept(*plan)) {
          release(plan->lease_id);
          return done(core::failed_precondition("pull " + model + ": the read plan was declined"));
        }
        std::vector<core::ReadSource> sources;
        for (const auto& h : plan->holders) {
          auto d = core::RegionDescriptor::decode(h.descriptor);
          if (!d.is_ok()) {
            release(plan->lease_id);
            return done(d.status().with_context("holder " + h.holder_id));
          }
          sources.push_back({h.holder_id, std::move(d).value(), h.holder_id});
        }
        // A layout that does not fit this version fails here, before anything is read.
        std::optional<core::ShardPlan> shard_plan;
        if (shard) {
          auto p = core::plan_shard(plan->manifest, *shard);
          if (!p.is_ok()) {
            release(plan->lease_id);
            return done(p.status());  // names the model, version and tensor
          }
          shard_plan = std::move(p).value();
        }
        // Renewed while the read runs; a renewal that fails ends the read (keep_lease).
        std::shared_ptr<core::EventLoop::Timer> renew;
        if (lease_renew > Millis(0)) {
          options.cancel = std::make_shared<core::ReadCancel>();
          renew = sc->keep_lease(plan->lease_id, lease_renew, lease_renew, options.cancel,
                                 "pull " + model);
        }
        if (shard_plan) {
          return read_shard_via_share_async(
              *eng, share_store(*sc), where, plan, std::move(sources), std::move(*shard_plan),
              *shard, options, [plan, done, release, renew](Result<Pulled> pulled) mutable {
                renew.reset();
                release(plan->lease_id);
                done(std::move(pulled));
              });
        }
        auto chunks = core::whole_region_chunks(plan->manifest.layout());
        for (std::size_t i = 0; i < chunks.size(); ++i)
          chunks[i].sources = plan->chunks[i].holders;
        auto buf = eng->allocate(plan->manifest.total_bytes, false);
        if (!buf.is_ok()) {
          renew.reset();
          release(plan->lease_id);
          return done(buf.status());
        }
        auto out = std::make_shared<Pulled>();
        out->buffer = std::move(buf).value();
        core::RegisteredBuffer& dst = *out->buffer;
        eng->read(std::move(sources), std::move(chunks), dst, options,
                  [plan, out, done, release, model, renew](Result<core::ReadStats> stats) mutable {
                    renew.reset();
                    release(plan->lease_id);
                    if (!stats.is_ok()) {
                      return done(stats.status().with_context(
                          "pull " + model + "@" + std::to_string(plan->manifest.version)));
                    }
                    out->stats = *stats;
                    for (std::size_t i = 0; i < stats->bytes_per_source.size(); ++i) {
                      if (i < plan->holders.size() && plan->holders[i].distance == 0)
                        out->same_host_bytes += stats->bytes_per_source[i];
                    }
                    out->manifest = std::move(plan->manifest);
                    done(std::move(*out));
                  });
      });
}

bool keep_same_host_sources(ReadPlan& plan) {
  if (plan.chunks.empty()) return false;
  for (auto& c : plan.chunks) {
    std::erase_if(c.holders, [&](std::uint32_t h) {
      return h >= plan.holders.size() || plan.holders[h].distance != 0;
    });
    if (c.holders.empty()) return false;
  }
  return true;
}

// ---- deltas

Status StoreClient::register_delta(const DeltaRegistration& r) {
  return client_->call(encode(r), timeout_).status();
}

Result<DeltaPlan> StoreClient::delta_plan(const DeltaPlanRequest& r) {
  return call<DeltaPlan>(encode(r), timeout_,
                         [](const Message& m) { return decode_delta_plan(m); });
}

Result<std::vector<DeltaState>> StoreClient::deltas(const std::string& model) {
  SLUICE_ASSIGN_OR_RETURN(auto d, call<Deltas>(encode(DeltasRequest{model}), timeout_,
                                               [](const Message& m) { return decode_deltas(m); }));
  return d.deltas;
}

void StoreClient::register_delta_async(const DeltaRegistration& r, Millis timeout,
                                       StatusDone done) {
  ask_status(encode(r), timeout, std::move(done));
}

void StoreClient::delta_plan_async(const DeltaPlanRequest& r, Millis timeout,
                                   Done<DeltaPlan> done) {
  ask<DeltaPlan>(
      encode(r), timeout, [](const Message& m) { return decode_delta_plan(m); }, std::move(done));
}

void StoreClient::unpublish_delta_async(const UnpublishDelta& r, Millis timeout,
                                        Done<Drained> done) {
  ask<Drained>(encode(r), timeout, decode_drained, std::move(done));
}

void StoreClient::delta_drained_async(const DeltaDrainedQuery& r, Millis timeout,
                                      Done<Drained> done) {
  ask<Drained>(encode(r), timeout, decode_drained, std::move(done));
}

}  // namespace sluice::weightstore
