// A sequence's KV cache moved over UCX rather than inside the manager's messages: the source
// copies it into memory registered with its TransferEngine and sends a KvRef in its place
// (publish_kv); the destination reads the bytes with a one-sided GET, checks them against the
// reference and rebuilds the KvState (fetch_kv). The source keeps the buffer for a while
// (RolloutConfig::kv_hold_ms); a destination whose read fails re-prefills instead.
//
// The buffer opens with a header (kKvHeaderBytes) naming the rollout that published it and the
// sequence whose cache it holds; a reader checks both against the reference and the sequence it
// imports. A member that hands out a reference to another rollout's buffer, or to another
// sequence's, gets it refused rather than read into someone's cache.
//
// Thread safety: the TransferEngine's (its loop thread). fetch_kv runs the loop until the read
// ends: never call it from a loop callback.
#pragma once

#include <memory>

#include "core/status.hpp"
#include "rollout/engine.hpp"
#include "wire/transfer.hpp"

namespace sluice::rollout {

inline constexpr std::uint64_t kKvHeaderBytes = 512;

// Who a published cache belongs to: the publishing rollout and the sequence (1 to
// kMaxKvIdBytes bytes each).
struct KvOwner {
  std::string rollout;
  std::string trajectory;
};

struct PublishedKv {
  KvRef ref;
  // Holds the bytes `ref` names: keep it until the destination has read them, and free it before
  // the engine that made it goes.
  std::unique_ptr<core::RegisteredBuffer> buffer;
};

// Copies `kv` (keys, then values) after a header naming `owner` into a buffer allocated from
// `engine`; the reference's source is owner.rollout. invalid_argument for a KvState whose arrays
// do not match its shape or that is empty, or an owner id empty or too long; the engine's error
// when it cannot allocate.
core::Result<PublishedKv> publish_kv(core::TransferEngine& engine, const KvState& kv,
                                     const KvOwner& owner);

struct FetchKvOptions {
  core::Millis timeout{10000};  // the whole read
  // The most bytes this reader accepts; a larger reference is refused before anything is
  // allocated (the caller's engine capacity: max_kv_tokens x kv_bytes_per_token()).
  std::uint64_t max_bytes = 0;
  // This rollout (a reference bound to another destination is refused) and the sequence being
  // imported (the buffer's header must name it, and the reference's source).
  std::string self;
  std::string trajectory;
};

// Reads what `ref` names into memory registered with `engine` and returns it as a KvState.
// invalid_argument when the reference is refused unread (too large, shape and byte count that
// disagree, empty, or a region that does not decode); permission_denied when it was issued to
// another rollout, or when the buffer it names is not its source's cache of this sequence;
// timeout or unavailable when the read fails; data_loss when the bytes read are not the ones
// published (checksum).
core::Result<KvState> fetch_kv(core::TransferEngine& engine, const KvRef& ref,
                               const FetchKvOptions& options);

// What a destination's KV reads came to (the rollout's stats).
struct KvReadStats {
  std::uint64_t fetched = 0;        // caches read over UCX
  std::uint64_t fetched_bytes = 0;  // their bytes
  std::uint64_t read_failed = 0;    // references dropped unread or read wrong (re-prefilled)
};

// Replaces `s.kv_ref` by the KvState it names, read with `transfer` (null: none here) for
// `engine` (bounding the read by the engine's capacity) on rollout `self`. On failure the reference
// is dropped and counted and `s` goes on without a cache: the engine re-prefills it. Returns the
// failure (for the caller's log). Does nothing to a sequence without a reference.
core::Status fetch_kv_of(core::TransferEngine* transfer, const Engine& engine, SequenceState& s,
                         const std::string& self, core::Millis timeout, KvReadStats& stats);

}  // namespace sluice::rollout
