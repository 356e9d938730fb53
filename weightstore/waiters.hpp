// Long polls: requests the store answers when it has something new for them (a version
// committed, a relay's source holding more chunks), or when their wait ends, instead of members
// asking again and again. Across datacenters every question crosses the WAN, and polling was
// most of a remote link's bytes beyond the weights (docs/benchmarks.md).
//
// A parked request is checked again on every wake() (the service wakes its waiters after each
// message that can commit a version or add chunks) and answered at its deadline with whatever
// the check gives then. The waits are bounded: a longest wait, a cap per identity and one in
// all; a request beyond a cap is answered at once, as a plain poll.
//
// Thread safety: loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "wire/messaging.hpp"

namespace sluice::weightstore {

using Millis = std::chrono::milliseconds;

struct WaitLimits {
  Millis max_wait{30000};         // a longer wait asked for is cut to this (kMaxLongPollMs)
  std::size_t per_identity = 32;  // parked requests of one caller (its role's sockets together)
  std::size_t total = 4096;       // parked requests in all
};

class Waiters {
 public:
  // Gives the reply if there is one to give now; with `final` (the wait is over, or the request
  // could not park) it must give one.
  using Check = std::function<std::optional<core::Result<core::Message>>(bool final)>;

  Waiters(core::EventLoop& loop, WaitLimits limits) : loop_(loop), limits_(limits) {}
  Waiters(const Waiters&) = delete;
  Waiters& operator=(const Waiters&) = delete;

  // Answers at once when check(false) has a reply, `wait` is zero, or a cap is reached; parks
  // the request otherwise.
  void park(const std::string& identity, Millis wait, core::Responder responder, Check check);
  // Checks every parked request again and answers those that have a reply now.
  void wake();

  std::size_t parked() const { return parked_.size(); }
  const WaitLimits& limits() const { return limits_; }

 private:
  struct Parked {
    std::string identity;
    core::Responder responder;
    Check check;
    std::unique_ptr<core::EventLoop::Timer> deadline;
  };
  void answer(std::uint64_t id, bool final);

  core::EventLoop& loop_;
  WaitLimits limits_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Parked> parked_;
  std::map<std::string, std::size_t> per_identity_;
};

}  // namespace sluice::weightstore
