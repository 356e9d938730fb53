// The relay's configuration: what a relay role file and `--set relay.*` hold.
//
// Thread safety: plain data.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "weightstore/holder_config.hpp"
#include "weightstore/store.hpp"

namespace sluice::relay {

// store, security, stream_encryption, store_lease_ttl_ms and the topology labels (host, rack,
// datacenter): weightstore::HolderRoleConfig and TopologyLabels. The relay talks only to the
// store whose public key the members file names.
struct RelayConfig : weightstore::HolderRoleConfig, weightstore::TopologyLabels {
  std::string relay_id;             // unique; default relay-<pid>
  std::string model = "policy";     // the model whose versions this relay carries
  std::uint32_t keep_versions = 2;  // versions held in host memory
  std::uint64_t poll_ms = 50;       // how often to look for new versions and chunks
  // GETs in flight from the predecessor. Few: a relay that keeps k chunks in flight trails its
  // predecessor by about k chunks, for good, and in a chain that lag adds up hop by hop
  // (measured, 8 relays behind 250 Mbit/s links, 128 MiB in 512 KiB chunks: T(8)/T(1) 1.40 with
  // 8, 1.18-1.21 with 2 or 3, 1.31 with 1, which leaves the link idle between reads).
  std::uint32_t in_flight = 3;
  // While a version is incomplete, how often the relay asks the store for its source's progress
  // once it has read everything the source holds (follow_poll_ms), and at most how long it goes
  // without asking (reask_ms). follow_poll_ms bounds how far a relay trails its source (about a
  // chunk's transfer plus this), so a long chain stays close to one hop's time; every question
  // is a round trip to the store, which crosses the WAN for a relay in another datacenter
  // than the store (measured, 3 datacenters x 4 hosts, 32 MiB: see docs/benchmarks.md).
  std::uint64_t follow_poll_ms = 3;
  std::uint64_t reask_ms = 10;
  // Long polls (0: poll as above). The relay keeps one question for a newer version parked at
  // the store, answered when one commits or after latest_wait_ms, and, while receiving, one for
  // its source's progress, answered when the source holds more or the store names another, or
  // after follow_wait_ms. Each question is then a step forward, not a tick: across datacenters
  // the ticks were most of a link's bytes beyond the weights (docs/benchmarks.md).
  std::uint64_t latest_wait_ms = 1000;
  std::uint64_t follow_wait_ms = 1000;
  // A version larger than this is not taken (nothing allocated for it).
  std::uint64_t max_version_bytes = 256ull << 30;
  // Deltas (relay_delta.hpp). make_deltas: when this relay holds version N and completes N+1,
  // it offers the delta N -> N+1 as a holder. use_deltas: when it holds N and its source for
  // N+1 is in another datacenter, it reads a delta N -> N+1 instead (when one is offered, or
  // expected within delta_wait_ms), rebuilds N+1, verifies every chunk against N+1's checksums
  // and reads the chunks that fail in full.
  // deltas_for_other_datacenters: make them also without make_deltas whenever the store says a
  // relay of another datacenter reads from this one (it is its datacenter's seed, and a
  // datacenter after it in the chain has relays), so a WAN link carries deltas with no setting.
  bool make_deltas = false;
  bool use_deltas = true;
  bool deltas_for_other_datacenters = true;
  std::uint64_t delta_wait_ms = 5000;
  // A relay receives one version at a time: a newer one starts once the one being received is
  // complete, or once it has made no progress for abandon_after_ms (its sources failing or
  // gone), when it is given up and its memory goes once its readers drained. So a relay holds at
  // most keep_versions complete copies, the one it receives and the ones it gave up and is
  // draining, however slow its sources are.
  std::uint64_t abandon_after_ms = 15000;
  // Host share (share_tp_size > 0): the relay holds only rank share_rank's shard stream of the
  // layout of tp_size share_tp_size that the actor declares (one such layout; format/shard.hpp),
  // which is what its host's rollout GPUs load when their layout is share_tp_size x (GPUs a
  // host) wide. The relays of one share form their own chain; its head reads the pieces from a
  // complete holder of the whole version. Deltas are not made or used for shares.
  std::uint32_t share_tp_size = 0;
  std::uint32_t share_rank = 0;

  template <typename V>
  void describe(V& v) {
    HolderRoleConfig::describe(v);
    v("relay_id", relay_id,
      "unique relay name (default relay-<pid>); in curve mode the identity of the relay's key");
    v("model", model, "model whose versions this relay carries");
    v("keep_versions", keep_versions, "versions kept in host memory (>= 1)");
    v("poll_ms", poll_ms, "how often to look for new versions and newly verified chunks");
    v("in_flight", in_flight, "GETs in flight from the predecessor");
    v("follow_poll_ms", follow_poll_ms,
      "while receiving, how often to ask the store for the source's progress once everything it "
      "holds is read (default 3)");
    v("reask_ms", reask_ms,
      "while receiving, the longest time without asking the store for the source (default 10)");
    v("latest_wait_ms", latest_wait_ms,
      "how long the store may hold a question for a newer version until one commits (default "
      "1000; 0: ask every poll_ms)");
    v("follow_wait_ms", follow_wait_ms,
      "while receiving, how long the store may hold a question for the source's progress until "
      "there is some (default 1000; 0: ask every follow_poll_ms)");
    TopologyLabels::describe(v);
    v("max_version_bytes", max_version_bytes, "largest version this relay takes, in bytes");
    v("make_deltas", make_deltas,
      "offer the delta N -> N+1 when this relay holds N and completes N+1 (default false)");
    v("deltas_for_other_datacenters", deltas_for_other_datacenters,
      "make deltas also without make_deltas while the store says a relay of another datacenter "
      "reads from this one (default true; not for a host-share relay)");
    v("use_deltas", use_deltas,
      "read N+1 as a delta against a held N when its source is in another datacenter "
      "(default true)");
    v("delta_wait_ms", delta_wait_ms,
      "how long to wait for a delta that a delta-making relay is expected to offer (default "
      "5000)");
    v("share_tp_size", share_tp_size,
      "hold only a host share: rank share_rank of the declared layout of this tp_size (0: whole "
      "versions; default)");
    v("share_rank", share_rank, "with share_tp_size: the rank of the share this relay holds");
    v("abandon_after_ms", abandon_after_ms,
      "a version being received that made no progress for this long is given up for a newer "
      "one (default 15000)");
  }
  core::Status validate() const;
};

}  // namespace sluice::relay
