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
  // Host 0's link (the store, the manager and the actor): empty, link_rate; "none", not limited.
  std::string trainer_link_rate;
  std::string prefix = "sluice-job";
  // The last `joiner_hosts` of the `count` hosts start empty: no relay, no rollout of the job's
  // own; rollouts added later with `sluice run --add` go there, one a host in turn. New machines
  // joining a fleet: a joiner has no copy on its host and reads every byte over links.
  std::uint32_t joiner_hosts = 0;

  template <typename V>
  void describe(V& v) {
    v("count", count,
      "rollout hosts emulated with network namespaces (0: none; needs root), each with a relay "
      "unless it is one of the joiner_hosts");
    v("link_rate", link_rate, "every emulated host's link rate, both ways (tc syntax: 1gbit)");
    v("trainer_link_rate", trainer_link_rate,
      "host 0's link (store, manager, actor): empty, link_rate; none, not limited; or a rate");
    v("prefix", prefix, "name prefix of the emulated hosts' namespaces");
    v("joiner_hosts", joiner_hosts,
      "the last N hosts start without a relay or rollout; rollouts added with sluice run --add "
      "go there (0: none; fewer than count)");
  }
  core::Status validate() const;
};

// A tc rate ("500mbit", "1.5gbit", "10mbps") in bytes per second; an error names what is wrong.
core::Result<double> link_rate_bytes_per_s(const std::string& rate);

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
