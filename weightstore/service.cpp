#include "weightstore/service.hpp"

#include <algorithm>
#include <optional>

#include "core/log.hpp"
#include "core/metrics.hpp"
#include "format/shard.hpp"
#include "weightstore/protocol.hpp"

namespace sluice::weightstore {

namespace log = core::log;
using core::Message;
using core::Result;
using core::Status;

Status ServiceConfig::validate() const {
  if (keep_versions < 2) return core::invalid_argument("keep_versions must be at least 2");
  if (holder_ttl_ms == 0 || lease_ttl_ms == 0 || expire_interval_ms == 0) {
    return core::invalid_argument("ttls and the expiry interval must be positive");
  }
  if (lease_max_life_ms < lease_ttl_ms) {
    return core::invalid_argument("lease_max_life_ms must be at least lease_ttl_ms");
  }
  if (sources_per_chunk == 0) return core::invalid_argument("sources_per_chunk must be positive");
  if (broadcast != "chain" && broadcast != "tree" && broadcast != "direct") {
    return core::invalid_argument("broadcast must be chain, tree or direct, not '" + broadcast +
                                  "'");
  }
  if (fanout == 0) return core::invalid_argument("fanout must be positive");
  if (max_version_bytes == 0 || max_tensors == 0 || max_chunks == 0) {
    return core::invalid_argument("max_version_bytes, max_tensors and max_chunks must be positive");
  }
  if (max_version_ahead == 0) return core::invalid_argument("max_version_ahead must be positive");
  return {};
}

namespace {
StoreConfig store_config(const ServiceConfig& c) {
  StoreConfig s;
  s.keep_versions = c.keep_versions;
  s.holder_ttl = Millis(c.holder_ttl_ms);
  s.lease_ttl = Millis(c.lease_ttl_ms);
  s.lease_max_life = Millis(c.lease_max_life_ms);
  s.sources_per_chunk = c.sources_per_chunk;
  s.broadcast = c.broadcast;
  s.fanout = c.fanout;
  s.max_version_ahead = c.max_version_ahead;
  return s;
}
}  // namespace

StoreService::StoreService(core::EventLoop& loop, const ServiceConfig& config)
    : loop_(loop), config_(config), store_(store_config(config)), waiters_(loop, WaitLimits{}) {}

StoreService::~StoreService() {
  expiry_.reset();
  server_.reset();  // before the waiters' responders and timers go
}

Result<std::unique_ptr<StoreService>> StoreService::create(core::EventLoop& loop,
                                                           const ServiceConfig& config) {
  SLUICE_TRY(config.validate());
  std::unique_ptr<StoreService> s(new StoreService(loop, config));
  SLUICE_ASSIGN_OR_RETURN(s->security_, core::load_security(config.security, "weightstore"));
  SLUICE_ASSIGN_OR_RETURN(s->server_, core::Server::create(loop, config.listen, s->security_));
  s->install_handlers();
  StoreService* raw = s.get();
  s->expiry_ = loop.every(Millis(config.expire_interval_ms), [raw] {
    for (const auto& id : raw->store_.expire(Clock::now())) {
      log::warn("weightstore: holder {} expired (no heartbeat for {} ms)", id,
                raw->config_.holder_ttl_ms);
    }
    raw->export_metrics();
  });
  log::info("weightstore: listening on {}", s->endpoint());
  return s;
}

void StoreService::export_metrics() {
  auto& reg = core::process_metrics();
  const auto requests = server_->stats().requests + server_->stats().oneway;
  reg.counter("sluice_store_requests_total", "control requests served")
      .inc(requests - requests_exported_);
  requests_exported_ = requests;
  reg.gauge("sluice_store_holders", "holders registered")
      .set(static_cast<double>(store_.holder_count()));
  for (const auto& model : store_.models()) {
    auto latest = store_.latest(model);
    if (latest.is_ok())
      reg.gauge("sluice_store_latest_version", "the newest committed version", {{"model", model}})
          .set(static_cast<double>(*latest));
  }
}

const std::string& StoreService::endpoint() const {
  return server_->endpoint();
}

// Who may send what (docs/architecture.md, "Authorization"). In curve mode the messaging layer
// refuses another role before a handler runs; the handlers check what depends on the body and
// the state: a version is made only from a manifest the actor signed; only the identity that
// registered a holder acts for it; an id that names the caller is the caller's own; a lease is
// its taker's; and only the actor or a relay brings back a version the store does not know. In
// plain mode nobody is authenticated and none of it applies.
namespace {
const core::Server::Roles kActor{core::kRoleActor};
const core::Server::Roles kHolders{core::kRoleActor, core::kRoleRelay, core::kRoleRollout};
const core::Server::Roles kRelay{core::kRoleRelay};
const core::Server::Roles kAnyMember{};

// A refusal of the store's own (permission_denied), counted and logged as one.
Status counted(Status s, const Message& req, const char* reason = "owner") {
  if (s.code() == core::Code::kPermissionDenied) {
    core::count_refusal(reason, req.peer.describe(), req.type + ": " + s.message());
  }
  return s;
}

// In curve mode a holder id is its caller's own (core::Members::owns_holder_id): the identity,
// or the identity and a '-' suffix. So nobody registers under a holder's id while that holder is
// down, and a reader can check that a server is the holder its plan names.
Status holder_id_is_callers(const core::Security& sec, const std::string& holder_id,
                            const Message& req) {
  if (!req.peer.authenticated ||
      (sec.members && sec.members->owns_holder_id(req.peer.identity, holder_id))) {
    return {};
  }
  return counted(
      core::permission_denied("holder id '" + holder_id + "' is not " + req.peer.identity +
                              "'s: a member holds as '" + req.peer.identity + "' or '" +
                              req.peer.identity + "-<suffix>'"),
      req);
}

// The holder's owner check, counted and logged as a refusal when it fails.
Status owner_of(const WeightStore& st, const core::Security& sec, const std::string& holder_id,
                const Message& req) {
  SLUICE_TRY(holder_id_is_callers(sec, holder_id, req));
  return counted(st.check_owner(holder_id, req.peer.identity), req);
}

// An id in the body that names the caller (`field`): in curve mode it must be the authenticated
// identity, never another member's. Plain mode has no identity to compare with.
Status caller_is(const Message& req, const std::string& id, const char* field) {
  if (!req.peer.authenticated || id == req.peer.identity) return {};
  return counted(
      core::permission_denied(std::string("'") + field + "' is " + id + ", but the caller is " +
                              req.peer.identity + ": a member acts only as itself"),
      req);
}

// A manifest that would make a version: the actor's signature, in curve mode.
Status signed_by_actor(const core::Manifest& m, const core::Security& security,
                       const Message& req) {
  return counted(core::check_version_signature(m, security), req, "signature");
}
// A host share's manifest (format/shard.hpp): the store must know the parent version, and the
// manifest must be exactly what the parent's signed manifest gives for that share.
Status follows_parent(const WeightStore& st, const core::Manifest& m) {
  const std::string parent = core::share_parent(m.model);
  const core::Manifest* p = st.manifest(parent, m.version);
  if (!p) {
    return core::failed_precondition(m.model + "@" + std::to_string(m.version) +
                                     ": the store has no manifest of " + parent + "@" +
                                     std::to_string(m.version) + " to check the share against");
  }
  return core::check_share_follows(*p, m);
}
}  // namespace

void StoreService::install_handlers() {
  StoreDecodeLimits lim;
  lim.max_version_bytes = config_.max_version_bytes;
  lim.max_tensors = static_cast<std::size_t>(config_.max_tensors);
  lim.max_chunks = config_.max_chunks;
  install_holder_handlers(lim);
  install_reader_handlers();
  install_relay_handlers();
  install_delta_handlers(lim);
}

// Versions and their holders: manifests, registrations, chunks, heartbeats, drains, latest.
void StoreService::install_holder_handlers(const StoreDecodeLimits& lim) {
  auto& srv = *server_;
  WeightStore& st = store_;
  const core::Security& sec = security_;
  srv.on_sync(
      msg::kPutManifest,
      [&st, &sec, lim](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_put_manifest(req, lim));
        const core::Manifest& m = r.manifest;
        if (core::is_share_model(m.model)) {
          return counted(core::invalid_argument("'" + m.model +
                                                "' names a host share, which no actor publishes"),
                         req);
        }
        SLUICE_TRY(signed_by_actor(m, sec, req));
        SLUICE_TRY(st.put_manifest(m));
        log::info("weightstore: manifest {}@{} ({} bytes, {} chunks)", m.model, m.version,
                  m.total_bytes, m.chunk_count());
        return encode_ok();
      },
      kActor);
  Waiters& waiters = waiters_;
  srv.on_sync(
      msg::kRegister,
      [&st, &sec, &waiters, lim](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_registration(req, lim));
        SLUICE_TRY(holder_id_is_callers(sec, r.holder_id, req));
        const bool known = st.knows(r.manifest.model, r.manifest.version);
        // A registration of a version the store does not know creates it (how a restarted
        // store learns its versions back): only from a manifest the actor signed, whoever
        // carries it. A known version's manifest must equal the store's, which was checked when
        // it came; an unsigned one is refused here with the reason rather than as "different".
        // A host share's manifest is not signed: it must be the one that the parent version's
        // signed manifest gives.
        if (core::is_share_model(r.manifest.model)) {
          SLUICE_TRY(counted(follows_parent(st, r.manifest), req));
        } else if (!known || r.manifest.signature.empty()) {
          SLUICE_TRY(signed_by_actor(r.manifest, sec, req));
        }
        // Only the actor, which makes versions, and the relays, which carry them, bring one
        // back; a rollout registers only what the store already has.
        if (req.peer.authenticated && req.peer.role == core::kRoleRollout && !known) {
          Status no = core::permission_denied(
              req.peer.identity + " (role rollout) may not bring a new version (" +
              r.manifest.model + "@" + std::to_string(r.manifest.version) + ")");
          core::count_refusal("role", req.peer.describe(), req.type + ": " + no.message());
          return no;
        }
        bool was = st.committed(r.manifest.model, r.manifest.version);
        SLUICE_TRY(counted(st.register_holder(r, Clock::now(), req.peer.identity), req));
        bool now = st.committed(r.manifest.model, r.manifest.version);
        if (!was && now) {
          log::info("weightstore: {}@{} committed (holder {})", r.manifest.model,
                    r.manifest.version, r.holder_id);
        }
        waiters.wake();
        return encode(Committed{now});
      },
      kHolders);
  srv.on_sync(
      msg::kAddChunks,
      [&st, &sec, &waiters](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_add_chunks(req));
        SLUICE_TRY(owner_of(st, sec, r.holder_id, req));
        SLUICE_TRY(st.add_chunks(r.holder_id, r.model, r.version, r.chunks, Clock::now()));
        waiters.wake();
        return encode(Committed{st.committed(r.model, r.version)});
      },
      kHolders);
  srv.on_sync(
      msg::kHeartbeat,
      [&st, &sec](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_heartbeat(req));
        SLUICE_TRY(owner_of(st, sec, r.holder_id, req));
        SLUICE_TRY(st.heartbeat(r.holder_id, Clock::now()));
        return encode_ok();
      },
      kHolders);
  auto drained_reply = [&st, &sec](const Message& req, bool unpublish) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto c, decode_copy_ref(req));
    SLUICE_TRY(owner_of(st, sec, c.holder_id, req));
    if (unpublish) SLUICE_TRY(st.unpublish(c.holder_id, c.model, c.version));
    SLUICE_ASSIGN_OR_RETURN(bool drained, st.drained(c.holder_id, c.model, c.version));
    return encode(Drained{drained});
  };
  srv.on_sync(
      msg::kUnpublish, [drained_reply](const Message& req) { return drained_reply(req, true); },
      kHolders);
  srv.on_sync(
      msg::kDrained, [drained_reply](const Message& req) { return drained_reply(req, false); },
      kHolders);
  // A long poll with `wait_ms`: answered once a version above `after` commits, or when the wait
  // ends (with the latest then, or the error).
  srv.on(
      msg::kLatest,
      [&st, &waiters](const Message& req, core::Responder out) {
        auto r = decode_latest_request(req);
        if (!r.is_ok()) return out.respond(r.status());
        waiters.park(req.peer.identity, Millis(r->wait_ms), std::move(out),
                     [&st, r = *r](bool final) -> std::optional<Result<Message>> {
                       auto v = st.latest(r.model);
                       if (v.is_ok() && *v > r.after) return encode(Latest{*v});
                       if (!final) return std::nullopt;
                       if (!v.is_ok()) return v.status();
                       return encode(Latest{*v});
                     });
      },
      kAnyMember);
}

