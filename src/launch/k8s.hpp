// `sluice k8s JOB.json --out DIR`: Kubernetes manifests for a job (docs/clusters.md), made
// without a cluster. One file per role group, each a JSON `v1 List` (kubectl takes JSON as it
// takes YAML; JSON is what sluice writes everywhere else, with no second serializer):
//   00-config.json       ConfigMap NAME-config (every role's file) and Secret NAME-keys (the
//                        job's CURVE keys; each pod mounts only the keys its role needs), and
//                        with rollout.agent_listen Secret NAME-agent (the agent endpoint's token,
//                        mounted in the rollouts' pods only; DIR/agent_token holds it too, 0600)
//   10-weightstore.json  headless Service and StatefulSet (1 replica) of the weight store
//   20-manager.json      headless Service and StatefulSet (1 replica) of the rollout manager
//   30-relay.json        headless Service and StatefulSet (job.relays replicas; the ordinal picks
//                        relay-<i>.json)
//   40-rollout.json      Indexed Job (completions = parallelism = job.rollouts; the completion
//                        index picks rollout-<i>.json)
//   50-actor.json        Indexed Job of one: the job ends when it completes
// The roles reach the store and the manager by their Services' names; the run folder is
// /sluice/run in every pod (an emptyDir, or --pvc CLAIM shared by all pods: the manager's
// database and the actor's checkpoints survive a pod only on a volume). DIR also gets config/
// (the role files, as in the ConfigMap, and job.json, the effective job) and keys/.
//
// Thread safety: one thread.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct K8sArgs {
  std::string job_path;
  std::vector<std::string> overrides;  // --set key=value on the job
  std::string out_dir;                 // required
  std::string image = "sluice:latest";
  std::string name_space = "default";
  std::string pvc;  // a ReadWriteMany claim for /sluice/run (default: emptyDir per pod)
  int store_port = 5550;
  int manager_port = 5551;
  bool allow_plain_public = false;  // auth plain on 0.0.0.0 binds (refused without it)
};

// 0 written, 2 bad job or arguments, 1 the files could not be written.
int run_k8s(const K8sArgs& args);

}  // namespace sluice::cli
