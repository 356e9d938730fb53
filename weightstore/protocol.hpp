// The weight store's control messages, as JSON bodies on the core messaging layer. Shared by
// the service and its client so that both sides encode and decode the same way.
//
// Message types (requests, each answered with a reply or an error reply):
//   store.put_manifest  {manifest}
//   store.register      {holder_id, endpoint, topology, manifest, chunks?} + blob: descriptor
//   store.add_chunks    {holder_id, model, version, chunks: [i...]}
//   store.heartbeat     {holder_id}
//   store.unpublish     {holder_id, model, version}         -> {drained}
//   store.drained       {holder_id, model, version}         -> {drained}
//   store.latest        {model}                             -> {version}
//   store.plan          {model, version (0: latest), topology}
//                       -> {manifest, lease_id, holders: [{holder_id, endpoint, distance}],
//                           chunks: [[holder index...]...]} + one blob per holder: descriptor
//   store.renew / store.release  {lease_id}
//   store.pin / store.unpin      {model, version, owner}
//   store.retained      {model}                             -> {versions: [...]}
//   store.holders       {model, version}
//                       -> {holders: [{holder_id, chunks, complete, unpublished, relay}]}
//                          (no lease: a publisher asks it to learn a relay holds its version)
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "core/messaging.hpp"
#include "weightstore/store.hpp"

namespace sluice::weightstore {

nlohmann::json topology_to_json(const Topology& t);
core::Result<Topology> topology_from_json(const nlohmann::json& j);

core::Message encode_registration(const HolderRegistration& r);
core::Result<HolderRegistration> decode_registration(const core::Message& m);

// The reply to store.holders, and its checked reading.
core::Message encode_holders(const std::vector<HolderState>& holders);
core::Result<std::vector<HolderState>> decode_holders(const core::Message& m);

core::Message encode_plan(const ReadPlan& p);
core::Result<ReadPlan> decode_plan(const core::Message& m);

// Reads a required field of a request body with a clear error naming it.
core::Result<std::string> body_string(const nlohmann::json& body, const char* key);
core::Result<std::uint64_t> body_u64(const nlohmann::json& body, const char* key);

}  // namespace sluice::weightstore
