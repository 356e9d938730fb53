// Reads one rank's shard of a version (format/shard.hpp) from the holders a read plan names, and
// assembles it into the rollout's own tensors.
//
// Two ways, both verified before anything is used:
//   - declared: the actor signed checksums of this layout's shard streams (Manifest::shards).
//     Only the shard's pieces are read (sub-chunk GETs at the pieces' offsets), assembled, and
//     each chunk_bytes of the assembled stream is checked against the rank's checksum. A chunk
//     that fails is read again, one holder at a time, until one gives the right bytes.
//   - not declared: the version's whole chunks that hold any of the shard's bytes are read,
//     each verified against the manifest's chunk checksums as usual, and the shard is cut out of
//     them. More bytes move (a columns split touches every chunk of its tensor); said so once in
//     the log.
// Then the cast, if any, runs over the verified stream chunk_bytes at a time.
//
// Thread safety: loop thread only (as the transfer engine).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/event_loop.hpp"
#include "format/shard.hpp"
#include "weightstore/protocol.hpp"
#include "weightstore/pulled.hpp"
#include "weightstore/store.hpp"
#include "wire/transfer.hpp"

namespace sluice::weightstore {

// Reads `shard` (planned for plan->manifest and `layout`) from `sources` (plan->holders, in that
// order). `done` runs once on the loop thread with the rollout's tensors: Pulled::manifest is
// shard_manifest() with checksums over the delivered bytes, Pulled::stats.bytes every byte read
// (retries included), Pulled::version_bytes the whole version's size. options.verify is ignored
// (shards are always verified) and options.on_chunk is not called. Errors: the read's, or
// data_loss naming the shard chunk that no holder could supply intact.
void read_shard_async(core::TransferEngine& engine, std::shared_ptr<const ReadPlan> plan,
                      std::vector<core::ReadSource> sources, core::ShardPlan shard,
                      core::ShardLayout layout, core::ReadOptions options,
                      std::function<void(core::Result<Pulled>)> done);

// As read_shard_async, for a layout with host_tp_size: the shard's pieces are read from the
// relay on this host that holds its host share (the store's plan of the share, asked again
// every few milliseconds while the share arrives, so reading overlaps the relay's receiving;
// another host's relay only when none on this host has started within 1 s), then every
// assembled chunk is checked against the declared checksums; chunks that fail are read from
// `sources` (the version's holders) in turn. A share that no relay has started on within 1 s,
// or that makes no progress for 10 s, is given up for the version's holders. Without host_tp_size,
// or without declared checksums for both layouts, it is read_shard_async. What a share read asks of
// the store; pull_async answers it with its StoreClient (a host share's plan checked as
// StoreClient::share_plan_async checks it, and a lease's release, fire and forget), on `loop`, the
// engine's loop thread.
struct ShareStore {
  core::EventLoop* loop = nullptr;
  std::function<void(const PlanRequest& request, std::shared_ptr<const core::Manifest> parent,
                     std::function<void(core::Result<ReadPlan>)> done)>
      plan;
  std::function<void(std::uint64_t lease_id)> release;
};

void read_shard_via_share_async(core::TransferEngine& engine, ShareStore store,
                                const Topology& where, std::shared_ptr<const ReadPlan> plan,
                                std::vector<core::ReadSource> sources, core::ShardPlan shard,
                                core::ShardLayout layout, core::ReadOptions options,
                                std::function<void(core::Result<Pulled>)> done);

}  // namespace sluice::weightstore
