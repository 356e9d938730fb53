// The bottom of the launcher: a job's configuration (JobConfig, its command roles), the job's
// identities, how a command-line tool authenticates, and each role's settings as every launcher
// writes them (its security section, a relay's and a rollout's section with id, key and host).
// One place, so that `sluice run`, `sluice run --add`, `sluice slurm` and `sluice k8s` give a role
// the same settings.
//
// Thread safety: plain structs and free functions without shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actor/trainer.hpp"
#include "core/status.hpp"
#include "launch/chaos_schedule.hpp"
#include "launch/emulated_hosts.hpp"
#include "launch/supervisor.hpp"
#include "relay/relay.hpp"
#include "rollout/manager.hpp"
#include "rollout/worker.hpp"
#include "weightstore/service.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

// A role played by a program of the user's instead of the built-in `sluice <role>` (a Python actor
// or generator, for example; docs/architecture.md, "Command roles"). The launcher runs
// `argv... --config FILE` in `workdir` (a job file's loader sets it to the job file's folder, so
// relative paths in argv and env are taken from there), under the same supervision as a
// built-in role. FILE is the role file the
// built-in role would get (its endpoints, id, security section with its own key file, model and
// options) plus `options`, passed through as given.
struct RoleCommand {
  std::vector<std::string> argv;  // the program and its first arguments (empty: the built-in role)
  std::vector<std::string> env;   // NAME=VALUE entries added to its environment
  nlohmann::ordered_json options = nlohmann::ordered_json::object();  // free-form, passed through
  std::string workdir;  // the program's working folder (empty: the launcher's)

  template <typename V>
  void describe(V& v) {
    v("argv", argv,
      "the program and its first arguments, run as ARGV... --config FILE in workdir; a name "
      "without '/' is looked up on PATH (default empty: the built-in role)");
    v("env", env, "NAME=VALUE entries added to the program's environment (default none)");
    v("options", options,
      "any JSON value, written to the program's role file as \"options\" (default {})");
    v("workdir", workdir,
      "the program's working folder; relative paths in argv and env are taken from it (default: "
      "the job file's folder; a relative one is taken from there)");
  }
  core::Status validate() const;
  bool enabled() const { return !argv.empty(); }
};

struct JobConfig {
  std::string name = "job";
  std::string mode;  // when set, overrides manager.mode
  // curve: the launcher makes the job's keys in RUN_DIR/keys (mode 0600) and gives each role its
  // key file and the members file; plain: no authentication, only when set here, and loud.
  std::string auth = "curve";
  // Chunk streams between hosts (core::TransferOptions::stream_encryption): auto (encrypted
  // between datacenters), on or off; given to every relay, rollout and actor whose own setting
  // is auto. on needs auth curve; with auth plain, auto means off (and warns once).
  std::string stream_encryption = "auto";
  std::uint32_t rollouts = 4;  // rollout processes
  std::uint32_t relays = 1;    // relay processes
  // Elastic fleets: identities (keys) are made up front for this many rollouts and relays, so
  // that `sluice run --add` can start more into the running job (0: rollouts / relays, none
  // spare). The store and the manager admit members only: a process without one of these keys is
  // refused however it joins.
  std::uint32_t max_rollouts = 0;
  std::uint32_t max_relays = 0;
  std::string log_level = "warn";              // of the roles (their logs go to the run folder)
  std::string metrics_listen = "127.0.0.1:0";  // every role's /metrics (empty: none)
  double timeout_s = 900;            // the job fails if the actor has not finished by then
  double progress_s = 1.0;           // live progress period (0: quiet)
  std::string out_dir;               // the run folder (default runs/<name>-<time>)
  double kill_rollout_after_s = 0;   // chaos: kill -9 one rollout after this long (0: never)
  double stop_rollout_after_s = 0;   // chaos: SIGSTOP one rollout (it stops heartbeats)
  double pause_manager_after_s = 0;  // chaos: SIGSTOP the rollout manager after this long,
  double pause_manager_for_s = 0;    // and SIGCONT it this much later (its replies time out)
  double duration_s = 0;             // stop the job after this long (0: run to its end)
  RestartConfig restart;             // supervision: restarts per role, backoff
  ChaosConfig chaos;                 // random kills (sluice chaos)
  EmulatedHostsConfig hosts;         // count > 0: roles on emulated hosts behind limited links
  weightstore::ServiceConfig store;
  relay::RelayConfig relay;
  rollout::ManagerConfig manager;
  rollout::RolloutConfig rollout;
  actor::TrainerConfig actor;
  RoleCommand actor_command;    // set: the actor is this program
  RoleCommand rollout_command;  // set: every rollout is this program

