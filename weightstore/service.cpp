#include "weightstore/service.hpp"

#include "core/log.hpp"
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
  if (sources_per_chunk == 0) return core::invalid_argument("sources_per_chunk must be positive");
  if (broadcast != "chain" && broadcast != "tree" && broadcast != "direct") {
    return core::invalid_argument("broadcast must be chain, tree or direct, not '" + broadcast +
                                  "'");
  }
  if (fanout == 0) return core::invalid_argument("fanout must be positive");
  return {};
}

namespace {
StoreConfig store_config(const ServiceConfig& c) {
  StoreConfig s;
  s.keep_versions = c.keep_versions;
  s.holder_ttl = Millis(c.holder_ttl_ms);
  s.lease_ttl = Millis(c.lease_ttl_ms);
  s.sources_per_chunk = c.sources_per_chunk;
  s.broadcast = c.broadcast;
  s.fanout = c.fanout;
  return s;
}
Message ok_reply(const char* type) {
  return Message(type);
}
}  // namespace

StoreService::StoreService(core::EventLoop& loop, const ServiceConfig& config)
    : loop_(loop), config_(config), store_(store_config(config)) {}

StoreService::~StoreService() {
  expiry_.reset();
  server_.reset();
}

Result<std::unique_ptr<StoreService>> StoreService::create(core::EventLoop& loop,
                                                           const ServiceConfig& config) {
  SLUICE_TRY(config.validate());
  std::unique_ptr<StoreService> s(new StoreService(loop, config));
  SLUICE_ASSIGN_OR_RETURN(s->server_, core::Server::create(loop, config.listen));
  s->install_handlers();
  StoreService* raw = s.get();
  s->expiry_ = loop.every(Millis(config.expire_interval_ms), [raw] {
    for (const auto& id : raw->store_.expire(Clock::now())) {
      log::warn("weightstore: holder {} expired (no heartbeat for {} ms)", id,
                raw->config_.holder_ttl_ms);
    }
  });
  log::info("weightstore: listening on {}", s->endpoint());
  return s;
}

const std::string& StoreService::endpoint() const {
  return server_->endpoint();
}

