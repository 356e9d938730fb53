#include "weightstore/protocol.hpp"

namespace sluice::weightstore {

using core::Result;

Result<std::string> body_string(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string()) {
    return core::invalid_argument(std::string("'") + key + "' must be a string");
  }
  return it->get<std::string>();
}

Result<std::uint64_t> body_u64(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_number_unsigned()) {
    return core::invalid_argument(std::string("'") + key + "' must be a non-negative integer");
  }
  return it->get<std::uint64_t>();
}

nlohmann::json topology_to_json(const Topology& t) {
  return {{"host", t.host}, {"rack", t.rack}, {"datacenter", t.datacenter}};
}

Result<Topology> topology_from_json(const nlohmann::json& j) {
  Topology t;
  if (j.is_null()) return t;
  if (!j.is_object()) return core::invalid_argument("'topology' must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_string())
      return core::invalid_argument("topology." + it.key() + " must be a string");
    if (it.key() == "host")
      t.host = it->get<std::string>();
    else if (it.key() == "rack")
      t.rack = it->get<std::string>();
    else if (it.key() == "datacenter")
      t.datacenter = it->get<std::string>();
    else
      return core::invalid_argument("unknown topology label '" + it.key() + "'");
  }
  return t;
}

core::Message encode_registration(const HolderRegistration& r) {
  core::Message m("store.register");
  m.body["holder_id"] = r.holder_id;
  m.body["endpoint"] = r.endpoint;
  m.body["topology"] = topology_to_json(r.topology);
  m.body["manifest"] = r.manifest.to_json();
  if (!r.chunks.empty()) m.body["chunks"] = r.chunks;
  m.blobs.push_back(r.descriptor);
  return m;
}

Result<HolderRegistration> decode_registration(const core::Message& m) {
  HolderRegistration r;
  SLUICE_ASSIGN_OR_RETURN(r.holder_id, body_string(m.body, "holder_id"));
  SLUICE_ASSIGN_OR_RETURN(r.endpoint, body_string(m.body, "endpoint"));
  SLUICE_ASSIGN_OR_RETURN(r.topology,
                          topology_from_json(m.body.value("topology", nlohmann::json())));
  if (!m.body.contains("manifest")) return core::invalid_argument("'manifest' is missing");
  SLUICE_ASSIGN_OR_RETURN(r.manifest, core::Manifest::from_json(m.body["manifest"]));
  if (auto c = m.body.find("chunks"); c != m.body.end()) {
    if (!c->is_array()) return core::invalid_argument("'chunks' must be an array of booleans");
    for (const auto& b : *c) {
      if (!b.is_boolean()) return core::invalid_argument("'chunks' must be an array of booleans");
      r.chunks.push_back(b.get<bool>());
    }
  }
  if (m.blobs.size() != 1) return core::invalid_argument("expected one descriptor frame");
  r.descriptor = m.blobs[0];
  return r;
}

core::Message encode_holders(const std::vector<HolderState>& holders) {
  core::Message m("store.holders");
  m.body["holders"] = nlohmann::json::array();
  for (const auto& h : holders) {
    m.body["holders"].push_back({{"holder_id", h.holder_id},
                                 {"chunks", h.chunks},
                                 {"complete", h.complete},
                                 {"unpublished", h.unpublished},
                                 {"relay", h.relay}});
  }
  return m;
}

Result<std::vector<HolderState>> decode_holders(const core::Message& m) {
  auto hs = m.body.find("holders");
  if (hs == m.body.end() || !hs->is_array()) {
    return core::protocol_error("holders reply without a 'holders' array");
  }
  std::vector<HolderState> out;
  for (const auto& j : *hs) {
    if (!j.is_object()) return core::protocol_error("a holder in the reply is not an object");
    HolderState h;
    SLUICE_ASSIGN_OR_RETURN(h.holder_id, body_string(j, "holder_id"));
    SLUICE_ASSIGN_OR_RETURN(h.chunks, body_u64(j, "chunks"));
    for (auto [key, field] :
         {std::pair{"complete", &h.complete}, std::pair{"unpublished", &h.unpublished},
          std::pair{"relay", &h.relay}}) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_boolean()) {
        return core::protocol_error(std::string("holder '") + h.holder_id + "': '" + key +
                                    "' must be a boolean");
      }
      *field = it->get<bool>();
    }
    out.push_back(std::move(h));
  }
  return out;
}

core::Message encode_plan(const ReadPlan& p) {
  core::Message m("store.plan");
  m.body["manifest"] = p.manifest.to_json();
  m.body["lease_id"] = p.lease_id;
  m.body["holders"] = nlohmann::json::array();
  for (const auto& h : p.holders) {
    m.body["holders"].push_back(
        {{"holder_id", h.holder_id}, {"endpoint", h.endpoint}, {"distance", h.distance}});
    m.blobs.push_back(h.descriptor);
  }
  m.body["chunks"] = nlohmann::json::array();
  for (const auto& c : p.chunks)
    m.body["chunks"].push_back(c.holders);
  return m;
}

Result<ReadPlan> decode_plan(const core::Message& m) {
  ReadPlan p;
  if (!m.body.contains("manifest")) return core::protocol_error("plan without a manifest");
  SLUICE_ASSIGN_OR_RETURN(p.manifest, core::Manifest::from_json(m.body["manifest"]));
  SLUICE_ASSIGN_OR_RETURN(p.lease_id, body_u64(m.body, "lease_id"));
  const auto& hs = m.body.value("holders", nlohmann::json::array());
  if (!hs.is_array() || hs.size() != m.blobs.size()) {
    return core::protocol_error("plan holders and descriptor frames do not match");
  }
  for (std::size_t i = 0; i < hs.size(); ++i) {
    ReadPlan::Holder h;
    SLUICE_ASSIGN_OR_RETURN(h.holder_id, body_string(hs[i], "holder_id"));
    SLUICE_ASSIGN_OR_RETURN(h.endpoint, body_string(hs[i], "endpoint"));
    h.distance = hs[i].value("distance", 3);
    h.descriptor = m.blobs[i];
    p.holders.push_back(std::move(h));
  }
  const auto& cs = m.body.value("chunks", nlohmann::json::array());
  if (!cs.is_array() || cs.size() != p.manifest.chunk_count()) {
    return core::protocol_error("plan has sources for " + std::to_string(cs.size()) + " of " +
                                std::to_string(p.manifest.chunk_count()) + " chunks");
  }
  for (const auto& c : cs) {
    ChunkSources src;
    if (!c.is_array() || c.empty()) return core::protocol_error("a chunk has no sources");
    for (const auto& i : c) {
      if (!i.is_number_unsigned() || i.get<std::uint64_t>() >= p.holders.size()) {
        return core::protocol_error("a chunk names a holder that is not in the plan");
      }
      src.holders.push_back(i.get<std::uint32_t>());
    }
    p.chunks.push_back(std::move(src));
  }
  return p;
}

}  // namespace sluice::weightstore