// Readers: plans, their leases, and pins.
void StoreService::install_reader_handlers() {
  auto& srv = *server_;
  WeightStore& st = store_;
  // A read plan names holders' memory keys: members only (in curve mode nobody else gets here).
  srv.on_sync(
      msg::kPlan,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_plan_request(req));
        SLUICE_ASSIGN_OR_RETURN(
            auto plan, st.plan(r.model, r.version, r.topology, Clock::now(), req.peer.identity));
        return encode(plan);
      },
      kAnyMember);
  srv.on_sync(
      msg::kRenew,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_lease_ref(req));
        SLUICE_TRY(counted(st.renew(r.lease_id, Clock::now(), req.peer.identity), req));
        return encode_ok();
      },
      kAnyMember);
  srv.on_sync(
      msg::kRelease,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_lease_ref(req));
        SLUICE_TRY(counted(st.release(r.lease_id, req.peer.identity), req));
        return encode_ok();
      },
      kAnyMember);
  // Pins keep versions from retention while generation uses them: the roles that generate or
  // train.
  srv.on_sync(msg::kPin,
              [&st](const Message& req) -> Result<Message> {
                SLUICE_ASSIGN_OR_RETURN(auto r, decode_pin_ref(req));
                SLUICE_TRY(caller_is(req, r.owner, "owner"));
                SLUICE_TRY(st.pin(r.model, r.version, r.owner));
                return encode_ok();
              },
              {core::kRoleActor, core::kRoleRollout, core::kRoleManager});
  srv.on_sync(msg::kUnpin,
              [&st](const Message& req) -> Result<Message> {
                SLUICE_ASSIGN_OR_RETURN(auto r, decode_pin_ref(req));
                SLUICE_TRY(caller_is(req, r.owner, "owner"));
                st.unpin(r.model, r.version, r.owner);
                return encode_ok();
              },
              {core::kRoleActor, core::kRoleRollout, core::kRoleManager});
}