  template <typename V>
  void describe(V& v) {
    v("name", name, "job name (the run folder's prefix)");
    v("mode", mode,
      "sync, one-step-off, stream, partial-rollout or sluice (overrides manager.mode)");
    v("auth", auth,
      "control-plane authentication: curve (keys made in RUN_DIR/keys; default) or plain (none: "
      "anyone who reaches a port drives the roles; warns)");
    v("stream_encryption", stream_encryption,
      "chunk streams (TCP reads of weights between hosts): auto (encrypted and authenticated "
      "between datacenters; default), on (always; needs auth curve) or off");
    v("rollouts", rollouts, "rollout processes");
    v("relays", relays, "relay processes");
    v("max_rollouts", max_rollouts,
      "rollouts the job may grow to with sluice run --add (spare identities made up front; "
      "default 0: rollouts)");
    v("max_relays", max_relays,
      "relays the job may grow to with sluice run --add (default 0: relays)");
    v("log_level", log_level, "log level of the roles");
    v("metrics_listen", metrics_listen,
      "where every role serves GET /metrics (HOST:PORT, port 0: any free one; empty: none); the "
      "run folder's prometheus_targets.json lists them (default 127.0.0.1:0)");
    v("timeout_s", timeout_s, "fail when the job has not finished after this long");
    v("progress_s", progress_s, "live progress period in seconds (0: quiet)");
    v("out_dir", out_dir, "run folder (default runs/<name>-<time>)");
    v("kill_rollout_after_s", kill_rollout_after_s, "chaos: kill -9 one rollout after this long");
    v("stop_rollout_after_s", stop_rollout_after_s, "chaos: SIGSTOP one rollout after this long");
    v("pause_manager_after_s", pause_manager_after_s,
      "chaos: SIGSTOP the rollout manager after this long (0: never)");
    v("pause_manager_for_s", pause_manager_for_s, "chaos: then SIGCONT it this much later");
    v("duration_s", duration_s,
      "stop the job after this long and report what it trained (0: run to the job's end)");
    v("restart", restart, "supervision: restarts allowed per role and their backoff");
    v("chaos", chaos, "fault injection: SIGKILL random roles at random times");
    v("hosts", hosts,
      "emulated hosts: host 0 runs the store, manager and actor; each further host a relay and "
      "its share of the rollouts");
    v("store", store, "the weight store");
    v("relay", relay, "every relay");
    v("manager", manager, "the rollout manager");
    v("rollout", rollout, "every rollout");
    v("actor", actor, "the actor");
    v("actor_command", actor_command,
      "the actor as a program of yours (argv, env, options) instead of sluice actor; it gets the "
      "actor's role file and must keep the actor's contract (docs/architecture.md)");
    v("rollout_command", rollout_command,
      "every rollout as a program of yours (argv, env, options) instead of sluice rollout; each "
      "gets its rollout's role file and must keep the rollout's contract (docs/architecture.md)");
  }
  core::Status validate() const;
  // Each heartbeat or report interval is at most half the time-out another role judges it by.
  core::Status check_liveness_timing() const;
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

// The identities of a job with `relays` relays and `rollouts` rollouts, with their roles:
// weightstore, rollout-manager, actor, relay-<i>, rollout-<i>, operator (the launcher, tools).
std::vector<std::pair<std::string, std::string>> job_identities(std::uint32_t relays,
                                                                std::uint32_t rollouts);

// A role's security section: curve with its own key file in `keys_dir` and the members file, or
// plain when the job says so.
core::SecurityConfig role_security(const JobConfig& job, const std::string& keys_dir,
                                   const std::string& identity);
// The keys folder of a job run on this machine (sluice run, sluice run --add): RUN_DIR/keys of
// job.out_dir, absolute, as a command role runs in its own workdir.
std::string local_keys_dir(const JobConfig& job);

// Hosts 1..relay_hosts(job) hold the relays and the job's own rollouts; the rest, if any, are for
// joiners (EmulatedHostsConfig::joiner_hosts).
std::uint32_t relay_hosts(const JobConfig& job);
// Emulated host of rollout `index` and of relay `index` (0: none, every role on this host): in
// turn over the hosts with a relay, except that rollouts beyond the job's own (index >=
// job.rollouts, added with sluice run --add) go to the joiner hosts in turn when there are any.
std::uint32_t rollout_host(const JobConfig& job, std::uint32_t index);
std::uint32_t relay_host(const JobConfig& job, std::uint32_t index);

// Relay `index`'s and rollout `index`'s configuration as every launcher writes it: the job's
// section with its id, its security (key file in `keys_dir`) and, on emulated hosts, its host
// label (a rollout on a host with no relay reads a new version from the nearest holders at once
// instead of waiting local_wait_ms for one on its own host).
relay::RelayConfig relay_role_config(const JobConfig& job, std::uint32_t index,
                                     const std::string& keys_dir);
rollout::RolloutConfig rollout_role_config(const JobConfig& job, std::uint32_t index,
                                           const std::string& keys_dir);

}  // namespace sluice::cli
