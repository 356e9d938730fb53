// The settings that the three roles holding copies of weights (the actor, a rollout, a relay)
// share, written once. Each role's config inherits them and calls their describe() from its own,
// so they stay flat keys of the role's section ("store", not "holder.store") with the same names
// and defaults in every role.
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <string>

#include "weightstore/store.hpp"
#include "wire/security.hpp"

namespace sluice::weightstore {

// How a holding role reaches the store and its peers.
struct HolderRoleConfig {
  std::string store = "tcp://127.0.0.1:5550";  // weight store endpoint
  // core::TransferOptions::stream_encryption: auto, on or off.
  std::string stream_encryption = "auto";
  // The store's lease_ttl_ms (sluice run copies it): a copy the store does not know (it
  // restarted) is freed only after this long.
  std::uint64_t store_lease_ttl_ms = 10000;
  // The role's key and the job's members (wire/security.hpp). Curve by default; plain only when
  // set.
  core::SecurityConfig security;

  template <typename V>
  void describe(V& v) {
    v("store", store, "weight store endpoint");
    v("security", security, "control-plane authentication: mode, key_file, members_file");
    v("stream_encryption", stream_encryption,
      "chunk streams (TCP reads of weights between hosts): auto (encrypted and authenticated "
      "from a holder in another datacenter; default), on (always; needs auth curve) or off");
    v("store_lease_ttl_ms", store_lease_ttl_ms,
      "the weight store's lease_ttl_ms (sluice run copies it): how long a copy the store does not "
      "know (it restarted) waits to be freed (default 10000)");
  }
};

// Where a role that reads from the nearest holder runs (a rollout, a relay): its topology labels.
struct TopologyLabels {
  std::string host;
  std::string rack;
  std::string datacenter;

  Topology topology() const { return {host, rack, datacenter}; }

  template <typename V>
  void describe(V& v) {
    v("host", host, "topology: host label");
    v("rack", rack, "topology: rack label");
    v("datacenter", datacenter, "topology: datacenter label");
  }
};

}  // namespace sluice::weightstore
