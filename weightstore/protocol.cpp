#include "weightstore/protocol.hpp"

#include "format/shard.hpp"
#include "weightstore/protocol_parts.hpp"

namespace sluice::weightstore {

namespace {

Status bool_list(const json& body, std::string_view what, const char* key, const Limits& lim,
                 std::vector<bool>& out) {
  return field::list(body, what, key, lim.max_list, out,
                     [&](const json& b, std::size_t, bool& v) -> Status {
                       if (!b.is_boolean())
                         return field::error(what, key, "must be an array of booleans");
                       v = b.get<bool>();
                       return {};
                     });
}

// A manifest in a message: one that does not parse is a malformed message like any other.
Status manifest_of(const json& j, std::string_view what, core::Manifest& out) {
  auto m = core::Manifest::from_json(j);
  if (!m.is_ok()) return core::protocol_error(std::string(what) + ": " + m.status().message());
  out = std::move(m).value();
  return {};
}

Status manifest_field(const json& body, std::string_view what, const Limits& lim,
                      core::Manifest& out) {
  auto it = body.find("manifest");
  if (it == body.end()) return field::error(what, "manifest", "is missing");
  // The tensor list's size is checked before from_json reads it.
  if (it->is_object()) {
    auto t = it->find("tensors");
    if (t != it->end() && t->is_array() && t->size() > lim.max_tensors) {
      return core::protocol_error(std::string(what) + ": the manifest has more than " +
                                  std::to_string(lim.max_tensors) + " tensors");
    }
  }
  SLUICE_TRY(manifest_of(*it, what, out));
  return check_manifest_limits(out, lim).with_context(std::string(what));
}

json copy_body(const CopyRef& c) {
  return {{"holder_id", c.holder_id}, {"model", c.model}, {"version", c.version}};
}
json version_body(const VersionRef& v) {
  return {{"model", v.model}, {"version", v.version}};
}
json pin_body(const PinRef& p) {
  return {{"model", p.model}, {"version", p.version}, {"owner", p.owner}};
}

}  // namespace

Status check_manifest_limits(const core::Manifest& m, const StoreDecodeLimits& lim) {
  if (m.total_bytes > lim.max_version_bytes) {
    return core::protocol_error("a version of " + std::to_string(m.total_bytes) +
                                " bytes exceeds max_version_bytes " +
                                std::to_string(lim.max_version_bytes));
  }
  if (m.tensors.size() > lim.max_tensors) {
    return core::protocol_error(std::to_string(m.tensors.size()) + " tensors exceed max_tensors " +
                                std::to_string(lim.max_tensors));
  }
  if (m.chunk_count() > lim.max_chunks) {
    return core::protocol_error(std::to_string(m.chunk_count()) + " chunks exceed max_chunks " +
                                std::to_string(lim.max_chunks));
  }
  return {};
}

json topology_to_json(const Topology& t) {
  return {{"host", t.host}, {"rack", t.rack}, {"datacenter", t.datacenter}};
}

Result<Topology> topology_from_json(const json& j) {
  Topology t;
  if (j.is_null()) return t;
  if (!j.is_object()) return core::protocol_error("'topology' must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_string()) return core::protocol_error("topology." + it.key() + " must be a string");
    if (it.key() == "host")
      t.host = it->get<std::string>();
    else if (it.key() == "rack")
      t.rack = it->get<std::string>();
    else if (it.key() == "datacenter")
      t.datacenter = it->get<std::string>();
    else
      return core::protocol_error("unknown topology label '" + it.key() + "'");
  }
  return t;
}

namespace parts {

Result<Topology> topology_field(const json& body) {
  auto it = body.find("topology");
  return topology_from_json(it == body.end() ? json() : *it);
}

void put_holders(Message& m, const std::vector<ReadPlan::Holder>& holders) {
  json& list = m.body["holders"] = json::array();
  for (const auto& h : holders) {
    list.push_back(
        {{"holder_id", h.holder_id}, {"endpoint", h.endpoint}, {"distance", h.distance}});
    m.blobs.push_back(h.descriptor);
  }
}

Status get_holders(const Message& m, std::string_view what, const StoreDecodeLimits& lim,
                   std::vector<ReadPlan::Holder>& out) {
  const json* hs = nullptr;
  SLUICE_TRY(field::array(m.body, what, "holders", lim.max_list, hs));
  if (hs->size() != m.blobs.size()) {
    return core::protocol_error(std::string(what) + ": holders and descriptor frames do not match");
  }
  out.clear();
  for (std::size_t i = 0; i < hs->size(); ++i) {
    const json& hj = (*hs)[i];
    if (!hj.is_object())
      return core::protocol_error(std::string(what) + ": a holder is not an object");
    ReadPlan::Holder h;
    std::uint64_t distance = 3;
    SLUICE_TRY(field::id(hj, what, "holder_id", lim.max_id_bytes, h.holder_id));
    SLUICE_TRY(field::string(hj, what, "endpoint", h.endpoint));
    if (hj.contains("distance")) SLUICE_TRY(field::u64(hj, what, "distance", distance));
    h.distance = static_cast<int>(std::min<std::uint64_t>(distance, 3));
    h.descriptor = m.blobs[i];
    out.push_back(std::move(h));
  }
  return {};
}

}  // namespace parts

// ---- encoding

Message encode(const PutManifest& m) {
  return Message(msg::kPutManifest, {{"manifest", m.manifest.to_json()}});
}

Message encode(const HolderRegistration& r) {
  Message m(msg::kRegister);
  m.body["holder_id"] = r.holder_id;
  m.body["endpoint"] = r.endpoint;
  m.body["topology"] = topology_to_json(r.topology);
  m.body["manifest"] = r.manifest.to_json();
  if (!r.chunks.empty()) m.body["chunks"] = r.chunks;
  if (r.again) m.body["again"] = true;
  m.blobs.push_back(r.descriptor);
  return m;
}

Message encode(const AddChunks& m) {
  return Message(msg::kAddChunks, {{"holder_id", m.holder_id},
                                   {"model", m.model},
                                   {"version", m.version},
                                   {"chunks", m.chunks}});
}

Message encode(const Heartbeat& m) {
  return Message(msg::kHeartbeat, {{"holder_id", m.holder_id}});
}
Message encode(const Unpublish& m) {
  return Message(msg::kUnpublish, copy_body(m));
}
Message encode(const DrainedQuery& m) {
  return Message(msg::kDrained, copy_body(m));
}
Message encode(const LatestRequest& m) {
  if (m.wait_ms == 0) return Message(msg::kLatest, {{"model", m.model}});
  return Message(msg::kLatest, {{"model", m.model}, {"after", m.after}, {"wait_ms", m.wait_ms}});
}
Message encode(const PlanRequest& m) {
  return Message(
      msg::kPlan,
      {{"model", m.model}, {"version", m.version}, {"topology", topology_to_json(m.topology)}});
}
Message encode(const Renew& m) {
  return Message(msg::kRenew, {{"lease_id", m.lease_id}});
}
Message encode(const Release& m) {
  return Message(msg::kRelease, {{"lease_id", m.lease_id}});
}
Message encode(const Pin& m) {
  return Message(msg::kPin, pin_body(m));
}
Message encode(const Unpin& m) {
  return Message(msg::kUnpin, pin_body(m));
}
Message encode(const RetainedRequest& m) {
  return Message(msg::kRetained, {{"model", m.model}});
}
Message encode(const JoinRelay& m) {
  Message r(msg::kJoinRelay,
            {{"relay_id", m.relay_id}, {"topology", topology_to_json(m.topology)}});
  if (m.makes_deltas) r.body["makes_deltas"] = true;
  if (!m.share.empty()) r.body["share"] = m.share;
  return r;
}
Message encode(const ChainSourceRequest& m) {
  Message out(msg::kChainSource, {{"model", m.model},
                                  {"version", m.version},
                                  {"relay_id", m.relay_id},
                                  {"exclude", m.exclude}});
  if (m.wait_ms > 0) {
    if (!m.following.empty()) out.body["following"] = m.following;
    out.body["after_chunks"] = m.after_chunks;
    out.body["wait_ms"] = m.wait_ms;
  }
  return out;
}
Message encode(const CopiesRequest& m) {
  return Message(msg::kCopies, version_body(m));
}
Message encode(const HoldersRequest& m) {
  return Message(msg::kHolders, version_body(m));
}

Message encode_ok() {
  return Message(msg::kOk);
}
Message encode(const Committed& m) {
  return Message(msg::kOk, {{"committed", m.committed}});
}
Message encode(const Drained& m) {
  return Message(msg::kDrained, {{"drained", m.drained}});
}
Message encode(const Latest& m) {
  return Message(msg::kLatest, {{"version", m.version}});
}
Message encode(const Retained& m) {
  return Message(msg::kRetained, {{"versions", m.versions}});
}
Message encode(const ChainSource& m) {
  Message r = Message(msg::kChainSource,
                      {{"holder_id", m.holder_id}, {"endpoint", m.endpoint}, {"chunks", m.chunks}});
  r.body["distance"] = m.distance;
  if (!m.model.empty()) r.body["model"] = m.model;
  if (m.feeds_other_datacenter) r.body["feeds_other_datacenter"] = true;
  r.blobs.push_back(m.descriptor);
  return r;
}
Message encode(const Copies& m) {
  json c = json::object();
  for (const auto& [id, n] : m.chunks)
    c[id] = n;
  return Message(msg::kCopies, {{"copies", std::move(c)}});
}
Message encode(const Holders& m) {
  json hs = json::array();
  for (const auto& h : m.holders) {
    hs.push_back({{"holder_id", h.holder_id},
                  {"chunks", h.chunks},
                  {"complete", h.complete},
                  {"unpublished", h.unpublished},
                  {"relay", h.relay}});
  }
  return Message(msg::kHolders, {{"holders", std::move(hs)}});
}
Message encode(const ReadPlan& p) {
  Message m(msg::kPlan);
  m.body["manifest"] = p.manifest.to_json();
  m.body["lease_id"] = p.lease_id;
  parts::put_holders(m, p.holders);
  m.body["chunks"] = json::array();
  for (const auto& c : p.chunks)
    m.body["chunks"].push_back(c.holders);
  return m;
}

// ---- decoding requests

Result<PutManifest> decode_put_manifest(const Message& m, const Limits& lim) {
  PutManifest r;
  SLUICE_TRY(manifest_field(m.body, msg::kPutManifest, lim, r.manifest));
  return r;
}

Result<HolderRegistration> decode_registration(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kRegister;
  HolderRegistration r;
  SLUICE_TRY(field::id(m.body, what, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::string(m.body, what, "endpoint", r.endpoint));
  SLUICE_ASSIGN_OR_RETURN(r.topology, parts::topology_field(m.body));
  SLUICE_TRY(manifest_field(m.body, what, lim, r.manifest));
  if (m.body.contains("chunks")) SLUICE_TRY(bool_list(m.body, what, "chunks", lim, r.chunks));
  if (m.body.contains("again")) SLUICE_TRY(field::boolean(m.body, what, "again", r.again));
  if (m.blobs.size() != 1)
    return core::protocol_error(std::string(what) + ": expected one descriptor");
  r.descriptor = m.blobs[0];
  return r;
}

Result<AddChunks> decode_add_chunks(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kAddChunks;
  AddChunks r;
  SLUICE_TRY(field::id(m.body, what, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::id(m.body, what, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, what, "version", r.version));
  SLUICE_TRY(field::list(m.body, what, "chunks", lim.max_list, r.chunks,
                         [&](const json& i, std::size_t, std::uint32_t& c) -> Status {
                           if (!i.is_number_unsigned() || i.get<std::uint64_t>() > UINT32_MAX)
                             return field::error(what, "chunks", "must hold chunk indices");
                           c = static_cast<std::uint32_t>(i.get<std::uint64_t>());
                           return {};
                         }));
  return r;
}

Result<Heartbeat> decode_heartbeat(const Message& m, const Limits& lim) {
  Heartbeat r;
  SLUICE_TRY(field::id(m.body, msg::kHeartbeat, "holder_id", lim.max_id_bytes, r.holder_id));
  return r;
}

Result<CopyRef> decode_copy_ref(const Message& m, const Limits& lim) {
  CopyRef r;
  SLUICE_TRY(field::id(m.body, m.type, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::id(m.body, m.type, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, m.type, "version", r.version));
  return r;
}

Result<LatestRequest> decode_latest_request(const Message& m, const Limits& lim) {
  LatestRequest r;
  SLUICE_TRY(field::id(m.body, msg::kLatest, "model", lim.max_id_bytes, r.model));
  if (m.body.contains("after")) SLUICE_TRY(field::u64(m.body, msg::kLatest, "after", r.after));
  if (m.body.contains("wait_ms"))
    SLUICE_TRY(field::u64(m.body, msg::kLatest, "wait_ms", r.wait_ms));
  return r;
}

Result<PlanRequest> decode_plan_request(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kPlan;
  PlanRequest r;
  SLUICE_TRY(field::id(m.body, what, "model", lim.max_id_bytes, r.model));
  if (m.body.contains("version")) SLUICE_TRY(field::u64(m.body, what, "version", r.version));
  SLUICE_ASSIGN_OR_RETURN(r.topology, parts::topology_field(m.body));
  return r;
}

Result<LeaseRef> decode_lease_ref(const Message& m) {
  LeaseRef r;
  SLUICE_TRY(field::u64(m.body, m.type, "lease_id", r.lease_id));
  return r;
}

Result<PinRef> decode_pin_ref(const Message& m, const Limits& lim) {
  PinRef r;
  SLUICE_TRY(field::id(m.body, m.type, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, m.type, "version", r.version));
  SLUICE_TRY(field::id(m.body, m.type, "owner", lim.max_id_bytes, r.owner));
  return r;
}

Result<RetainedRequest> decode_retained_request(const Message& m, const Limits& lim) {
  RetainedRequest r;
  SLUICE_TRY(field::id(m.body, msg::kRetained, "model", lim.max_id_bytes, r.model));
  return r;
}

Result<JoinRelay> decode_join_relay(const Message& m, const Limits& lim) {
  JoinRelay r;
  SLUICE_TRY(field::id(m.body, msg::kJoinRelay, "relay_id", lim.max_id_bytes, r.relay_id));
  SLUICE_ASSIGN_OR_RETURN(r.topology, parts::topology_field(m.body));
  if (m.body.contains("makes_deltas"))
    SLUICE_TRY(field::boolean(m.body, msg::kJoinRelay, "makes_deltas", r.makes_deltas));
  if (m.body.contains("share"))
    SLUICE_TRY(field::id(m.body, msg::kJoinRelay, "share", lim.max_id_bytes, r.share));
  return r;
}

Result<ChainSourceRequest> decode_chain_source_request(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kChainSource;
  ChainSourceRequest r;
  SLUICE_TRY(field::id(m.body, what, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, what, "version", r.version));
  SLUICE_TRY(field::id(m.body, what, "relay_id", lim.max_id_bytes, r.relay_id));
  if (m.body.contains("exclude")) {
    const json* l = nullptr;
    SLUICE_TRY(field::array(m.body, what, "exclude", lim.max_list, l));
    for (const auto& x : *l) {
      if (!x.is_string() || x.get_ref<const std::string&>().size() > lim.max_id_bytes) {
        return field::error(what, "exclude", "must hold holder ids");
      }
      r.exclude.insert(x.get<std::string>());
    }
  }
  if (m.body.contains("following"))
    SLUICE_TRY(field::id(m.body, what, "following", lim.max_id_bytes, r.following));
  if (m.body.contains("after_chunks"))
    SLUICE_TRY(field::u64(m.body, what, "after_chunks", r.after_chunks));
  if (m.body.contains("wait_ms")) SLUICE_TRY(field::u64(m.body, what, "wait_ms", r.wait_ms));
  return r;
}

Result<VersionRef> decode_version_ref(const Message& m, const Limits& lim) {
  VersionRef r;
  SLUICE_TRY(field::id(m.body, m.type, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, m.type, "version", r.version));
  return r;
}

// ---- decoding replies (malformed, a protocol error like a malformed request)

Result<Committed> decode_committed(const Message& m) {
  Committed r;
  SLUICE_TRY(field::boolean(m.body, "store reply", "committed", r.committed));
  return r;
}

Result<Drained> decode_drained(const Message& m) {
  Drained r;
  SLUICE_TRY(field::boolean(m.body, reply_name(msg::kDrained), "drained", r.drained));
  return r;
}

Result<Latest> decode_latest(const Message& m) {
  Latest r;
  SLUICE_TRY(field::u64(m.body, reply_name(msg::kLatest), "version", r.version));
  return r;
}

Result<Retained> decode_retained(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kRetained);
  Retained r;
  SLUICE_TRY(field::list(m.body, what, "versions", lim.max_list, r.versions,
                         [&](const json& v, std::size_t, std::uint64_t& version) -> Status {
                           if (!v.is_number_unsigned())
                             return field::error(what, "versions", "must hold versions");
                           version = v.get<std::uint64_t>();
                           return {};
                         }));
  return r;
}

Result<ChainSource> decode_chain_source(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kChainSource);
  ChainSource r;
  SLUICE_TRY(field::id(m.body, what, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::string(m.body, what, "endpoint", r.endpoint));
  SLUICE_TRY(bool_list(m.body, what, "chunks", lim, r.chunks));
  std::uint64_t distance = 3;
  if (m.body.contains("distance")) SLUICE_TRY(field::u64(m.body, what, "distance", distance));
  if (m.body.contains("model"))
    SLUICE_TRY(field::id(m.body, what, "model", lim.max_id_bytes, r.model));
  if (m.body.contains("feeds_other_datacenter"))
    SLUICE_TRY(field::boolean(m.body, what, "feeds_other_datacenter", r.feeds_other_datacenter));
  r.distance = static_cast<int>(std::min<std::uint64_t>(distance, 3));
  if (m.blobs.size() != 1) return core::protocol_error(std::string(what) + ": no descriptor");
  r.descriptor = m.blobs[0];
  return r;
}

Result<Copies> decode_copies(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kCopies);
  auto it = m.body.find("copies");
  if (it == m.body.end() || !it->is_object() || it->size() > lim.max_list) {
    return field::error(what, "copies", "must be an object");
  }
  Copies r;
  for (auto c = it->begin(); c != it->end(); ++c) {
    if (!c->is_number_unsigned()) {
      return core::protocol_error(std::string(what) + ": a count is not a non-negative integer");
    }
    r.chunks[c.key()] = c->get<std::uint64_t>();
  }
  return r;
}

Result<Holders> decode_holders(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kHolders);
  const json* hs = nullptr;
  SLUICE_TRY(field::array(m.body, what, "holders", lim.max_list, hs));
  Holders out;
  for (const auto& j : *hs) {
    if (!j.is_object())
      return core::protocol_error(std::string(what) + ": a holder is not an object");
    HolderState h;
    std::uint64_t chunks = 0;
    SLUICE_TRY(field::id(j, what, "holder_id", lim.max_id_bytes, h.holder_id));
    SLUICE_TRY(field::u64(j, what, "chunks", chunks));
    SLUICE_TRY(field::boolean(j, what, "complete", h.complete));
    SLUICE_TRY(field::boolean(j, what, "unpublished", h.unpublished));
    SLUICE_TRY(field::boolean(j, what, "relay", h.relay));
    h.chunks = static_cast<std::size_t>(chunks);
    out.holders.push_back(std::move(h));
  }
  return out;
}

Result<ReadPlan> decode_plan(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kPlan);
  ReadPlan p;
  if (!m.body.contains("manifest")) return core::protocol_error("plan without a manifest");
  SLUICE_TRY(manifest_of(m.body["manifest"], what, p.manifest));
  SLUICE_TRY(field::u64(m.body, what, "lease_id", p.lease_id));
  SLUICE_TRY(parts::get_holders(m, what, lim, p.holders));
  const json* cs = nullptr;
  SLUICE_TRY(field::array(m.body, what, "chunks", lim.max_list, cs));
  if (cs->size() != p.manifest.chunk_count()) {
    return core::protocol_error("plan has sources for " + std::to_string(cs->size()) + " of " +
                                std::to_string(p.manifest.chunk_count()) + " chunks");
  }
  // A host share's plan is given while it arrives: its chunks not held yet have no sources.
  const bool share = core::is_share_model(p.manifest.model);
  for (const auto& c : *cs) {
    ChunkSources src;
    if (!c.is_array() || (c.empty() && !share) || c.size() > p.holders.size())
      return core::protocol_error("a chunk has no sources");
    for (const auto& i : c) {
      if (!i.is_number_unsigned() || i.get<std::uint64_t>() >= p.holders.size()) {
        return core::protocol_error("a chunk names a holder that is not in the plan");
      }
      src.holders.push_back(static_cast<std::uint32_t>(i.get<std::uint64_t>()));
    }
    p.chunks.push_back(std::move(src));
  }
  return p;
}

}  // namespace sluice::weightstore
