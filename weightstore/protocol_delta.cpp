// The delta messages of the weight store protocol (protocol.hpp lists them). Checked as the
// others are: required fields and types, id lengths, list sizes before their elements.
#include "weightstore/protocol.hpp"
#include "weightstore/protocol_parts.hpp"

namespace sluice::weightstore {

namespace {

json delta_json(const DeltaObject& d) {
  return {{"model", d.model},
          {"base", d.base},
          {"target", d.target},
          {"bytes", d.bytes},
          {"chunk_bytes", d.chunk_bytes},
          {"checksums", d.checksums}};
}

Status delta_from_json(const json& body, std::string_view what, const Limits& lim, DeltaObject& d) {
  auto it = body.find("delta");
  if (it == body.end() || !it->is_object()) return field::error(what, "delta", "must be an object");
  const json& j = *it;
  SLUICE_TRY(field::id(j, what, "model", lim.max_id_bytes, d.model));
  SLUICE_TRY(field::u64(j, what, "base", d.base));
  SLUICE_TRY(field::u64(j, what, "target", d.target));
  SLUICE_TRY(field::u64(j, what, "bytes", d.bytes));
  SLUICE_TRY(field::u64(j, what, "chunk_bytes", d.chunk_bytes));
  if (d.bytes > lim.max_version_bytes) {
    return core::protocol_error(std::string(what) + ": a delta larger than max_version_bytes");
  }
  const json* sums = nullptr;
  SLUICE_TRY(field::array(j, what, "checksums", lim.max_chunks, sums));
  SLUICE_TRY(field::u64_array(j, what, "checksums", d.checksums));
  // A delta that does not hold together is a malformed message, whatever validate() calls it.
  if (Status v = d.validate(); !v.is_ok()) {
    return core::protocol_error(std::string(what) + ": " + v.message());
  }
  return {};
}

Status ref_fields(const json& body, std::string_view what, const Limits& lim, DeltaRef& r) {
  SLUICE_TRY(field::id(body, what, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::id(body, what, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(body, what, "base", r.base));
  return field::u64(body, what, "target", r.target);
}

json ref_json(const DeltaRef& r) {
  return {{"holder_id", r.holder_id}, {"model", r.model}, {"base", r.base}, {"target", r.target}};
}

}  // namespace

Message encode(const DeltaRegistration& r) {
  Message m(msg::kRegisterDelta, {{"holder_id", r.holder_id},
                                  {"endpoint", r.endpoint},
                                  {"topology", topology_to_json(r.topology)},
                                  {"delta", delta_json(r.delta)}});
  m.blobs.push_back(r.descriptor);
  return m;
}
Message encode(const DeltaPlanRequest& r) {
  return Message(msg::kDeltaPlan, {{"model", r.model},
                                   {"base", r.base},
                                   {"target", r.target},
                                   {"topology", topology_to_json(r.topology)}});
}
Message encode(const UnpublishDelta& r) {
  return Message(msg::kUnpublishDelta, ref_json(r));
}
Message encode(const DeltaDrainedQuery& r) {
  return Message(msg::kDeltaDrained, ref_json(r));
}
Message encode(const DeltasRequest& r) {
  return Message(msg::kDeltas, {{"model", r.model}});
}
Message encode(const DeltaPlan& p) {
  Message m(msg::kDeltaPlan, {{"available", p.available},
                              {"expected", p.expected},
                              {"target_bytes", p.target_bytes},
                              {"lease_id", p.lease_id}});
  if (p.available) m.body["delta"] = delta_json(p.delta);
  parts::put_holders(m, p.holders);
  return m;
}
Message encode(const Deltas& d) {
  json l = json::array();
  for (const auto& s : d.deltas) {
    l.push_back({{"holder_id", s.holder_id},
                 {"base", s.base},
                 {"target", s.target},
                 {"bytes", s.bytes},
                 {"unpublished", s.unpublished}});
  }
  return Message(msg::kDeltas, {{"deltas", std::move(l)}});
}

Result<DeltaRegistration> decode_delta_registration(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kRegisterDelta;
  DeltaRegistration r;
  SLUICE_TRY(field::id(m.body, what, "holder_id", lim.max_id_bytes, r.holder_id));
  SLUICE_TRY(field::string(m.body, what, "endpoint", r.endpoint));
  SLUICE_ASSIGN_OR_RETURN(r.topology, parts::topology_field(m.body));
  SLUICE_TRY(delta_from_json(m.body, what, lim, r.delta));
  if (m.blobs.size() != 1) return core::protocol_error(std::string(what) + ": one descriptor");
  r.descriptor = m.blobs[0];
  return r;
}

Result<DeltaPlanRequest> decode_delta_plan_request(const Message& m, const Limits& lim) {
  constexpr std::string_view what = msg::kDeltaPlan;
  DeltaPlanRequest r;
  SLUICE_TRY(field::id(m.body, what, "model", lim.max_id_bytes, r.model));
  SLUICE_TRY(field::u64(m.body, what, "base", r.base));
  SLUICE_TRY(field::u64(m.body, what, "target", r.target));
  SLUICE_ASSIGN_OR_RETURN(r.topology, parts::topology_field(m.body));
  return r;
}

Result<DeltaRef> decode_delta_ref(const Message& m, const Limits& lim) {
  DeltaRef r;
  SLUICE_TRY(ref_fields(m.body, m.type, lim, r));
  return r;
}

Result<DeltasRequest> decode_deltas_request(const Message& m, const Limits& lim) {
  DeltasRequest r;
  SLUICE_TRY(field::id(m.body, msg::kDeltas, "model", lim.max_id_bytes, r.model));
  return r;
}

Result<DeltaPlan> decode_delta_plan(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kDeltaPlan);
  DeltaPlan p;
  SLUICE_TRY(field::boolean(m.body, what, "available", p.available));
  SLUICE_TRY(field::boolean(m.body, what, "expected", p.expected));
  SLUICE_TRY(field::u64(m.body, what, "target_bytes", p.target_bytes));
  SLUICE_TRY(field::u64(m.body, what, "lease_id", p.lease_id));
  if (p.available) SLUICE_TRY(delta_from_json(m.body, what, lim, p.delta));
  SLUICE_TRY(parts::get_holders(m, what, lim, p.holders));
  if (p.available == p.holders.empty()) {
    return core::protocol_error(std::string(what) + ": holders only when available");
  }
  return p;
}

Result<Deltas> decode_deltas(const Message& m, const Limits& lim) {
  const std::string what = reply_name(msg::kDeltas);
  const json* l = nullptr;
  SLUICE_TRY(field::array(m.body, what, "deltas", lim.max_list, l));
  Deltas out;
  for (const auto& j : *l) {
    if (!j.is_object()) return core::protocol_error(std::string(what) + ": an entry");
    DeltaState d;
    SLUICE_TRY(field::id(j, what, "holder_id", lim.max_id_bytes, d.holder_id));
    SLUICE_TRY(field::u64(j, what, "base", d.base));
    SLUICE_TRY(field::u64(j, what, "target", d.target));
    SLUICE_TRY(field::u64(j, what, "bytes", d.bytes));
    SLUICE_TRY(field::boolean(j, what, "unpublished", d.unpublished));
    out.deltas.push_back(std::move(d));
  }
  return out;
}

}  // namespace sluice::weightstore