void StoreService::install_handlers() {
  auto& srv = *server_;
  WeightStore& st = store_;

  srv.on_sync("store.put_manifest", [&st](const Message& req) -> Result<Message> {
    if (!req.body.contains("manifest")) return core::invalid_argument("'manifest' is missing");
    SLUICE_ASSIGN_OR_RETURN(auto m, core::Manifest::from_json(req.body["manifest"]));
    SLUICE_TRY(st.put_manifest(m));
    log::info("weightstore: manifest {}@{} ({} bytes, {} chunks)", m.model, m.version,
              m.total_bytes, m.chunk_count());
    return ok_reply("store.ok");
  });
  srv.on_sync("store.register", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto r, decode_registration(req));
    bool was = st.committed(r.manifest.model, r.manifest.version);
    SLUICE_TRY(st.register_holder(r, Clock::now()));
    if (!was && st.committed(r.manifest.model, r.manifest.version)) {
      log::info("weightstore: {}@{} committed (holder {})", r.manifest.model, r.manifest.version,
                r.holder_id);
    }
    Message reply("store.ok");
    reply.body["committed"] = st.committed(r.manifest.model, r.manifest.version);
    return reply;
  });
  srv.on_sync("store.add_chunks", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto holder, body_string(req.body, "holder_id"));
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    std::vector<std::uint32_t> chunks;
    const auto& c = req.body.value("chunks", nlohmann::json::array());
    if (!c.is_array()) return core::invalid_argument("'chunks' must be an array");
    for (const auto& i : c) {
      if (!i.is_number_unsigned()) return core::invalid_argument("'chunks' must hold indices");
      chunks.push_back(i.get<std::uint32_t>());
    }
    SLUICE_TRY(st.add_chunks(holder, model, version, chunks, Clock::now()));
    Message reply("store.ok");
    reply.body["committed"] = st.committed(model, version);
    return reply;
  });
  srv.on_sync("store.heartbeat", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto holder, body_string(req.body, "holder_id"));
    SLUICE_TRY(st.heartbeat(holder, Clock::now()));
    return ok_reply("store.ok");
  });
  auto drained_reply = [&st](const Message& req, bool unpublish) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto holder, body_string(req.body, "holder_id"));
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    if (unpublish) SLUICE_TRY(st.unpublish(holder, model, version));
    SLUICE_ASSIGN_OR_RETURN(bool drained, st.drained(holder, model, version));
    Message reply("store.drained");
    reply.body["drained"] = drained;
    return reply;
  };
  srv.on_sync("store.unpublish",
              [drained_reply](const Message& req) { return drained_reply(req, true); });
  srv.on_sync("store.drained",
              [drained_reply](const Message& req) { return drained_reply(req, false); });
  srv.on_sync("store.latest", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto v, st.latest(model));
    Message reply("store.latest");
    reply.body["version"] = v;
    return reply;
  });
  srv.on_sync("store.plan", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    std::uint64_t version = req.body.value("version", std::uint64_t{0});
    SLUICE_ASSIGN_OR_RETURN(auto where,
                            topology_from_json(req.body.value("topology", nlohmann::json())));
    SLUICE_ASSIGN_OR_RETURN(auto plan, st.plan(model, version, where, Clock::now()));
    return encode_plan(plan);
  });
  srv.on_sync("store.renew", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto lease, body_u64(req.body, "lease_id"));
    SLUICE_TRY(st.renew(lease, Clock::now()));
    return ok_reply("store.ok");
  });
  srv.on_sync("store.release", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto lease, body_u64(req.body, "lease_id"));
    SLUICE_TRY(st.release(lease));
    return ok_reply("store.ok");
  });
  srv.on_sync("store.pin", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    SLUICE_ASSIGN_OR_RETURN(auto owner, body_string(req.body, "owner"));
    SLUICE_TRY(st.pin(model, version, owner));
    return ok_reply("store.ok");
  });
  srv.on_sync("store.unpin", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    SLUICE_ASSIGN_OR_RETURN(auto owner, body_string(req.body, "owner"));
    st.unpin(model, version, owner);
    return ok_reply("store.ok");
  });
  srv.on_sync("store.join_relay", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto relay, body_string(req.body, "relay_id"));
    SLUICE_ASSIGN_OR_RETURN(auto where,
                            topology_from_json(req.body.value("topology", nlohmann::json())));
    SLUICE_TRY(st.join_relay(relay, where, Clock::now()));
    return ok_reply("store.ok");
  });
  srv.on_sync("store.chain_source", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    SLUICE_ASSIGN_OR_RETURN(auto relay, body_string(req.body, "relay_id"));
    std::set<std::string> exclude;
    for (const auto& x : req.body.value("exclude", nlohmann::json::array())) {
      if (x.is_string()) exclude.insert(x.get<std::string>());
    }
    SLUICE_ASSIGN_OR_RETURN(auto src, st.chain_source(model, version, relay, exclude));
    Message reply("store.chain_source");
    reply.body["holder_id"] = src.holder_id;
    reply.body["endpoint"] = src.endpoint;
    reply.body["chunks"] = src.chunks;
    reply.blobs.push_back(src.descriptor);
    return reply;
  });
  srv.on_sync("store.copies", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    Message reply("store.copies");
    reply.body["copies"] = nlohmann::json::object();
    for (const auto& [id, n] : st.copies(model, version))
      reply.body["copies"][id] = n;
    return reply;
  });
  srv.on_sync("store.holders", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    SLUICE_ASSIGN_OR_RETURN(auto version, body_u64(req.body, "version"));
    return encode_holders(st.holders(model, version));
  });
  srv.on_sync("store.retained", [&st](const Message& req) -> Result<Message> {
    SLUICE_ASSIGN_OR_RETURN(auto model, body_string(req.body, "model"));
    Message reply("store.retained");
    reply.body["versions"] = st.retained(model);
    return reply;
  });
}

}  // namespace sluice::weightstore