// Relays: joining, their chain sources, and what copies a version has.
void StoreService::install_relay_handlers() {
  auto& srv = *server_;
  WeightStore& st = store_;
  srv.on_sync(
      msg::kJoinRelay,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_join_relay(req));
        SLUICE_TRY(caller_is(req, r.relay_id, "relay_id"));
        SLUICE_TRY(counted(
            st.join_relay(r.relay_id, r.topology, Clock::now(), req.peer.identity, r.share), req));
        st.set_delta_maker(r.relay_id, r.makes_deltas);
        return encode_ok();
      },
      kRelay);
  // A long poll with `wait_ms`: answered once the store names another source than `following`,
  // or one that holds more than `after_chunks` chunks, or when the wait ends.
  Waiters& waiters = waiters_;
  srv.on(
      msg::kChainSource,
      [&st, &waiters](const Message& req, core::Responder out) {
        auto r = decode_chain_source_request(req);
        if (!r.is_ok()) return out.respond(r.status());
        if (Status s = caller_is(req, r->relay_id, "relay_id"); !s.is_ok()) return out.respond(s);
        waiters.park(req.peer.identity, Millis(r->wait_ms), std::move(out),
                     [&st, r = *r](bool final) -> std::optional<Result<Message>> {
                       auto src = st.chain_source(r.model, r.version, r.relay_id, r.exclude);
                       if (!src.is_ok()) {
                         if (!final) return std::nullopt;
                         return src.status();
                       }
                       const auto held = static_cast<std::uint64_t>(
                           std::count(src->chunks.begin(), src->chunks.end(), true));
                       if (!final && src->holder_id == r.following && held <= r.after_chunks)
                         return std::nullopt;
                       src->distance = st.holder_distance(r.relay_id, src->holder_id);
                       src->feeds_other_datacenter =
                           st.feeds_other_datacenter(r.model, r.version, r.relay_id);
                       // Readers in the next datacenter are told a delta is expected from it
                       // (DeltaPlan).
                       if (src->feeds_other_datacenter) st.set_delta_maker(r.relay_id, true);
                       return encode(*src);
                     });
      },
      kRelay);
  srv.on_sync(
      msg::kCopies,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_version_ref(req));
        Copies c;
        for (const auto& [id, n] : st.copies(r.model, r.version))
          c.chunks[id] = n;
        return encode(c);
      },
      kAnyMember);
  srv.on_sync(
      msg::kHolders,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_version_ref(req));
        return encode(Holders{st.holders(r.model, r.version)});
      },
      kAnyMember);
  srv.on_sync(
      msg::kRetained,
      [&st](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_retained_request(req));
        auto kept = st.retained(r.model);
        return encode(Retained{{kept.begin(), kept.end()}});
      },
      kAnyMember);
}

