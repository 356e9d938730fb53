// The command line of `sluice slurm`, `sluice slurm-collect` and `sluice k8s`.
#include <CLI/CLI.hpp>

#include "launch/slurm.hpp"

namespace sluice::cli {

void add_cluster_commands(CLI::App& app, ClusterCommands& c) {
  auto* s = app.add_subcommand(
      "slurm", "write a Slurm batch script and role files for a job (--submit: and submit it)");
  c.slurm_cmd = s;
  s->add_option("job", c.slurm.job_path, "job file (JSON)")->required();
  s->add_option("--set", c.slurm.overrides, "override a job field: key=value (repeatable)");
  s->add_option("--out", c.slurm.out_dir,
                "run folder, on a file system every node sees (default runs/<name>-<time>)");
  s->add_option("--nodes", c.slurm.nodes,
                "nodes: the first runs the store, manager and actor, the others relays and "
                "rollouts")
      ->capture_default_str();
  s->add_option("--partition", c.slurm.partition, "Slurm partition (default: the cluster's)");
  s->add_option("--account", c.slurm.account, "Slurm account");
  s->add_option("--time", c.slurm.time,
                "Slurm time limit (default: the job's timeout_s plus 5 minutes)");
  s->add_option("--sbatch-arg", c.slurm.sbatch_args,
                "a further #SBATCH option, e.g. --sbatch-arg=--qos=high (repeatable)");
  s->add_option("--store-port", c.slurm.store_port, "the weight store's port on the first node")
      ->capture_default_str();
  s->add_option("--manager-port", c.slurm.manager_port,
                "the rollout manager's port on the first node")
      ->capture_default_str();
  s->add_flag("--submit", c.slurm.submit, "submit the batch script with sbatch");
  s->add_flag("--allow-plain-public", c.slurm.allow_plain_public,
              "allow auth plain although the store and the manager listen on every interface");
  s->add_flag("--wait", c.slurm.wait, "with --submit: wait for the Slurm job's end");
  s->add_option("--wait-timeout", c.slurm.wait_timeout_s,
                "with --wait: give up waiting after this many seconds (default: the job's "
                "timeout_s plus 300)");

  auto* col = app.add_subcommand("slurm-collect", "end a Slurm job's run folder (job.sbatch)");
  c.collect_cmd = col;
  col->group("");
  col->add_option("run_dir", c.collect.run_dir)->required();
  col->add_option("--manager", c.collect.manager)->required();
  col->add_option("--actor-status", c.collect.actor_status);
  col->add_option("--wall-s", c.collect.wall_s);
  col->add_flag("--stopped", c.collect.stopped);

  auto* k = app.add_subcommand(
      "k8s", "write Kubernetes manifests for a job (JSON; kubectl apply -f DIR/)");
  c.k8s_cmd = k;
  k->add_option("job", c.k8s.job_path, "job file (JSON)")->required();
  k->add_option("--set", c.k8s.overrides, "override a job field: key=value (repeatable)");
  k->add_option("--out", c.k8s.out_dir, "folder for the manifests")->required();
  k->add_option("--image", c.k8s.image, "container image with sluice on its PATH")
      ->capture_default_str();
  k->add_option("--namespace", c.k8s.name_space, "Kubernetes namespace")->capture_default_str();
  k->add_option("--pvc", c.k8s.pvc,
                "a ReadWriteMany PersistentVolumeClaim for the run folder (default: emptyDir)");
  k->add_option("--store-port", c.k8s.store_port, "the weight store's port")->capture_default_str();
  k->add_option("--manager-port", c.k8s.manager_port, "the rollout manager's port")
      ->capture_default_str();
  k->add_flag("--allow-plain-public", c.k8s.allow_plain_public,
              "allow auth plain although the store and the manager listen on every interface");
}

int run_cluster_command(const ClusterCommands& c, const std::vector<std::string>& environment) {
  if (c.slurm_cmd->parsed()) return run_slurm(c.slurm, environment);
  if (c.collect_cmd->parsed()) return run_slurm_collect(c.collect);
  if (c.k8s_cmd->parsed()) return run_k8s(c.k8s);
  return -1;
}

}  // namespace sluice::cli
