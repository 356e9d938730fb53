// The weight store's control messages, as typed structs over JSON bodies on the core messaging
// layer. Encoded and decoded here only: the service, its client (StoreClient) and every holder
// share these, and no other file builds a store message by hand.
//
//   store.put_manifest  PutManifest                 -> ok
//   store.register      HolderRegistration + blob   -> Committed
//   store.add_chunks    AddChunks                   -> Committed
//   store.heartbeat     Heartbeat                   -> ok (not_found: register again)
//   store.unpublish     Unpublish                   -> Drained
//   store.drained       DrainedQuery                -> Drained (not_found: unknown, never drained)
//   store.latest        LatestRequest               -> Latest
//   store.plan          PlanRequest                 -> ReadPlan (+ one descriptor blob per holder)
//   store.renew         Renew                       -> ok
//   store.release       Release                     -> ok
//   store.pin / unpin   Pin / Unpin                 -> ok
//   store.retained      RetainedRequest             -> Retained
//   store.join_relay    JoinRelay                   -> ok
//   store.chain_source  ChainSourceRequest          -> ChainSource (+ its descriptor blob)
//   store.copies        CopiesRequest               -> Copies
//   store.holders       HoldersRequest              -> Holders (no lease: a publisher asks it to
//                                                      learn that a relay holds its version)
//   store.register_delta DeltaRegistration + blob   -> ok
//   store.delta_plan    DeltaPlanRequest            -> DeltaPlan (+ one descriptor blob per holder)
//   store.unpublish_delta / store.delta_drained
//                       DeltaRef                    -> Drained (not_found: unknown)
//   store.deltas        DeltasRequest               -> Deltas
// (the delta messages are encoded and decoded in protocol_delta.cpp)
//
// Decoding checks everything before anything is used: required fields and their types, id
// lengths, list sizes (before their elements are read), chunk indices within 32 bits. A message
// that fails, request or reply, is a protocol error naming the field (core::json_field), and
// changes nothing.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "weightstore/protocol_limits.hpp"
#include "weightstore/store.hpp"
#include "wire/messaging.hpp"

