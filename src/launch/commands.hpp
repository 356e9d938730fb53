// The launcher's subcommands besides the roles (launch/role_commands.hpp): `sluice run`, `keys`
// and `ping`. Each returns the process exit code: 0 on success, 1 when the work failed, 2 for a
// usage or configuration error.
//
// Thread safety: main's thread only.
#pragma once

#include <string>
#include <vector>

#include "launch/job_config.hpp"

namespace sluice::cli {

struct PingArgs {
  std::string endpoint;
  int timeout_ms = 2000;
  int count = 1;
  std::string peer = "weightstore";  // curve: the identity of the role pinged
  AuthArgs auth;
};

// `sluice keys DIR`: a job's keys (wire/security.hpp), one key pair per identity.
struct KeysArgs {
  std::string dir;
  std::uint32_t relays = 1;
  std::uint32_t rollouts = 4;
};
int run_keys(const KeysArgs& args);

// `sluice run JOB.json`: a whole job on this machine (see launch/job.hpp).
int run_job(const std::string& job_path, const std::vector<std::string>& overrides,
            const std::string& out_dir, const std::vector<std::string>& environment);
// `sluice run --resume RUN_DIR`: the job of that run folder, continued.
int resume_job(const std::string& run_dir, const std::vector<std::string>& environment);
int run_ping(const PingArgs& args);

}  // namespace sluice::cli
