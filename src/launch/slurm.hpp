// `sluice slurm JOB.json`: a job on a Slurm cluster (docs/clusters.md). It writes a run folder on
// a file system every node sees: job.json (the effective job), keys/ (the job's CURVE keys),
// conf/<role>.json (each role's file, its store and manager endpoints naming the host @HEAD@ and
// its topology label @HOST@), role.sh (runs one role in a step and restarts it when it dies) and
// job.sbatch. The batch script takes one allocation, takes the first node as the head (the store,
// the manager and the actor run there; relays and rollouts on the other nodes, or on the head
// when there is one node), fills @HEAD@ from SLURM_JOB_NODELIST, starts one `srun` step per role
// group, waits for the actor, then writes summary.json and report.html as `sluice run` does
// (`sluice slurm-collect`) and stops the other steps. `--submit` runs sbatch; `--wait` waits for
// the Slurm job's end, with a time-out.
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/k8s.hpp"

namespace sluice::cli {

struct SlurmArgs {
  std::string job_path;
  std::vector<std::string> overrides;    // --set key=value on the job
  std::string out_dir;                   // the run folder (default runs/<name>-<time>), absolute
  std::string partition;                 // #SBATCH --partition (default: the cluster's)
  std::string account;                   // #SBATCH --account
  std::uint32_t nodes = 1;               // the allocation's nodes
  std::string time;                      // #SBATCH --time (default: from the job's timeout_s)
  std::vector<std::string> sbatch_args;  // further #SBATCH lines, as given ("--qos=high")
  int store_port = 5550;                 // the store's port on the head node
  int manager_port = 5551;               // the manager's port on the head node
  bool submit = false;                   // run sbatch
  bool allow_plain_public = false;       // auth plain on 0.0.0.0 binds (refused without it)
  bool wait = false;                     // with submit: wait for the job's end
  double wait_timeout_s = 0;             // 0: the job's timeout_s plus 300 s
};

// Returns the exit code: 0 written (and submitted, and with --wait finished well), 1 failed,
// 2 bad job or arguments.
int run_slurm(const SlurmArgs& args, const std::vector<std::string>& environment);

// `sluice slurm-collect RUN_DIR`, run by job.sbatch once the actor's step ended: asks the manager
// for its final status, reads the actor's summary and the roles' events (restarts), and writes
// summary.json and report.html. 0 when the job's outcome is ok, 1 otherwise.
struct SlurmCollectArgs {
  std::string run_dir;
  std::string manager;   // the manager's endpoint (tcp://HEAD:PORT)
  int actor_status = 0;  // the actor step's exit status (124: the time-out ended it)
  bool stopped = false;  // the job's duration_s ended the actor (not a failure)
  double wall_s = 0;     // seconds since the batch script started
};
int run_slurm_collect(const SlurmCollectArgs& args);

}  // namespace sluice::cli