namespace sluice::weightstore {

// The store's message types, each declared here once (the table above). A reply carries its
// request's type, or kOk.
namespace msg {
inline constexpr char kPutManifest[] = "store.put_manifest";
inline constexpr char kRegister[] = "store.register";
inline constexpr char kAddChunks[] = "store.add_chunks";
inline constexpr char kHeartbeat[] = "store.heartbeat";
inline constexpr char kUnpublish[] = "store.unpublish";
inline constexpr char kDrained[] = "store.drained";
inline constexpr char kLatest[] = "store.latest";
inline constexpr char kPlan[] = "store.plan";
inline constexpr char kRenew[] = "store.renew";
inline constexpr char kRelease[] = "store.release";
inline constexpr char kPin[] = "store.pin";
inline constexpr char kUnpin[] = "store.unpin";
inline constexpr char kRetained[] = "store.retained";
inline constexpr char kJoinRelay[] = "store.join_relay";
inline constexpr char kChainSource[] = "store.chain_source";
inline constexpr char kCopies[] = "store.copies";
inline constexpr char kHolders[] = "store.holders";
inline constexpr char kRegisterDelta[] = "store.register_delta";
inline constexpr char kDeltaPlan[] = "store.delta_plan";
inline constexpr char kUnpublishDelta[] = "store.unpublish_delta";
inline constexpr char kDeltaDrained[] = "store.delta_drained";
inline constexpr char kDeltas[] = "store.deltas";
inline constexpr char kOk[] = "store.ok";
}  // namespace msg

// Whether `m` is within the limits; a protocol error naming the bound it passes.
core::Status check_manifest_limits(const core::Manifest& m, const StoreDecodeLimits& lim);

// Requests.
struct PutManifest {
  core::Manifest manifest;
};
struct AddChunks {
  std::string holder_id;
  std::string model;
  std::uint64_t version = 0;
  std::vector<std::uint32_t> chunks;
};
struct Heartbeat {
  std::string holder_id;
};
// One holder's copy of one version: what unpublish and drained? name.
struct CopyRef {
  std::string holder_id;
  std::string model;
  std::uint64_t version = 0;
};
struct Unpublish : CopyRef {};
struct DrainedQuery : CopyRef {};
// The longest a long poll waits at the store (a longer wait_ms is cut to this).
inline constexpr std::uint64_t kMaxLongPollMs = 30000;

// A long poll when wait_ms > 0: the store answers once a version above `after` commits, or when
// the wait ends (service.cpp).
struct LatestRequest {
  std::string model;
  std::uint64_t after = 0;
  std::uint64_t wait_ms = 0;
};
struct PlanRequest {
  std::string model;
  std::uint64_t version = 0;  // 0: the latest committed
  Topology topology;
};
struct LeaseRef {
  std::uint64_t lease_id = 0;
};
struct Renew : LeaseRef {};
struct Release : LeaseRef {};
struct PinRef {
  std::string model;
  std::uint64_t version = 0;
  std::string owner;
};
struct Pin : PinRef {};
struct Unpin : PinRef {};
struct RetainedRequest {
  std::string model;
};
struct JoinRelay {
  std::string relay_id;
  Topology topology;
  bool makes_deltas = false;  // it offers the delta of each version it completes (optional field)
  std::string share = {};     // a host-share relay's share ("tp4.1"); empty: whole versions
};
// A long poll when wait_ms > 0: the store answers once it names another source than
// `following`, or one holding more than `after_chunks` chunks, or when the wait ends.
struct ChainSourceRequest {
  std::string model;
  std::uint64_t version = 0;
  std::string relay_id;
  std::set<std::string> exclude = {};  // holders that just failed this relay
  std::string following = {};          // the source the relay reads from now
  std::uint64_t after_chunks = 0;      // how many chunks it held when last named
  std::uint64_t wait_ms = 0;
};
struct VersionRef {
  std::string model;
  std::uint64_t version = 0;
};
struct CopiesRequest : VersionRef {};
struct HoldersRequest : VersionRef {};

struct DeltaPlanRequest {
  std::string model;
  std::uint64_t base = 0;
  std::uint64_t target = 0;
  Topology topology;
};
struct DeltaRef {
  std::string holder_id;
  std::string model;
  std::uint64_t base = 0;
  std::uint64_t target = 0;
};
struct UnpublishDelta : DeltaRef {};
struct DeltaDrainedQuery : DeltaRef {};
struct DeltasRequest {
  std::string model;
};

// Replies.
struct Deltas {
  std::vector<DeltaState> deltas;
};
struct Committed {
  bool committed = false;  // the version is committed after this request
};
struct Drained {
  bool drained = false;  // the copy may be freed
};
struct Latest {
  std::uint64_t version = 0;
};
struct Retained {
  std::vector<std::uint64_t> versions;
};
using ChainSource = WeightStore::CopyInfo;  // its descriptor travels as the one blob
struct Copies {
  std::map<std::string, std::uint64_t> chunks;  // holder id -> verified chunks
};
struct Holders {
  std::vector<HolderState> holders;
};

nlohmann::json topology_to_json(const Topology& t);
core::Result<Topology> topology_from_json(const nlohmann::json& j);

core::Message encode(const PutManifest& m);
core::Message encode(const HolderRegistration& m);
core::Message encode(const AddChunks& m);
core::Message encode(const Heartbeat& m);
core::Message encode(const Unpublish& m);
core::Message encode(const DrainedQuery& m);
core::Message encode(const LatestRequest& m);
core::Message encode(const PlanRequest& m);
core::Message encode(const Renew& m);
core::Message encode(const Release& m);
core::Message encode(const Pin& m);
core::Message encode(const Unpin& m);
core::Message encode(const RetainedRequest& m);
core::Message encode(const JoinRelay& m);
core::Message encode(const ChainSourceRequest& m);
core::Message encode(const CopiesRequest& m);
core::Message encode(const HoldersRequest& m);
// The empty reply to a request that only succeeds or fails.
core::Message encode_ok();
core::Message encode(const Committed& m);
core::Message encode(const Drained& m);
core::Message encode(const Latest& m);
core::Message encode(const Retained& m);
core::Message encode(const ChainSource& m);
core::Message encode(const Copies& m);
core::Message encode(const Holders& m);
core::Message encode(const ReadPlan& m);

// Requests, as the service reads them (the envelope's type picks the decoder).
using Limits = StoreDecodeLimits;
core::Result<PutManifest> decode_put_manifest(const core::Message& m, const Limits& lim = {});
core::Result<HolderRegistration> decode_registration(const core::Message& m,
                                                     const Limits& lim = {});
core::Result<AddChunks> decode_add_chunks(const core::Message& m, const Limits& lim = {});
core::Result<Heartbeat> decode_heartbeat(const core::Message& m, const Limits& lim = {});
core::Result<CopyRef> decode_copy_ref(const core::Message& m, const Limits& lim = {});
core::Result<LatestRequest> decode_latest_request(const core::Message& m, const Limits& lim = {});
core::Result<PlanRequest> decode_plan_request(const core::Message& m, const Limits& lim = {});
core::Result<LeaseRef> decode_lease_ref(const core::Message& m);
core::Result<PinRef> decode_pin_ref(const core::Message& m, const Limits& lim = {});
core::Result<RetainedRequest> decode_retained_request(const core::Message& m,
                                                      const Limits& lim = {});
core::Result<JoinRelay> decode_join_relay(const core::Message& m, const Limits& lim = {});
core::Result<ChainSourceRequest> decode_chain_source_request(const core::Message& m,
                                                             const Limits& lim = {});
core::Result<VersionRef> decode_version_ref(const core::Message& m, const Limits& lim = {});

core::Message encode(const DeltaRegistration& m);
core::Message encode(const DeltaPlanRequest& m);
core::Message encode(const UnpublishDelta& m);
core::Message encode(const DeltaDrainedQuery& m);
core::Message encode(const DeltasRequest& m);
core::Message encode(const DeltaPlan& m);
core::Message encode(const Deltas& m);
core::Result<DeltaRegistration> decode_delta_registration(const core::Message& m,
                                                          const Limits& lim = {});
core::Result<DeltaPlanRequest> decode_delta_plan_request(const core::Message& m,
                                                         const Limits& lim = {});
core::Result<DeltaRef> decode_delta_ref(const core::Message& m, const Limits& lim = {});
core::Result<DeltasRequest> decode_deltas_request(const core::Message& m, const Limits& lim = {});
core::Result<DeltaPlan> decode_delta_plan(const core::Message& m, const Limits& lim = {});
core::Result<Deltas> decode_deltas(const core::Message& m, const Limits& lim = {});

// Replies, as clients read them.
core::Result<Committed> decode_committed(const core::Message& m);
core::Result<Drained> decode_drained(const core::Message& m);
core::Result<Latest> decode_latest(const core::Message& m);
core::Result<Retained> decode_retained(const core::Message& m, const Limits& lim = {});
core::Result<ChainSource> decode_chain_source(const core::Message& m, const Limits& lim = {});
core::Result<Copies> decode_copies(const core::Message& m, const Limits& lim = {});
core::Result<Holders> decode_holders(const core::Message& m, const Limits& lim = {});
core::Result<ReadPlan> decode_plan(const core::Message& m, const Limits& lim = {});

}  // namespace sluice::weightstore
