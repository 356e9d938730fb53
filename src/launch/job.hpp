// A whole job on this machine (`sluice run JOB.json`, and what `sluice bench e2e` runs once per
// mode): the weight store, relays, the rollout manager, rollouts and the actor, each its own
// process on loopback. The launcher writes each role's configuration file into the run folder,
// starts the roles in order and waits for each to come up, shows live progress, restarts a child
// that died (launch/supervisor.hpp), stops everything on Ctrl-C or when the actor finishes, and
// writes the run folder: job.json (the effective job), <role>.json (each role's configuration),
// <role>.log (its stderr), events.jsonl (starts, deaths, restarts, kills), manager.db and
// checkpoints/ (the durable state a restarted role recovers from), and summary.json (the actor's
// summary, the manager's final status, restarts per process), and keys/ (the job's CURVE keys,
// mode 0600: every role authenticates its peers unless the job says auth "plain"). The actor and
// the rollouts may be programs of the user's (RoleCommand): they are started, supervised and
// reported on like the built-in roles. The job's configuration is launch/job_config.hpp.
//
// Thread safety: one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "launch/emulated_hosts.hpp"
#include "launch/job_config.hpp"
#include "launch/job_setup.hpp"

namespace sluice::cli {

// The launcher's turn: how often it looks at its roles and the job's progress.
inline constexpr core::Millis kLauncherTurn{100};
// A status request to the rollout manager, which answers from memory.
inline constexpr core::Millis kManagerStatusTimeout{3000};

// Runs the job to the end. `sluice_exe` is the binary to start the roles with; `environment` the
// process environment as the user gave it. With job.hosts.count > 0 the roles run on emulated
// hosts: `hosts` when given (made from the same hosts config; several jobs of one process must
// share them, as the process's ZeroMQ I/O thread stays in the namespace it started in), else
// hosts made for this job and removed after it. `resume`: job.out_dir is the run folder of a job
// that was stopped or whose launcher died; its roles recover from the durable state there (the
// manager's database, the actor's checkpoint).
core::Result<JobResult> run_local_job(JobConfig job, const std::string& sluice_exe,
                                      const std::vector<std::string>& environment,
                                      std::shared_ptr<EmulatedHosts> hosts = nullptr,
                                      bool resume = false);

// Reads the effective job a run folder was started with (its job.json), for --resume.
core::Result<JobConfig> load_run_job(const std::string& run_dir);

// The environment entries the launcher adds for a job's role processes (UCX transports: shared
// memory on one host, TCP on eth0 across emulated hosts), leaving alone what the user set.
std::vector<std::string> job_role_environment(const JobConfig& job,
                                              const std::vector<std::string>& environment);

}  // namespace sluice::cli
