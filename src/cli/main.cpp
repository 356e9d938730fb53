// The `sluice` executable: parses the command line, builds a configuration and calls a role's
// run(). Everything else lives in the component libraries.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "analysis/compare.hpp"
#include "bench/attack.hpp"
#include "bench/bench_broadcast.hpp"
#include "bench/bench_crossdc.hpp"
#include "bench/bench_delta.hpp"
#include "bench/bench_e2e.hpp"
#include "bench/bench_elastic.hpp"
#include "bench/bench_learner.hpp"
#include "bench/bench_util.hpp"
#include "bench/chaos.hpp"
#include "bench/simulate.hpp"
#include "bench/study.hpp"
#include "bench/transfer_cmds.hpp"
#include "core/build_info.hpp"
#include "core/cuda_device.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/transfer.hpp"
#include "launch/commands.hpp"
#include "launch/job_elastic.hpp"
#include "launch/slurm.hpp"
#include "launch/weights_cmds.hpp"

extern char** environ;

namespace {

using sluice::cli::RoleArgs;

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

std::vector<std::string> read_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    env.emplace_back(*e);
  return env;
}

// The environment as the user gave it, before sluice's UCX defaults were added.
const std::vector<std::string>& environment() {
  static const std::vector<std::string> env = read_environment();
  return env;
}

// How a tool authenticates: --keys DIR [--as IDENTITY], or --plain.
void add_auth(CLI::App* cmd, sluice::cli::AuthArgs& auth) {
  cmd->add_option("--keys", auth.keys_dir,
                  "the job's keys folder (sluice keys DIR, or RUN_DIR/keys of sluice run)");
  cmd->add_option("--as", auth.as, "the identity to act as, from the keys folder")
      ->capture_default_str();
  cmd->add_flag("--plain", auth.plain, "talk to a job in plain mode (no authentication)");
}

// --rounds of a bench: how many times each row runs, 1 to 20.
void add_rounds(CLI::App* bench, std::uint32_t& rounds, const std::string& what) {
  bench->add_option("--rounds", rounds, what)->capture_default_str()->check(CLI::Range(1u, 20u));
}

}  // namespace

