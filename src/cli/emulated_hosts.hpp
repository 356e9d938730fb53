// A job's roles placed on emulated hosts (scripts/emuhosts.sh: network namespaces on a bridge,
// every host's link limited with tc tbf), so that weights cross links that take time, as they do
// between machines, instead of being one shared-memory copy away. Host 0 holds the trainer's
// side (weight store, rollout manager, actor); hosts 1..count hold a relay and rollouts each.
//
// Needs root. Thread safety: one thread; enter() changes the calling thread's network namespace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::cli {

struct EmulatedHostsConfig {
  std::uint32_t count = 0;          // rollout hosts (0: every role on this host, on loopback)
  std::string link_rate = "1gbit";  // every host's link, both ways (tc syntax)
  std::string prefix = "sluice-job";

  template <typename V>
  void describe(V& v) {
    v("count", count,
      "rollout hosts emulated with network namespaces (0: none; needs root), each with a relay");
    v("link_rate", link_rate, "every emulated host's link rate, both ways (tc syntax: 1gbit)");
    v("prefix", prefix, "name prefix of the emulated hosts' namespaces");
  }
  core::Status validate() const;
};

class EmulatedHosts {
 public:
  // Creates hosts 0..count (tearing down earlier ones with the same prefix). `environment` is
  // the process environment (SLUICE_EMUHOSTS names the script).
  static core::Result<std::unique_ptr<EmulatedHosts>> up(
      const EmulatedHostsConfig& config, const std::vector<std::string>& environment);
  // Returns the calling thread to the namespace it started in, then removes the hosts.
  ~EmulatedHosts();
  EmulatedHosts(const EmulatedHosts&) = delete;
  EmulatedHosts& operator=(const EmulatedHosts&) = delete;

  // Moves the calling thread into host `index`'s network namespace; threads and processes it
  // starts afterwards are there too.
  core::Status enter(std::uint32_t index);
  // argv prefix that runs a command inside host `index`.
  std::vector<std::string> exec_prefix(std::uint32_t index) const;
  // Host `index`'s address on the emulated network.
  static std::string address(std::uint32_t index);
  static std::string label(std::uint32_t index) { return "h" + std::to_string(index); }

 private:
  EmulatedHosts() = default;
  EmulatedHostsConfig config_;
  std::string script_;
  int home_ns_ = -1;  // the namespace the process started in
};

}  // namespace sluice::cli
