// Private to protocol.cpp and protocol_delta.cpp: the pieces both encoders and decoders use, each
// written once. Not part of the weight store's contract (protocol.hpp is); include it nowhere
// else, since it brings the two files' shorthand names into sluice::weightstore.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>
#include <vector>

#include "core/json_limits.hpp"
#include "weightstore/protocol_limits.hpp"
#include "weightstore/store.hpp"
#include "wire/messaging.hpp"

namespace sluice::weightstore {

using core::Message;
using core::reply_name;
using core::Result;
using core::Status;
using json = nlohmann::json;
namespace field = core::json_field;

namespace parts {

// The optional "topology" field of a body (absent: no labels).
Result<Topology> topology_field(const json& body);

// A plan's holders: each an entry of the body's "holders" list and a descriptor blob, in order.
void put_holders(Message& m, const std::vector<ReadPlan::Holder>& holders);
// And back, checked: one blob per entry, ids within the limits, "distance" optional (3, the
// farthest, when absent) and clamped to 3. Errors name `what`.
Status get_holders(const Message& m, std::string_view what, const StoreDecodeLimits& lim,
                   std::vector<ReadPlan::Holder>& out);

}  // namespace parts
}  // namespace sluice::weightstore
