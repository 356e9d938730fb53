// The relay's deltas (design: "Datacenters, elasticity, deltas"). Two halves:
//
// DeltaOffers (RelayConfig::make_deltas): when the relay holds version N and completes N+1, it
// encodes the delta N -> N+1 (format/delta.hpp) into registered memory and offers it to the store
// as a holder. A delta goes when either of its versions leaves the relay: unpublished, and freed
// once the store says no lease on it is left (or, when the store does not know it any more, after
// one lease time-to-live), through a grace period like every holder's memory.
//
// fetch_delta (RelayConfig::use_deltas): a relay that holds N and would pull N+1 across the WAN
// reads the delta instead, rebuilds N+1 chunk by chunk from its copy of N, and keeps each chunk
// only when it matches N+1's manifest checksum; the caller reads the others in full.
//
// Thread safety: loop thread only. Encoding runs on the loop thread (measured by `sluice bench
// delta`: a few hundred MB/s, so a 64 MiB version stalls the relay's loop for well under a
// second; much larger versions would want a worker thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/event_loop.hpp"
#include "format/manifest.hpp"
#include "weightstore/client.hpp"
#include "wire/transfer.hpp"

namespace sluice::relay {

// A relay's reads, of versions and of deltas: each GET, and the whole read.
inline constexpr core::Millis kRelayGetTimeout{5000};
inline constexpr core::Millis kRelayReadTimeout{60000};
// A stopping relay waits this long for the store to confirm its copies drained: a launcher
// waits a few seconds only after it asks a relay to stop.
inline constexpr core::Millis kRelayWithdrawWait{2000};

struct DeltaOptions {
  std::string holder_id;  // the relay's id
  std::string endpoint;
  weightstore::Topology topology;
  core::Millis lease_ttl{10000};  // the store's: how long an unknown copy waits to be freed
  core::Millis request_timeout{5000};
  std::string log_name;  // "relay relay-3"
};

class DeltaOffers {
 public:
  DeltaOffers(core::EventLoop& loop, core::TransferEngine& engine, weightstore::StoreClient& store,
              DeltaOptions options);
  ~DeltaOffers();
  DeltaOffers(const DeltaOffers&) = delete;
  DeltaOffers& operator=(const DeltaOffers&) = delete;

  // Encodes base -> target (their bytes, whole and verified) and offers it. Versions of
  // different layouts are skipped (logged).
  void make(const core::Manifest& base, const std::uint8_t* base_bytes,
            const core::Manifest& target, const std::uint8_t* target_bytes);
  // Drops every delta that has `version` as its base or target.
  void drop_with(std::uint64_t version);
  // Offers every delta again (the store restarted and forgot them).
  void register_again();
  // Drops everything and runs the loop until each delta may go, for at most `bound`.
  void close(core::Millis bound);
  std::size_t offered() const { return offered_.size(); }

 private:
  struct Offer {
    weightstore::DeltaRegistration reg;
    std::unique_ptr<core::RegisteredBuffer> memory;
  };
  struct Dropping {
    weightstore::DeltaRef ref;
    std::unique_ptr<core::RegisteredBuffer> memory;
    core::Clock::time_point since;
    bool asking = false;
    std::optional<core::Clock::time_point> unknown_since;
  };
  void offer(const Offer& o);
  void check_dropping();

  core::EventLoop& loop_;
  core::TransferEngine& engine_;
  weightstore::StoreClient& store_;
  DeltaOptions options_;
  std::map<std::pair<std::uint64_t, std::uint64_t>, Offer> offered_;
  std::vector<std::unique_ptr<Dropping>> dropping_;
  core::RetiredBuffers retired_;
  std::unique_ptr<core::EventLoop::Timer> timer_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// What fetch_delta did.
struct DeltaFetched {
  bool available = false;          // a delta was found and read (false: nothing was read)
  bool expected = false;           // none yet, but the store expects one (see DeltaPlan)
  std::uint64_t delta_bytes = 0;   // read over the link
  std::uint64_t target_bytes = 0;  // the full version's size
  std::uint64_t rebuilt = 0;       // chunks rebuilt and verified
  std::uint64_t mismatched = 0;    // chunks the delta did not rebuild right (read in full)
};

// Asks the store for the delta base -> target; when one is offered, reads it (each of its chunks
// verified against its own checksums), rebuilds into `dst` every chunk of `target` not yet set
// in `have` from `base_bytes`, and sets `have[i]` for each chunk that matches target's manifest.
// `done` runs once on the loop thread; the lease is released before. `base_bytes`, `dst` and
// `have` must stay alive until then. An error (no source answered, a malformed delta) leaves
// every chunk as it was.
void fetch_delta(core::TransferEngine& engine, weightstore::StoreClient& store,
                 const std::string& model, std::uint64_t base, const core::Manifest& target,
                 const weightstore::Topology& where, const std::uint8_t* base_bytes,
                 core::RegisteredBuffer& dst, std::vector<bool>& have,
                 std::function<void(core::Result<DeltaFetched>)> done);

}  // namespace sluice::relay
