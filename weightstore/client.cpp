#include "weightstore/client.hpp"

#include "core/log.hpp"

#include "weightstore/protocol.hpp"

namespace sluice::weightstore {

using core::Message;
using core::Result;
using core::Status;

Result<std::unique_ptr<StoreClient>> StoreClient::create(core::EventLoop& loop,
                                                         const std::string& endpoint,
                                                         Millis timeout) {
  auto c = std::unique_ptr<StoreClient>(new StoreClient());
  SLUICE_ASSIGN_OR_RETURN(c->client_, core::Client::create(loop, endpoint));
  c->timeout_ = timeout;
  return c;
}

Status StoreClient::put_manifest(const core::Manifest& m) {
  Message req("store.put_manifest");
  req.body["manifest"] = m.to_json();
  return client_->call(req, timeout_).status();
}

Result<bool> StoreClient::register_holder(const HolderRegistration& r) {
  SLUICE_ASSIGN_OR_RETURN(Message reply, client_->call(encode_registration(r), timeout_));
  return reply.body.value("committed", false);
}

Status StoreClient::heartbeat(const std::string& holder_id) {
  Message req("store.heartbeat");
  req.body["holder_id"] = holder_id;
  return client_->call(req, timeout_).status();
}

Result<std::uint64_t> StoreClient::latest(const std::string& model) {
  Message req("store.latest");
  req.body["model"] = model;
  SLUICE_ASSIGN_OR_RETURN(Message reply, client_->call(req, timeout_));
  return body_u64(reply.body, "version");
}

Result<ReadPlan> StoreClient::plan(const std::string& model, std::uint64_t version,
                                   const Topology& where) {
  Message req("store.plan");
  req.body["model"] = model;
  req.body["version"] = version;
  req.body["topology"] = topology_to_json(where);
  SLUICE_ASSIGN_OR_RETURN(Message reply, client_->call(req, timeout_));
  return decode_plan(reply);
}

Status StoreClient::release(std::uint64_t lease_id) {
  Message req("store.release");
  req.body["lease_id"] = lease_id;
  return client_->call(req, timeout_).status();
}

namespace {
// store.unpublish and store.drained share their request and their reply.
Result<bool> drain_request(core::Client& c, const char* type, const std::string& holder_id,
                           const std::string& model, std::uint64_t version, Millis timeout) {
  Message req(type);
  req.body = {{"holder_id", holder_id}, {"model", model}, {"version", version}};
  SLUICE_ASSIGN_OR_RETURN(Message reply, c.call(req, timeout));
  return reply.body.value("drained", false);
}
}  // namespace

Result<bool> StoreClient::unpublish(const std::string& holder_id, const std::string& model,
                                    std::uint64_t version, Millis timeout) {
  return drain_request(*client_, "store.unpublish", holder_id, model, version,
                       timeout > Millis(0) ? timeout : timeout_);
}

Result<bool> StoreClient::drained(const std::string& holder_id, const std::string& model,
                                  std::uint64_t version, Millis timeout) {
  return drain_request(*client_, "store.drained", holder_id, model, version,
                       timeout > Millis(0) ? timeout : timeout_);
}

Result<std::vector<HolderState>> StoreClient::holders(const std::string& model,
                                                      std::uint64_t version) {
  Message req("store.holders");
  req.body = {{"model", model}, {"version", version}};
  SLUICE_ASSIGN_OR_RETURN(Message reply, client_->call(req, timeout_));
  return decode_holders(reply);
}

Result<Pulled> pull(core::TransferEngine& engine, StoreClient& store, const std::string& model,
                    std::uint64_t version, const Topology& where, core::ReadOptions options) {
  SLUICE_ASSIGN_OR_RETURN(ReadPlan plan, store.plan(model, version, where));
  std::vector<core::ReadSource> sources;
  for (const auto& h : plan.holders) {
    auto d = core::RegionDescriptor::decode(h.descriptor);
    if (!d.is_ok()) {
      store.release(plan.lease_id).ignore();
      return d.status().with_context("holder " + h.holder_id);
    }
    sources.push_back({h.holder_id, std::move(d).value()});
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
                std::function<bool(ReadPlan&)> accept) {
  Message req("store.plan");
  req.body["model"] = model;
  req.body["version"] = version;
  req.body["topology"] = topology_to_json(where);
  StoreClient* sc = &store;
  core::TransferEngine* eng = &engine;
  auto release = [sc](std::uint64_t lease) {
    Message r("store.release");
    r.body["lease_id"] = lease;
    // Fire and forget: a lease that is not released expires on the store.
    sc->raw().request(std::move(r), Millis(5000), [](Result<Message>) {});
  };
  core::log::debug("pull {}@{}: asking for a read plan", model, version);
  store.raw().request(
      std::move(req), Millis(5000),
      [eng, model, options, done, release, accept](Result<Message> reply) mutable {
        core::log::debug("pull {}: read plan: {}", model, reply.status().to_string());
        if (!reply.is_ok()) return done(reply.status().with_context("pull " + model));
        auto plan_r = decode_plan(*reply);
        if (!plan_r.is_ok()) return done(plan_r.status().with_context("pull " + model));
        auto plan = std::make_shared<ReadPlan>(std::move(plan_r).value());
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
          sources.push_back({h.holder_id, std::move(d).value()});
        }
        auto chunks = core::whole_region_chunks(plan->manifest.layout());
        for (std::size_t i = 0; i < chunks.size(); ++i)
          chunks[i].sources = plan->chunks[i].holders;
        auto buf = eng->allocate(plan->manifest.total_bytes, false);
        if (!buf.is_ok()) {
          release(plan->lease_id);
          return done(buf.status());
        }
        auto out = std::make_shared<Pulled>();
        out->buffer = std::move(buf).value();
        core::RegisteredBuffer& dst = *out->buffer;
        eng->read(std::move(sources), std::move(chunks), dst, options,
                  [plan, out, done, release, model](Result<core::ReadStats> stats) {
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

}  // namespace sluice::weightstore
