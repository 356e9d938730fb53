// The process harness that the benches and the simulator's front end share: run a helper to its
// end and keep its output, start a process and wait for its ready line, and run either inside an
// emulated host (scripts/emuhosts.sh).
//
// Thread safety: free functions; each call owns the processes it starts until it returns them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "core/status.hpp"

namespace sluice::cli {

// Waits the benches share. A process whose output has ended (or that was sent SIGTERM) exits
// within kExitWait; a role
// (store, relay) prints its ready line within kRoleStartTimeout, a transfer source, which
// registers its memory first, within kSourceStartTimeout; emuhosts.sh brings its hosts up within
// kHostsUpTimeout and takes them down within kHostsDownTimeout; one measured run (a reader, a
// job inside the emulated hosts) ends within kRunTimeout.
inline constexpr std::chrono::milliseconds kExitWait{10000};
inline constexpr std::chrono::milliseconds kRoleStartTimeout{20000};
inline constexpr std::chrono::milliseconds kSourceStartTimeout{120000};
inline constexpr std::chrono::milliseconds kHostsUpTimeout{120000};
inline constexpr std::chrono::milliseconds kHostsDownTimeout{60000};
inline constexpr std::chrono::milliseconds kRunTimeout{600000};
// The store client's heartbeat period in the broadcast benches' publishers (their relays join
// and leave quickly).
inline constexpr std::chrono::milliseconds kBenchHeartbeat{300};
// The broadcast benches: between relay starts (keeps the chain's join order), a version's commit,
// and how often the relays' progress is looked at.
inline constexpr std::chrono::milliseconds kJoinOrderPause{50};
inline constexpr std::chrono::milliseconds kCommitTimeout{60000};
inline constexpr std::chrono::milliseconds kProgressPoll{5};

// UCX settings for sluice processes in emulated hosts: TCP on their eth0 only (the namespaces
// share /dev/shm, so UCX would otherwise reach the other "hosts" through shared memory).
extern const std::vector<std::string> kEmulatedHostUcxEnv;

// The argv prefix that runs a command inside emulated host `host` of the hosts made with
// `prefix` (emuhosts.sh exec).
std::vector<std::string> in_emulated_host(const std::string& emuhosts, const std::string& prefix,
                                          unsigned host);

// Runs `argv` to its end with `env` added and returns its standard output (with its standard
// error too when `merge_stderr`). internal_error naming the program, its exit status and the
// output's last 2,000 bytes when it exits non-zero; timeout when it has not exited 10 s after
// `timeout`.
core::Result<std::string> run_capture(const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env,
                                      std::chrono::milliseconds timeout, bool merge_stderr = false);

// A started process and the line that said it was ready.
struct Started {
  std::unique_ptr<core::Subprocess> proc;
  std::string line;
};

// Starts a process and reads its standard output until a line that starts with `ready` (any
// line when `ready` is empty), waiting up to `timeout` for each line. The error names `what`; the
// process is stopped with it (Subprocess's destructor).
core::Result<Started> start_ready(core::Subprocess::Options options, const std::string& ready,
                                  std::chrono::milliseconds timeout, const std::string& what);

}  // namespace sluice::cli