int main(int argc, char** argv) {
  // A sluice process started by another (a bench, a test, the job launcher) ends with it.
  sluice::core::die_with_parent(environment());
  CLI::App app{"sluice: asynchronous RL post-training runtime (weights out, trajectories in)",
               "sluice"};
  app.require_subcommand(1);
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  app.add_subcommand("version", "print the version and what this build includes");

  std::vector<RoleArgs> role_args(std::size(kRoles));
  std::vector<CLI::App*> role_cmds;
  for (std::size_t i = 0; i < std::size(kRoles); ++i) {
    auto* cmd = app.add_subcommand(kRoles[i].name, kRoles[i].help);
    cmd->add_option("--config", role_args[i].config_path, "configuration file (JSON)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--set", role_args[i].overrides,
                    "override a configuration value: --set a.b=c (repeatable)");
    cmd->add_flag("--print-config", role_args[i].print_config_only,
                  "print the effective configuration and exit");
    role_args[i].role = kRoles[i].name;
    role_cmds.push_back(cmd);
  }

  std::string job_path;
  auto* run_cmd = app.add_subcommand("run", "launch a whole job locally, every role a process");
  std::string resume_dir;
  run_cmd->add_option("job", job_path, "job file (JSON)");
  run_cmd->add_option("--resume", resume_dir,
                      "continue the job of this run folder from its durable state (a job that "
                      "was stopped, or whose launcher died)");
  std::vector<std::string> run_overrides;
  run_cmd->add_option("--set", run_overrides, "override a job field: key=value (repeatable)");
  std::string run_out;
  run_cmd->add_option("--out", run_out, "run folder (default runs/<name>-<time>)");
  std::string run_add, run_remove;
  double remove_wait_s = 30;
  run_cmd->add_option("--add", run_add,
                      "ROLE[=N] (rollout or relay): start N more of ROLE for the job running from "
                      "the run folder given as the job (sluice run --add rollout=4 RUN_DIR); stays "
                      "in the foreground supervising them");
  run_cmd->add_option("--remove", run_remove,
                      "rollout=N: ask the N newest rollouts of the run folder given as the job to "
                      "leave (SIGTERM: they hand their work back)");
  run_cmd->add_option("--remove-wait", remove_wait_s, "--remove: seconds to wait for them to exit")
      ->capture_default_str();

  sluice::cli::ChaosArgs ca;
  auto* chaos_cmd = app.add_subcommand(
      "chaos", "run a job with random kill -9s of its roles, check nothing was lost or doubled");
  chaos_cmd->add_option("job", ca.job_path, "job file (JSON)")->required();
  chaos_cmd->add_option("--kills", ca.kills, "SIGKILLs over the job")->capture_default_str();
  chaos_cmd->add_option("--roles", ca.roles,
                        "comma-separated roles that may be killed (default: all)");
  chaos_cmd->add_option("--every", ca.every_s,
                        "one kill every this many seconds (default: at random times)");
  chaos_cmd->add_option("--seed", ca.seed, "seed of kill times and targets (default: printed)");
  chaos_cmd->add_option("--duration", ca.duration_s,
                        "stop both runs after this many seconds and compare trained tokens");
  chaos_cmd
      ->add_option("--min-token-ratio", ca.min_token_ratio,
                   "with --duration: fail when trained tokens with kills / without is below this "
                   "(default 0.95)")
      ->check(CLI::Range(0.0, 10.0));
  chaos_cmd->add_flag("!--no-baseline", ca.baseline, "skip the run without faults");
  chaos_cmd->add_option("--set", ca.overrides, "override a job field: key=value (repeatable)");
  chaos_cmd->add_option("--out", ca.out_dir, "folder for both run folders");
  chaos_cmd->add_flag("--json", ca.json, "one JSON object with every figure");

  sluice::cli::AttackArgs aa;
  auto* attack_cmd = app.add_subcommand(
      "attack", "play known attacks against a running job (its run folder); exit 1 on a breach");
  attack_cmd->add_option("run_dir", aa.run_dir, "run folder of a running job (sluice run --out)")
      ->required();
  attack_cmd->add_option("--wait-ms", aa.wait_ms, "how long a refused request is waited for")
      ->capture_default_str()
      ->check(CLI::Range(100u, 60000u));
  attack_cmd
      ->add_option("--idle-connections", aa.idle_connections,
                   "idle connections held open against each chunk server")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));

  std::vector<std::string> compare_dirs;
  double compare_within = 5.0;
  auto* compare_cmd = app.add_subcommand(
      "compare", "two run folders of one job side by side: held-out accuracy at equal samples");
  compare_cmd->add_option("runs", compare_dirs, "two run folders (sluice run --out DIR)")
      ->required()
      ->expected(2);
  compare_cmd
      ->add_option("--within", compare_within, "accuracy gap, in points, that counts as comparable")
      ->capture_default_str();

  sluice::cli::SimulateArgs sa;
  auto* simulate_cmd = app.add_subcommand(
      "simulate", "a job in simulated time, every mode side by side (the real manager code)");
  simulate_cmd->add_option("jobs", sa.jobs,
                           "job file (JOB.json) with an optional simulate section; with --scale "
                           "any number (default: examples/scale's three)");
  simulate_cmd->add_flag("--scale", sa.scale,
                         "every mode on each job, one table of sluice against every baseline");
  simulate_cmd->add_flag("--validate", sa.validate,
                         "simulate bench e2e's configurations and set them beside measured runs");
  simulate_cmd->add_option("--measured", sa.measured,
                           "--validate: bench e2e --json output of the one-host run (else run it)");
  simulate_cmd->add_option(
      "--measured-hosts", sa.measured_hosts,
      "--validate: bench e2e --json output of the four-emulated-host run (else run it as root)");
  simulate_cmd->add_flag("--update-only", sa.update_only,
                         "print the weight-movement model's time for one update of JOB's model");
  simulate_cmd->add_option("--modes", sa.modes, "comma-separated modes")->capture_default_str();
  simulate_cmd->add_option("--splits", sa.splits,
                           "--scale: trainer shares of the cluster's GPUs to run each mode at, "
                           "comma-separated, each in (0, 1) (e.g. 0.125,0.25,0.375,0.5); each "
                           "mode is reported at its best");
  simulate_cmd->add_option("--set", sa.overrides, "override a job field: key=value");
  simulate_cmd->add_flag("--json", sa.json, "one JSON object per mode");
  simulate_cmd->add_flag("--repack-bench", sa.repack_bench,
                         "repack on against off on several length distributions");
  simulate_cmd->add_option("--lengths", sa.lengths,
                           "--repack-bench: also a length file (one length per line)");
  simulate_cmd
      ->add_option("--spreads", sa.spreads,
                   "--repack-bench: lognormal p99/median ratios at the job's median")
      ->delimiter(',')
      ->capture_default_str();

  auto* bench_cmd = app.add_subcommand("bench", "measure and print side-by-side tables");
  bench_cmd->require_subcommand(1);
  sluice::cli::BenchTransferArgs bt;
  auto* bench_transfer = bench_cmd->add_subcommand(
      "transfer", "one-sided chunked reads between processes, against ucx_perftest");
  bench_transfer
      ->add_option("--transport", bt.transports,
                   "comma-separated: tcp (chunk streams), tcp-ucx (UCX GET), sm")
      ->capture_default_str();
  bench_transfer->add_option("--size", bt.size, "bytes to move (e.g. 1GiB)")->capture_default_str();
  bench_transfer->add_option("--chunk", bt.chunk, "chunk size (e.g. 8MiB)")->capture_default_str();
  bench_transfer->add_option("--in-flight", bt.in_flight, "GETs in flight per source")
      ->capture_default_str();
  bench_transfer->add_option("--sources", bt.sources, "1, or 2 to compare one against two")
      ->capture_default_str();
  bench_transfer->add_option(
      "--link-rate", bt.link_rate,
      "put sources in emulated hosts behind links of this rate (tc, e.g. 1gbit)");
  bench_transfer->add_flag("--json", bt.json, "one JSON object per row");
  bench_transfer
      ->add_option("--memory", bt.memory,
                   "host, or cuda: pull into GPU memory beside the link and the host-to-device "
                   "copy (exits 77 without a GPU)")
      ->capture_default_str();
  bench_transfer->add_flag("--fanout", bt.fanout,
                           "with --memory cuda: NCCL fan-out to the host's other GPUs");
  bench_transfer
      ->add_option("--encryption", bt.encryption,
                   "chunk streams on tcp: off, on, or off,on for both side by side (with the "
                   "encrypted/clear ratio and CPU seconds per GiB)")
      ->capture_default_str();

  sluice::cli::BenchCrossdcArgs bc;
  auto bench_crossdc = sluice::cli::add_bench_crossdc(*bench_cmd, bc);

  sluice::cli::BenchBroadcastArgs bb;
  auto* bench_broadcast = bench_cmd->add_subcommand(
      "broadcast", "time until N relays in emulated hosts hold a version: chain, tree, direct");
  bench_broadcast->add_option("--relays", bb.relays, "relays (N)")->capture_default_str();
  bench_broadcast->add_option("--size", bb.size, "version size")->capture_default_str();
  bench_broadcast->add_option("--chunk", bb.chunk, "chunk size")->capture_default_str();
  bench_broadcast->add_option("--link-rate", bb.link_rate, "rate of every host's link (tc)")
      ->capture_default_str();
  bench_broadcast
      ->add_option("--link-latency", bb.link_latency,
                   "longest a packet may queue on a link (tc tbf latency; default: "
                   "scripts/emuhosts.sh's)")
      ->capture_default_str();
  bench_broadcast->add_option("--designs", bb.designs, "chain, tree, direct")
      ->capture_default_str();
  bench_broadcast->add_option("--fanout", bb.fanout, "children per relay in the tree")
      ->capture_default_str();
  bench_broadcast->add_flag("--json", bb.json, "one JSON object per row");
  sluice::cli::BenchE2eArgs be;
  auto* bench_e2e = bench_cmd->add_subcommand(
      "e2e", "one workload in every mode (sync ... sluice) as real processes, side by side");
  bench_e2e->add_option("--modes", be.modes, "comma-separated modes")->capture_default_str();
  bench_e2e->add_option("--workload", be.workload, "job file whose fields replace the defaults");
  bench_e2e->add_option("--set", be.overrides, "override a workload field: key=value");
  bench_e2e->add_option("--rollouts", be.rollouts, "rollouts (default: the workload's, 16)");
  bench_e2e->add_option("--prompts", be.prompts, "prompts per mode (default: the workload's)");
  add_rounds(bench_e2e, be.rounds,
             "run every mode this many times in turn; report each mode's median round");
  bench_e2e->add_flag("--compare-auth", be.compare_auth,
                      "also run each mode with the control plane in plain mode (MODE+plain) and "
                      "print authenticated / plain throughput");
  bench_e2e->add_flag("--json", be.json, "one JSON object per mode");
  bench_e2e->add_flag("--repack-bench", be.repack_bench,
                      "sluice against sluice-norepack on the job's lengths, lognormal p99/median "
                      "5, 10 and 20, and each --lengths file, interleaved every round");
  bench_e2e->add_option("--lengths", be.lengths,
                        "--repack-bench: also a length file (one length per line)");
  bench_e2e
      ->add_option("--spreads", be.spreads,
                   "--repack-bench: lognormal p99/median ratios at the job's median")
      ->delimiter(',')
      ->capture_default_str();
  sluice::cli::BenchLearnerArgs bl;
  sluice::cli::BenchElasticArgs bel;
  auto* bench_elastic = bench_cmd->add_subcommand(
      "elastic",
      "scale a running job 2 -> 8 -> 3 rollouts on emulated hosts: join times, "
      "many holders against the trainer's copy, exactly-once, each figure with the CPU busy");
  bench_elastic
      ->add_option("--hosts", bel.hosts,
                   "emulated hosts with a relay (each joiner gets a host of its own besides)")
      ->capture_default_str();
  bench_elastic->add_option("--link-rate", bel.link_rate, "every host's link (tc)")
      ->capture_default_str();
  bench_elastic
      ->add_option("--trainer-link-rate", bel.trainer_link_rate,
                   "host 0's link (store, manager, actor): a rate, none (not limited) or empty "
                   "(--link-rate)")
      ->capture_default_str();
  bench_elastic->add_option("--size", bel.size, "weight version size")->capture_default_str();
  bench_elastic->add_option("--steps", bel.steps, "rollouts: FROM,PEAK,TO")->capture_default_str();
  bench_elastic->add_option("--designs", bel.designs, "many, trainer")->capture_default_str();
  bench_elastic->add_option("--prompts", bel.prompts, "prompts in the job")->capture_default_str();
  bench_elastic->add_option("--out", bel.out_dir, "folder for the run folders");
  bench_elastic->add_flag("--json", bel.json, "one JSON object per design, then the ratio");

  auto* bench_learner = bench_cmd->add_subcommand(
      "learner", "variants of the RL learner side by side: on-policy updates in one process");
  bench_learner->add_option("job", bl.job, "job file (actor.policy gpt)")->required();
  bench_learner->add_option("--set", bl.overrides, "override a job field on every variant");
  bench_learner->add_option("--variant", bl.variants,
                            "'LABEL: key=value ...', job fields that this variant changes "
                            "(repeatable; the job as given is the first row)");
  bench_learner->add_option("--updates", bl.updates,
                            "updates per variant (default: manager.prompts / prompts per batch)");
  bench_learner->add_option("--eval-every", bl.eval_every,
                            "held-out evaluation every N updates (default: actor.eval_every)");
  add_rounds(bench_learner, bl.rounds,
             "run every variant this many times with other samples; report the median");
  bench_learner->add_flag("--json", bl.json, "one JSON object per variant");
  auto* study_cmd = app.add_subcommand("study", "learning studies, run in one process");
  study_cmd->require_subcommand(1);
  sluice::cli::StudyArgs sta;
  sta.lags = {"0", "2", "4", "8", "16"};
  sta.corrections = {"none", "behaviour-cap", "m2po"};
  auto* study_staleness = study_cmd->add_subcommand(
      "staleness",
      "held-out accuracy against trained samples when generation lags the newest weights by a "
      "chosen number of versions, per correction of stale samples, against sync");
  study_staleness->add_option("job", sta.job, "job file (actor.policy gpt)")->required();
  study_staleness->add_option("--lags", sta.lags, "versions behind the newest, 0..64 (0: sync)")
      ->delimiter(',')
      ->capture_default_str();
  study_staleness
      ->add_option("--corrections", sta.corrections,
                   "corrections of stale samples: none, behaviour-cap, m2po")
      ->delimiter(',')
      ->capture_default_str();
  study_staleness->add_option("--seeds", sta.seeds, "seeds per setting, 1..16 (prompts and RNG)")
      ->capture_default_str();
  study_staleness->add_option(
      "--updates", sta.updates,
      "updates per run (default: the job's, manager.prompts / prompts per batch)");
  study_staleness->add_option("--every", sta.every,
                              "held-out evaluation every N updates (default: actor.eval_every)");
  study_staleness->add_option("--out", sta.out,
                              "output folder (default runs/study-staleness-<time>-<pid>)");
  study_staleness->add_option("--set", sta.overrides, "override a job field: key=value");
  study_staleness->add_option("--jobs", sta.jobs, "runs at a time, on threads (1..64)")
      ->capture_default_str();
  study_staleness->add_option("--replot", sta.replot,
                              "run nothing: redraw the table, page and figure in this study "
                              "folder from its results.json (give the study's flags)");
  sluice::cli::BenchDeltaArgs bd;
  auto* bench_delta = bench_cmd->add_subcommand(
      "delta", "bit-exact deltas between consecutive versions: synthetic and the real job's");
  bench_delta->add_option("--size", bd.size, "synthetic version size")->capture_default_str();
  bench_delta->add_option("--chunk", bd.chunk, "synthetic versions' chunk size")
      ->capture_default_str();
  bench_delta->add_option("--rates", bd.rates, "fractions of elements changed (synthetic)")
      ->delimiter(',')
      ->capture_default_str();
  bench_delta->add_option("--job", bd.job,
                          "job whose actor's consecutive versions are measured (default "
                          "examples/grpo_arith.json; none: skip)");
  bench_delta->add_option("--set", bd.overrides, "override a field of that job");
  bench_delta->add_option("--updates", bd.updates, "the job's consecutive version pairs")
      ->capture_default_str();
  bench_delta->add_option("--level", bd.level, "zstd level")->capture_default_str();
  bench_delta
      ->add_option("--dtype", bd.dtype,
                   "dtype of the job's versions: f32 (as held) or bf16 (rounded, as published "
                   "with actor.publish_dtype bf16)")
      ->capture_default_str();
  bench_delta->add_option("--save-versions", bd.save_versions,
                          "write each of the job's versions here (v<N>.bin: its bytes), for "
                          "`bench crossdc --versions-dir`");
  bench_delta->add_flag("--json", bd.json, "one JSON object per row");
  auto* bench_broadcast_run = bench_cmd->add_subcommand("broadcast-run", "one broadcast run");
  bench_broadcast_run->group("");
  bench_broadcast_run->add_option("--design", bb.design);
  bench_broadcast_run->add_option("--relays", bb.relays);
  bench_broadcast_run->add_option("--size", bb.size);
  bench_broadcast_run->add_option("--chunk", bb.chunk);
  bench_broadcast_run->add_option("--fanout", bb.fanout);
  bench_broadcast_run->add_option("--emuhosts", bb.emuhosts);
  bench_broadcast_run->add_option("--prefix", bb.prefix);

  // Processes that benches and tests start; not meant to be typed by hand.
  sluice::cli::TransferSourceArgs ts;
  auto* source_cmd = app.add_subcommand("transfer-source", "serve a region of test data");
  source_cmd->group("");
  source_cmd->add_option("--listen", ts.listen, "control endpoint")->capture_default_str();
  source_cmd->add_option("--bytes", ts.bytes, "region size")->capture_default_str();
  source_cmd->add_option("--chunk", ts.chunk, "chunk size")->capture_default_str();
  source_cmd->add_option("--name", ts.name, "region name")->capture_default_str();
  source_cmd->add_option("--seed", ts.seed, "data pattern seed")->capture_default_str();
  source_cmd->add_option("--corrupt-chunk", ts.corrupt_chunk,
                         "fault injection: corrupt this chunk after checksumming");
  source_cmd->add_flag("--ucx-get", ts.ucx_get, "serve tcp readers through UCX's GET, no stream");
  source_cmd->add_option("--keys", ts.keys, "job keys folder (its actor key): streams may encrypt");
  source_cmd->add_option("--encryption", ts.encryption, "chunk streams: auto, on or off");
  sluice::cli::TransferReadArgs tr;
  auto* read_cmd = app.add_subcommand("transfer-read", "read a region from sources, print JSON");
  read_cmd->group("");
  read_cmd->add_option("--from", tr.from, "control endpoints of the sources")->required();
  read_cmd->add_option("--name", tr.name, "region name")->capture_default_str();
  read_cmd->add_option("--in-flight", tr.in_flight, "GETs in flight per source");
  read_cmd->add_option("--timeout-ms", tr.timeout_ms, "whole read");
  read_cmd->add_option("--op-timeout-ms", tr.op_timeout_ms, "one GET");
  read_cmd->add_option("--verify-seed", tr.verify_seed, "compare with the seeded pattern");
  read_cmd->add_flag("!--no-warmup", tr.warmup, "skip the one-chunk warm-up read");
  read_cmd->add_option("--repeat", tr.repeat, "timed reads of the whole region");
  read_cmd->add_flag("--ucx-get", tr.ucx_get, "read over UCX's GET, not a chunk stream");
  read_cmd->add_option("--memory", tr.memory, "host, or cuda: also pull into GPU memory");
  read_cmd->add_option("--device-path", tr.device_path, "with cuda: auto, staged or direct");
  read_cmd->add_flag("--fanout", tr.fanout, "with cuda: NCCL fan-out to the other GPUs");
  read_cmd->add_option("--keys", tr.keys,
                       "job keys folder (its rollout-0 key): streams may encrypt");
  read_cmd->add_option("--encryption", tr.encryption, "chunk streams: auto, on or off");

  sluice::cli::PublishArgs pub;
  auto* publish_cmd = app.add_subcommand(
      "publish", "publish a safetensors checkpoint as a weight version and serve it");
  publish_cmd->add_option("--store", pub.store, "weight store endpoint")->capture_default_str();
  publish_cmd->add_option("--safetensors", pub.safetensors, "checkpoint file")->required();
  publish_cmd->add_option("--model", pub.model, "model name")->capture_default_str();
  publish_cmd->add_option("--version", pub.version, "version number")->capture_default_str();
  publish_cmd->add_option("--chunk", pub.chunk, "chunk size")->capture_default_str();
  publish_cmd->add_option("--holder-id", pub.holder_id, "holder name (default publish-PID)");
  sluice::cli::PullArgs pl;
  auto* pull_cmd = app.add_subcommand("pull", "pull a weight version into a safetensors file");
  pull_cmd->add_option("--store", pl.store, "weight store endpoint")->capture_default_str();
  pull_cmd->add_option("--model", pl.model, "model name")->capture_default_str();
  pull_cmd->add_option("--version", pl.version, "version (0: latest)")->capture_default_str();
  pull_cmd->add_option("--out", pl.out, "output file")->required();
  pull_cmd->add_option("--timeout-ms", pl.timeout_ms, "give up after this long")
      ->capture_default_str();
  add_auth(publish_cmd, pub.auth);
  add_auth(pull_cmd, pl.auth);

  sluice::cli::KeysArgs keys;
  auto* keys_cmd = app.add_subcommand(
      "keys", "make a job's CURVE keys: one key pair per identity (mode 0600) and members.json");
  keys_cmd->add_option("dir", keys.dir, "folder for the keys (created 0700)")->required();
  keys_cmd->add_option("--relays", keys.relays, "relay identities relay-0 ...")
      ->capture_default_str();
  keys_cmd->add_option("--rollouts", keys.rollouts, "rollout identities rollout-0 ...")
      ->capture_default_str();

  sluice::cli::PingArgs ping;
  auto* ping_cmd = app.add_subcommand("ping", "check that a role's control endpoint answers");
  ping_cmd->add_option("endpoint", ping.endpoint, "e.g. tcp://127.0.0.1:5555")->required();
  ping_cmd->add_option("--timeout-ms", ping.timeout_ms, "give up after this long")
      ->capture_default_str();
  ping_cmd->add_option("--count", ping.count, "number of pings")->capture_default_str();
  ping_cmd->add_option("--peer", ping.peer, "curve: the identity of the role pinged")
      ->capture_default_str();
  ping.auth.as = "operator";
  add_auth(ping_cmd, ping.auth);

  sluice::cli::ClusterCommands cluster;
  sluice::cli::add_cluster_commands(app, cluster);

  // A clearer message than CLI11's "arguments were not expected" for a misspelt subcommand.
  if (argc > 1 && argv[1][0] != '-') {
    std::string first = argv[1];
    bool known = false;
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == first;
    }
    if (!known) {
      std::fprintf(stderr, "sluice: unknown subcommand '%s' (see 'sluice --help')\n",
                   first.c_str());
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // UCX reads its settings from the environment: sluice's measured defaults go there, before
  // any UCX context exists, for what the user has not set (and never over what they set). Only
  // the --ucx-get commands give UCX tcp to use; everything else reads tcp over chunk streams.
  const bool ucx_tcp = (app.got_subcommand("transfer-source") && ts.ucx_get) ||
                       (app.got_subcommand("transfer-read") && tr.ucx_get);
  for (const auto& [var, value] : sluice::core::ucx_env_defaults(environment(), ucx_tcp)) {
    ::setenv(var.c_str(), value.c_str(), 0);
  }

  auto level = sluice::core::log::parse_level(log_level);
  if (!level.is_ok()) {
    std::fprintf(stderr, "sluice: %s\n", level.status().to_string().c_str());
    return 2;
  }
  sluice::core::log::set_level(*level);

  if (app.got_subcommand("version")) {
    auto b = sluice::core::build_info();
    std::printf("sluice %s\nprotocol %d\nucx %s\nzeromq %s\ncuda %s\nnccl %s\nsanitizer %s\n",
                b.version.c_str(), b.protocol_version, b.ucx_version.c_str(), b.zmq_version.c_str(),
                b.cuda ? "on" : "off", b.nccl ? "on" : "off", b.sanitizer.c_str());
    auto gpus = sluice::core::cuda_devices();
    std::printf("gpus %d%s\n", gpus.count,
                gpus.count == 0 ? (" (" + gpus.why_none + ")").c_str() : "");
    return 0;
  }
  for (std::size_t i = 0; i < role_cmds.size(); ++i) {
    if (role_cmds[i]->parsed()) return sluice::cli::run_role(role_args[i], environment());
  }
  if (run_cmd->parsed() && (!run_add.empty() || !run_remove.empty())) {
    if (job_path.empty() || !resume_dir.empty() || !run_out.empty() ||
        (!run_add.empty() && !run_remove.empty())) {
      std::fprintf(stderr,
                   "sluice run: --add or --remove takes one run folder: sluice run --add "
                   "rollout=N RUN_DIR\n");
      return 2;
    }
    if (!run_remove.empty()) return sluice::cli::run_remove(run_remove, job_path, remove_wait_s);
    return sluice::cli::run_add(run_add, job_path, run_overrides, sluice::cli::self_exe(),
                                environment());
  }
  if (run_cmd->parsed()) {
    if (!resume_dir.empty()) {
      if (!job_path.empty() || !run_overrides.empty() || !run_out.empty()) {
        std::fprintf(stderr,
                     "sluice run: --resume takes the job from the run folder; give no "
                     "job file, --set or --out with it\n");
        return 2;
      }
      return sluice::cli::resume_job(resume_dir, environment());
    }
    if (job_path.empty()) {
      std::fprintf(stderr, "sluice run: name a job file (or --resume RUN_DIR)\n");
      return 2;
    }
    return sluice::cli::run_job(job_path, run_overrides, run_out, environment());
  }
  if (int rc = sluice::cli::run_cluster_command(cluster, environment()); rc >= 0) return rc;
  if (chaos_cmd->parsed()) {
    return sluice::cli::run_chaos(ca, sluice::cli::self_exe(), environment());
  }
  if (attack_cmd->parsed()) return sluice::cli::run_attack(aa);
  if (compare_cmd->parsed()) {
    return sluice::cli::run_compare(compare_dirs[0], compare_dirs[1], compare_within);
  }
  if (simulate_cmd->parsed()) return sluice::cli::run_simulate(sa);
  if (bench_e2e->parsed()) return sluice::cli::run_bench_e2e(be, environment());
  if (bench_elastic->parsed()) return sluice::cli::run_bench_elastic(bel, environment());
  if (bench_learner->parsed()) return sluice::cli::run_bench_learner(bl);
  if (study_staleness->parsed()) return sluice::cli::run_study_staleness(sta);
  if (bench_delta->parsed()) return sluice::cli::run_bench_delta(bd);
  if (bench_transfer->parsed()) return sluice::cli::run_bench_transfer(bt, environment());
  if (int rc = sluice::cli::run_bench_crossdc(bench_crossdc, bc, environment()); rc >= 0) return rc;
  if (bench_broadcast->parsed()) return sluice::cli::run_bench_broadcast(bb, environment());
  if (bench_broadcast_run->parsed()) {
    return sluice::cli::run_bench_broadcast_inside(bb, environment());
  }
  if (source_cmd->parsed()) return sluice::cli::run_transfer_source(ts, environment());
  if (read_cmd->parsed()) return sluice::cli::run_transfer_read(tr, environment());
  if (ping_cmd->parsed()) return sluice::cli::run_ping(ping);
  if (keys_cmd->parsed()) return sluice::cli::run_keys(keys);
  if (publish_cmd->parsed()) return sluice::cli::run_publish(pub, environment());
  if (pull_cmd->parsed()) return sluice::cli::run_pull(pl, environment());
  return 2;
}
