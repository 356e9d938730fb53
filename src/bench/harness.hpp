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
