// A relay: an always-on holder in host memory. It joins the store's broadcast chain, and for
// each new committed version pulls it from its chain predecessor chunk by chunk while the
// predecessor is still receiving: it keeps `in_flight` chunk reads going over what the
// predecessor has verified, reports each chunk to the store as soon as it is verified (so the
// next relay can start on it), and asks the store for its predecessor's progress every few
// milliseconds while it waits. It keeps the newest K versions and serves them to readers. A
// predecessor that fails is skipped: the store names the nearest live one before it, or a
// complete holder.
//
// Thread safety: one thread; run() drives the event loop itself and returns on stop().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "relay/relay_config.hpp"
#include "weightstore/store.hpp"
#include "wire/security.hpp"

namespace sluice::relay {

class Relay {
 public:
  // `environment` is the process environment as the user gave it (see TransferOptions).
  static core::Result<std::unique_ptr<Relay>> create(core::EventLoop& loop, RelayConfig config,
                                                     std::vector<std::string> environment);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs until stop() (or a shutdown signal handled by the caller calls stop()).
  core::Status run();
  void stop();

  struct Impl;

 private:
  explicit Relay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::relay
