// The subcommands of the `sluice` executable. Each returns the process exit code: 0 on success,
// 1 when the work failed, 2 for a usage or configuration error.
#pragma once

#include <string>
#include <vector>

#include "wire/security.hpp"

namespace sluice::cli {

struct RoleArgs {
  std::string role;
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config_only = false;
};

// How a command-line tool (ping, publish, pull) authenticates to a job's roles: with the job's
// keys folder (sluice keys DIR, or RUN_DIR/keys of sluice run) as one of its identities, or, said
// explicitly, in plain mode.
struct AuthArgs {
  std::string keys_dir;  // DIR/<identity>.key and DIR/members.json
  std::string as;        // the identity to act as (a default per tool)
  bool plain = false;    // talk to a plain-mode job (no keys; warns)
};
// The tool's core::Security; invalid_argument naming the options when neither --keys nor
// --plain was given.
core::Result<core::Security> tool_security(const AuthArgs& auth, const std::string& tool);

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
// The identities of a job with `relays` relays and `rollouts` rollouts, with their roles:
// weightstore, rollout-manager, actor, relay-<i>, rollout-<i>, operator (the launcher, tools).
std::vector<std::pair<std::string, std::string>> job_identities(std::uint32_t relays,
                                                                std::uint32_t rollouts);
int run_keys(const KeysArgs& args);

int run_role(const RoleArgs& args, const std::vector<std::string>& environment);
// `sluice run JOB.json`: a whole job on this machine (see launch/job.hpp).
int run_job(const std::string& job_path, const std::vector<std::string>& overrides,
            const std::string& out_dir, const std::vector<std::string>& environment);
// `sluice run --resume RUN_DIR`: the job of that run folder, continued.
int resume_job(const std::string& run_dir, const std::vector<std::string>& environment);
int run_ping(const PingArgs& args);

}  // namespace sluice::cli
