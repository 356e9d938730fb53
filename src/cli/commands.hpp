// The subcommands of the `sluice` executable. Each returns the process exit code: 0 on success,
// 1 when the work failed, 2 for a usage or configuration error.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct RoleArgs {
  std::string role;
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config_only = false;
};

struct PingArgs {
  std::string endpoint;
  int timeout_ms = 2000;
  int count = 1;
};

int run_role(const RoleArgs& args, const std::vector<std::string>& environment);
// `sluice run JOB.json`: a whole job on this machine (see cli/job.hpp).
int run_job(const std::string& job_path, const std::vector<std::string>& overrides,
            const std::string& out_dir, const std::vector<std::string>& environment);
// `sluice run --resume RUN_DIR`: the job of that run folder, continued.
int resume_job(const std::string& run_dir, const std::vector<std::string>& environment);
int run_ping(const PingArgs& args);

}  // namespace sluice::cli