// Deltas (store.hpp): holders offer them as they offer versions; members read them.
void StoreService::install_delta_handlers(const StoreDecodeLimits& lim) {
  auto& srv = *server_;
  WeightStore& st = store_;
  const core::Security& sec = security_;
  srv.on_sync(
      msg::kRegisterDelta,
      [&st, &sec, lim](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_delta_registration(req, lim));
        SLUICE_TRY(holder_id_is_callers(sec, r.holder_id, req));
        SLUICE_TRY(counted(st.register_delta(r, Clock::now(), req.peer.identity), req));
        log::info("weightstore: delta {}@{}->{} ({} bytes) offered by {}", r.delta.model,
                  r.delta.base, r.delta.target, r.delta.bytes, r.holder_id);
        return encode_ok();
      },
      kHolders);
  srv.on_sync(
      msg::kDeltaPlan,
      [&st, lim](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_delta_plan_request(req, lim));
        SLUICE_ASSIGN_OR_RETURN(auto p, st.delta_plan(r.model, r.base, r.target, r.topology,
                                                      Clock::now(), req.peer.identity));
        return encode(p);
      },
      kAnyMember);
  auto delta_drained = [&st, &sec, lim](const Message& req, bool unpublish) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto r, decode_delta_ref(req, lim));
    SLUICE_TRY(owner_of(st, sec, r.holder_id, req));
    SLUICE_ASSIGN_OR_RETURN(bool drained,
                            unpublish ? st.unpublish_delta(r.holder_id, r.model, r.base, r.target)
                                      : st.delta_drained(r.holder_id, r.model, r.base, r.target));
    return encode(Drained{drained});
  };
  srv.on_sync(
      msg::kUnpublishDelta,
      [delta_drained](const Message& req) { return delta_drained(req, true); }, kHolders);
  srv.on_sync(
      msg::kDeltaDrained, [delta_drained](const Message& req) { return delta_drained(req, false); },
      kHolders);
  srv.on_sync(
      msg::kDeltas,
      [&st, lim](const Message& req) -> Result<Message> {
        SLUICE_ASSIGN_OR_RETURN(auto r, decode_deltas_request(req, lim));
        return encode(Deltas{st.deltas(r.model)});
      },
      kAnyMember);
}

}  // namespace sluice::weightstore
