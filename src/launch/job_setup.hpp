// What every launcher of a job does before it starts a process (`sluice run` on this machine,
// `sluice slurm` and `sluice k8s` for a cluster): settle the job's shared settings, find the
// programs of command roles, make the run folder and the job's keys, point the roles at each
// other and at the run folder, and write each role's configuration file. One code path, so a role
// file is the same whichever launcher made it; only the endpoints and paths differ.
//
// Thread safety: free functions without shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/status.hpp"
#include "launch/job_config.hpp"
#include "launch/role_file.hpp"

namespace sluice::cli {

// Reads a job file as JSON. Relative paths in it are taken from the job file's folder, so a job
// runs the same from any working folder; absolute paths are kept. The paths: out_dir,
// manager.state_path, actor.checkpoint_dir, rollout.sim.lengths.file, and a command role's
// workdir (empty or absent: the job file's folder), where its program runs: a relative program,
// argument or env value is taken from there.
core::Result<core::config::Json> read_job_file(const std::string& path);

// read_job_file, then `overrides` (--set) applied and parsed. A relative path given in an
// override is taken from the working folder, as the command line's other paths are.
core::Result<JobConfig> load_job_file(const std::string& path,
                                      const std::vector<std::string>& overrides);

// The launcher's decisions for every job: the mode in one place (job.mode over manager.mode),
// one batch and group size for the actor and the manager, the manager's staleness settings
// taken from the actor's policy. Then validates the job.
core::Status settle_job(JobConfig& job);

// The programs of the job's command roles (empty for a built-in role), found before anything
// starts: a missing program fails the job by its name (see RoleCommand).
struct RolePrograms {
  std::string actor;
  std::string rollout;
};
core::Result<RolePrograms> resolve_role_programs(const JobConfig& job,
                                                 const std::vector<std::string>& environment);

// runs/<name>-<local time>-<pid>: the run folder when the job names none.
std::string default_run_dir(const JobConfig& job);

// Makes the run folder. A new job (resume false) refuses a folder that holds another job's
// durable state; a resumed one needs the folder's job.json.
core::Status make_run_dir(const std::filesystem::path& dir, bool resume);

// Where the roles listen and where they reach each other. A local job uses one loopback address
// for both; a cluster job listens on every interface and is reached by a host name.
struct JobEndpoints {
  std::string store_listen;    // the store binds here
  std::string store;           // the others connect here
  std::string manager_listen;  // the manager binds here
  std::string manager;         // the rollouts and the actor connect here
};

// Points the roles at each other and at the run folder `dir` (the actor's summary, metrics and
// final weights; the manager's database and the actor's checkpoints unless the job set them), and
// copies what one role decides into the others that must agree (lease time-out, model name).
void wire_job(JobConfig& job, const JobEndpoints& endpoints, const std::string& dir);

// Curve jobs: makes the job's keys in `keys_dir` (0700, files 0600) unless `keep_existing` and
// the folder has them already; plain jobs: warns. Then gives the store, the manager and the actor
// their security sections.
core::Status make_job_security(JobConfig& job, const std::string& keys_dir, bool keep_existing);

// A job whose rollouts serve the agent endpoint (rollout.agent_listen) and name no token file: a
// new random token, written to `path` (created 0600: no one else can read it at any moment), and
// rollout.agent_token_file set to `rollout_path`, where the rollouts find that file (`path`
// itself, or where a cluster mounts it). The token is in no configuration, role file or log.
// Returns it; empty when the job needs none or names its own file.
core::Result<std::string> make_agent_token(JobConfig& job, const std::filesystem::path& path,
                                           const std::string& rollout_path);

// A cluster job (`sluice slurm`, `sluice k8s`) binds the store and the manager on every
// interface (0.0.0.0): with auth "plain" anyone who reaches those ports may register versions
// or collect trajectories. invalid_argument unless `allowed` (--allow-plain-public) says that
// is meant; `command` names the subcommand in the error.
core::Status check_plain_public(const JobConfig& job, bool allowed, const std::string& command);

// What a job did, whoever ran it (sluice run, sluice slurm-collect).
struct JobResult {
  std::string dir;                  // the run folder
  nlohmann::json actor;             // the actor's summary
  nlohmann::json manager;           // the manager's final status
  std::vector<std::string> events;  // children that died, chaos applied
  nlohmann::json restarts;          // restarts and kills per process name
};

// The end of a job's run folder, whoever ran it: summary.json (the shape `sluice run` writes;
// `outcome` "ok" or the failure) and report.html (a warning, not a failure, when it cannot be
// drawn).
void write_run_summary(const std::filesystem::path& dir, const JobConfig& job,
                       const JobResult& result, const nlohmann::json& watch,
                       const core::Status& outcome, double wall_s);

}  // namespace sluice::cli
