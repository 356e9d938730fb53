// The command line of the launcher and the job's tools (src/launch): `version`, the five roles,
// `run`, `replay`, `publish`, `pull`, `keys`, `ping`, `slurm`, `slurm-collect` and `k8s`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/subcommands.hpp"
#include "core/cuda_device.hpp"
#include "launch/commands.hpp"
#include "launch/executable.hpp"
#include "launch/job_elastic.hpp"
#include "launch/replay_cmd.hpp"
#include "launch/role_commands.hpp"
#include "launch/slurm.hpp"
#include "launch/weights_cmds.hpp"
#include "wire/build_info.hpp"

namespace sluice::cli {

namespace {

struct RoleSpec {
  const char* name;
  const char* help;
};

// Every role is its own process, started as `sluice <role> --config FILE`.
constexpr RoleSpec kRoles[] = {
    {"weightstore", "run the weight store (control plane: versions, holders, read plans)"},
    {"relay", "run a relay (holds versions in host memory, forwards and serves them)"},
    {"rollout", "run a rollout worker (generates trajectories, pulls new weights)"},
    {"rollout-manager", "run the rollout manager (prompts, heartbeats, repack)"},
    {"actor", "run the actor (trains on trajectories, publishes weight versions)"},
};

struct NoArgs {};

int run_version(const NoArgs&, const Context&) {
  auto b = core::build_info();
  std::printf("sluice %s\nprotocol %d\nucx %s\nzeromq %s\ncuda %s\nnccl %s\nsanitizer %s\n",
              b.version.c_str(), b.protocol_version, b.ucx_version.c_str(), b.zmq_version.c_str(),
              b.cuda ? "on" : "off", b.nccl ? "on" : "off", b.sanitizer.c_str());
  auto gpus = core::cuda_devices();
  std::printf("gpus %d%s\n", gpus.count,
              gpus.count == 0 ? (" (" + gpus.why_none + ")").c_str() : "");
  return 0;
}

void add_role(CLI::App& c, RoleArgs& a) {
  a.role = c.get_name();
  c.add_option("--config", a.config_path, "configuration file (JSON)")->check(CLI::ExistingFile);
  c.add_option("--set", a.overrides, "override a configuration value: --set a.b=c (repeatable)");
  c.add_flag("--print-config", a.print_config_only, "print the effective configuration and exit");
}

struct RunArgs {
  std::string job_path;
  std::string resume_dir;
  std::vector<std::string> overrides;
  std::string out;
  std::string add, remove;
  double remove_wait_s = 30;
};

void add_run(CLI::App& c, RunArgs& a) {
  c.add_option("job", a.job_path, "job file (JSON)");
  c.add_option("--resume", a.resume_dir,
               "continue the job of this run folder from its durable state (a job that was "
               "stopped, or whose launcher died)");
  c.add_option("--set", a.overrides, "override a job field: key=value (repeatable)");
  c.add_option("--out", a.out, "run folder (default runs/<name>-<time>)");
  c.add_option("--add", a.add,
               "ROLE[=N] (rollout or relay): start N more of ROLE for the job running from the "
               "run folder given as the job (sluice run --add rollout=4 RUN_DIR); stays in the "
               "foreground supervising them");
  c.add_option("--remove", a.remove,
               "rollout=N: ask the N newest rollouts of the run folder given as the job to leave "
               "(SIGTERM: they hand their work back)");
  c.add_option("--remove-wait", a.remove_wait_s, "--remove: seconds to wait for them to exit")
      ->capture_default_str();
}

// `sluice run`: a job from its file, a stopped job resumed, or a running job grown or shrunk.
int run_run(const RunArgs& a, const Context& ctx) {
  if (!a.add.empty() || !a.remove.empty()) {
    if (a.job_path.empty() || !a.resume_dir.empty() || !a.out.empty() ||
        (!a.add.empty() && !a.remove.empty())) {
      std::fprintf(stderr,
                   "sluice run: --add or --remove takes one run folder: sluice run --add "
                   "rollout=N RUN_DIR\n");
      return 2;
    }
    if (!a.remove.empty()) return run_remove(a.remove, a.job_path, a.remove_wait_s);
    return run_add(a.add, a.job_path, a.overrides, self_exe(), ctx.environment);
  }
  if (!a.resume_dir.empty()) {
    if (!a.job_path.empty() || !a.overrides.empty() || !a.out.empty()) {
      std::fprintf(stderr,
                   "sluice run: --resume takes the job from the run folder; give no job file, "
                   "--set or --out with it\n");
      return 2;
    }
    return resume_job(a.resume_dir, ctx.environment);
  }
  if (a.job_path.empty()) {
    std::fprintf(stderr, "sluice run: name a job file (or --resume RUN_DIR)\n");
    return 2;
  }
  return run_job(a.job_path, a.overrides, a.out, ctx.environment);
}

void add_replay(CLI::App& c, ReplayArgs& a) {
  c.add_option("run_dir", a.run_dir, "run folder of a finished job (sluice run)")->required();
  c.add_option("--record", a.record, "the batch record (default RUN_DIR/actor-batches.bin)");
  c.add_option("--set", a.overrides,
               "replay with another learner setting: --set correction=none (a field of "
               "actor.learner; repeatable); the steps are then not compared but evaluated");
  c.add_option("--eval-every", a.eval_every, "held-out evaluation every N steps (0: none)")
      ->capture_default_str();
  c.add_flag("--eval", a.eval, "held-out evaluation at the end (always with --set)");
  c.add_flag("--quiet", a.quiet, "print the summary only, not a line per step");
}

// How a tool authenticates: --keys DIR [--as IDENTITY], or --plain.
void add_auth(CLI::App& c, AuthArgs& auth) {
  c.add_option("--keys", auth.keys_dir,
               "the job's keys folder (sluice keys DIR, or RUN_DIR/keys of sluice run)");
  c.add_option("--as", auth.as, "the identity to act as, from the keys folder")
      ->capture_default_str();
  c.add_flag("--plain", auth.plain, "talk to a job in plain mode (no authentication)");
}

void add_publish(CLI::App& c, PublishArgs& a) {
  c.add_option("--store", a.store, "weight store endpoint")->capture_default_str();
  c.add_option("--safetensors", a.safetensors, "checkpoint file")->required();
  c.add_option("--model", a.model, "model name")->capture_default_str();
  c.add_option("--version", a.version, "version number")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size")->capture_default_str();
  c.add_option("--holder-id", a.holder_id,
               "holder id (default publish-PID; with curve IDENTITY-publish-PID: a holder id is "
               "the identity or IDENTITY-suffix)");
  add_auth(c, a.auth);
}

void add_pull(CLI::App& c, PullArgs& a) {
  c.add_option("--store", a.store, "weight store endpoint")->capture_default_str();
  c.add_option("--model", a.model, "model name")->capture_default_str();
  c.add_option("--version", a.version, "version (0: latest)")->capture_default_str();
  c.add_option("--out", a.out, "output file")->required();
  c.add_option("--timeout-ms", a.timeout_ms, "give up after this long")->capture_default_str();
  add_auth(c, a.auth);
}

void add_keys(CLI::App& c, KeysArgs& a) {
  c.add_option("dir", a.dir, "folder for the keys (created 0700)")->required();
  c.add_option("--relays", a.relays, "relay identities relay-0 ...")->capture_default_str();
  c.add_option("--rollouts", a.rollouts, "rollout identities rollout-0 ...")->capture_default_str();
}

void add_ping(CLI::App& c, PingArgs& a) {
  c.add_option("endpoint", a.endpoint, "e.g. tcp://127.0.0.1:5555")->required();
  c.add_option("--timeout-ms", a.timeout_ms, "give up after this long")->capture_default_str();
  c.add_option("--count", a.count, "number of pings")->capture_default_str();
  c.add_option("--peer", a.peer, "curve: the identity of the role pinged")->capture_default_str();
  a.auth.as = "operator";
  add_auth(c, a.auth);
}

void add_slurm(CLI::App& s, SlurmArgs& a) {
  s.add_option("job", a.job_path, "job file (JSON)")->required();
  s.add_option("--set", a.overrides, "override a job field: key=value (repeatable)");
  s.add_option("--out", a.out_dir,
               "run folder, on a file system every node sees (default runs/<name>-<time>)");
  s.add_option("--nodes", a.nodes,
               "nodes: the first runs the store, manager and actor, the others relays and "
               "rollouts")
      ->capture_default_str();
  s.add_option("--partition", a.partition, "Slurm partition (default: the cluster's)");
  s.add_option("--account", a.account, "Slurm account");
  s.add_option("--time", a.time, "Slurm time limit (default: the job's timeout_s plus 5 minutes)");
  s.add_option("--sbatch-arg", a.sbatch_args,
               "a further #SBATCH option, e.g. --sbatch-arg=--qos=high (repeatable)");
  s.add_option("--store-port", a.store_port, "the weight store's port on the first node")
      ->capture_default_str();
  s.add_option("--manager-port", a.manager_port, "the rollout manager's port on the first node")
      ->capture_default_str();
  s.add_flag("--submit", a.submit, "submit the batch script with sbatch");
  s.add_flag("--allow-plain-public", a.allow_plain_public,
             "allow auth plain although the store and the manager listen on every interface");
  s.add_flag("--wait", a.wait, "with --submit: wait for the Slurm job's end");
  s.add_option("--wait-timeout", a.wait_timeout_s,
               "with --wait: give up waiting after this many seconds (default: the job's "
               "timeout_s plus 300)");
}

void add_slurm_collect(CLI::App& c, SlurmCollectArgs& a) {
  c.add_option("run_dir", a.run_dir)->required();
  c.add_option("--manager", a.manager)->required();
  c.add_option("--actor-status", a.actor_status);
  c.add_option("--wall-s", a.wall_s);
  c.add_flag("--stopped", a.stopped);
}

void add_k8s(CLI::App& k, K8sArgs& a) {
  k.add_option("job", a.job_path, "job file (JSON)")->required();
  k.add_option("--set", a.overrides, "override a job field: key=value (repeatable)");
  k.add_option("--out", a.out_dir, "folder for the manifests")->required();
  k.add_option("--image", a.image, "container image with sluice on its PATH")
      ->capture_default_str();
  k.add_option("--namespace", a.name_space, "Kubernetes namespace")->capture_default_str();
  k.add_option("--pvc", a.pvc,
               "a ReadWriteMany PersistentVolumeClaim for the run folder (default: emptyDir)");
  k.add_option("--store-port", a.store_port, "the weight store's port")->capture_default_str();
  k.add_option("--manager-port", a.manager_port, "the rollout manager's port")
      ->capture_default_str();
  k.add_flag("--allow-plain-public", a.allow_plain_public,
             "allow auth plain although the store and the manager listen on every interface");
}

}  // namespace

std::vector<Subcommand> role_subcommands() {
  std::vector<Subcommand> t;
  t.push_back(subcommand<NoArgs>(
      "version", "print the version and what this build includes", [](CLI::App&, NoArgs&) {},
      run_version));
  for (const auto& r : kRoles)
    t.push_back(subcommand<RoleArgs>(r.name, r.help, add_role, with_env(run_role)));
  return t;
}

std::vector<Subcommand> job_subcommands() {
  return {subcommand<RunArgs>("run", "launch a whole job locally, every role a process", add_run,
                              run_run),
          subcommand<ReplayArgs>("replay",
                                 "reproduce a finished run's learner updates bit for bit from its "
                                 "run folder (or feed its batches to another learner setting)",
                                 add_replay, plain(run_replay))};
}

std::vector<Subcommand> tool_subcommands() {
  std::vector<Subcommand> t;
  t.push_back(subcommand<PublishArgs>(
      "publish", "publish a safetensors checkpoint as a weight version and serve it", add_publish,
      with_env(run_publish)));
  t.push_back(subcommand<PullArgs>("pull", "pull a weight version into a safetensors file",
                                   add_pull, with_env(run_pull)));
  t.push_back(subcommand<KeysArgs>(
      "keys", "make a job's CURVE keys: one key pair per identity (mode 0600) and members.json",
      add_keys, plain(run_keys)));
  t.push_back(subcommand<PingArgs>("ping", "check that a role's control endpoint answers", add_ping,
                                   plain(run_ping)));
  return t;
}

std::vector<Subcommand> cluster_subcommands() {
  std::vector<Subcommand> t;
  t.push_back(subcommand<SlurmArgs>(
      "slurm", "write a Slurm batch script and role files for a job (--submit: and submit it)",
      add_slurm, with_env(run_slurm)));
  t.push_back(subcommand<SlurmCollectArgs>("slurm-collect",
                                           "end a Slurm job's run folder (job.sbatch)",
                                           add_slurm_collect, plain(run_slurm_collect), true));
  t.push_back(subcommand<K8sArgs>("k8s",
                                  "write Kubernetes manifests for a job (JSON; kubectl apply -f "
                                  "DIR/)",
                                  add_k8s, plain(run_k8s)));
  return t;
}

}  // namespace sluice::cli
