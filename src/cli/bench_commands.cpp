// The command line of the bench, fault-injection and analysis front ends (src/bench,
// src/analysis): each subcommand's options, bound to its library's Args, and its run.
#include <CLI/CLI.hpp>

#include "analysis/compare.hpp"
#include "bench/attack.hpp"
#include "bench/bench_broadcast.hpp"
#include "bench/bench_crossdc.hpp"
#include "bench/bench_delta.hpp"
#include "bench/bench_digest.hpp"
#include "bench/bench_e2e.hpp"
#include "bench/bench_elastic.hpp"
#include "bench/bench_learner.hpp"
#include "bench/chaos.hpp"
#include "bench/simulate.hpp"
#include "bench/study.hpp"
#include "bench/study_schedule.hpp"
#include "bench/transfer_cmds.hpp"
#include "cli/subcommands.hpp"
#include "launch/executable.hpp"

namespace sluice::cli {

namespace {

// --rounds of a bench: how many times each row runs, 1 to 20.
void add_rounds(CLI::App& bench, std::uint32_t& rounds, const std::string& what) {
  bench.add_option("--rounds", rounds, what)->capture_default_str()->check(CLI::Range(1u, 20u));
}

// --repack-bench and its --lengths and --spreads, as simulate and bench e2e take them; `what`
// says what --repack-bench compares.
void add_repack_bench(CLI::App& c, bool& on, std::vector<std::string>& lengths,
                      std::vector<double>& spreads, const std::string& what) {
  c.add_flag("--repack-bench", on, what);
  c.add_option("--lengths", lengths, "--repack-bench: also a length file (one length per line)");
  c.add_option("--spreads", spreads,
               "--repack-bench: lognormal p99/median ratios at the job's median")
      ->delimiter(',')
      ->capture_default_str();
}

void add_chaos(CLI::App& c, ChaosArgs& a) {
  c.add_option("job", a.job_path, "job file (JSON)")->required();
  c.add_option("--kills", a.kills, "SIGKILLs over the job")->capture_default_str();
  c.add_option("--roles", a.roles, "comma-separated roles that may be killed (default: all)");
  c.add_option("--every", a.every_s, "one kill every this many seconds (default: at random times)");
  c.add_option("--seed", a.seed, "seed of kill times and targets (default: printed)");
  c.add_option("--duration", a.duration_s,
               "stop both runs after this many seconds and compare trained tokens");
  c.add_option("--min-token-ratio", a.min_token_ratio,
               "with --duration: fail when trained tokens with kills / without is below this "
               "(default 0.95)")
      ->check(CLI::Range(0.0, 10.0));
  c.add_flag("!--no-baseline", a.baseline, "skip the run without faults");
  c.add_option("--set", a.overrides, "override a job field: key=value (repeatable)");
  c.add_option("--out", a.out_dir, "folder for both run folders");
  c.add_flag("--json", a.json, "one JSON object with every figure");
}

void add_attack(CLI::App& c, AttackArgs& a) {
  c.add_option("run_dir", a.run_dir, "run folder of a running job (sluice run --out)")->required();
  c.add_option("--wait-ms", a.wait_ms, "how long a refused request is waited for")
      ->capture_default_str()
      ->check(CLI::Range(100u, 60000u));
  c.add_option("--idle-connections", a.idle_connections,
               "idle connections held open against each chunk server")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  c.add_option("--only", a.only,
               "play only these phases, comma-separated (strangers, versions, owners, identities, "
               "manager, foreign, oversized, modes, chunk-servers, served-bytes, agent)");
}

struct CompareArgs {
  std::vector<std::string> dirs;
  double within = 5.0;
};

void add_compare(CLI::App& c, CompareArgs& a) {
  c.add_option("runs", a.dirs, "two run folders (sluice run --out DIR)")->required()->expected(2);
  c.add_option("--within", a.within, "accuracy gap, in points, that counts as comparable")
      ->capture_default_str();
}

void add_simulate(CLI::App& c, SimulateArgs& a) {
  c.add_option("jobs", a.jobs,
               "job file (JOB.json) with an optional simulate section; with --scale any number "
               "(default: examples/scale's three)");
  c.add_flag("--scale", a.scale,
             "every mode on each job, one table of sluice against every baseline");
  c.add_flag("--validate", a.validate,
             "simulate bench e2e's configurations and set them beside measured runs");
  c.add_option("--measured", a.measured,
               "--validate: bench e2e --json output of the one-host run (else run it)");
  c.add_option("--measured-hosts", a.measured_hosts,
               "--validate: bench e2e --json output of the four-emulated-host run (else run it "
               "as root)");
  c.add_flag("--update-only", a.update_only,
             "print the weight-movement model's time for one update of JOB's model");
  c.add_option("--modes", a.modes,
               std::string("comma-separated modes (default: ") + kSimulateModes +
                   "; with --scale: " + kScaleModes + ", and the limit rows always)");
  c.add_option("--splits", a.splits,
               "--scale: trainer shares of the cluster's GPUs to run each mode at, "
               "comma-separated, each in (0, 1) (e.g. 0.125,0.25,0.375,0.5); each mode is "
               "reported at its best");
  c.add_option("--set", a.overrides,
               "override a job field: key=value (with --validate: on the bench run and the "
               "simulated job alike)");
  c.add_flag("--json", a.json, "one JSON object per mode");
  add_repack_bench(c, a.repack_bench, a.lengths, a.spreads,
                   "repack on against off on several length distributions");
}

void add_bench_transfer(CLI::App& c, BenchTransferArgs& a) {
  c.add_option("--verify", a.verify,
               "chunks verified against: digest (SHA-256, as signed versions are; XXH3 alone "
               "from a verified copy of this user on this host), digest-all (SHA-256 from any "
               "copy) or checksum (XXH3 alone)")
      ->check(CLI::IsMember({"digest", "digest-all", "checksum"}))
      ->capture_default_str();
  c.add_option("--transport", a.transports,
               "comma-separated: tcp (chunk streams), tcp-ucx (UCX GET), sm")
      ->capture_default_str();
  c.add_option("--size", a.size, "bytes to move (e.g. 1GiB)")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size (e.g. 8MiB)")->capture_default_str();
  c.add_option("--in-flight", a.in_flight, "GETs in flight per source")->capture_default_str();
  c.add_option("--sources", a.sources, "1, or 2 to compare one against two")->capture_default_str();
  c.add_option("--link-rate", a.link_rate,
               "put sources in emulated hosts behind links of this rate (tc, e.g. 1gbit)");
  c.add_flag("--json", a.json, "one JSON object per row");
  c.add_option("--memory", a.memory,
               "host, or cuda: pull into GPU memory beside the link and the host-to-device copy "
               "(exits 77 without a GPU)")
      ->capture_default_str();
  c.add_flag("--fanout", a.fanout, "with --memory cuda: NCCL fan-out to the host's other GPUs");
  c.add_option("--encryption", a.encryption,
               "chunk streams on tcp: off, on, or off,on for both side by side (with the "
               "encrypted/clear ratio and CPU seconds per GiB)")
      ->capture_default_str();
}

void add_bench_crossdc(CLI::App& c, BenchCrossdcArgs& a) {
  c.add_option("--dcs", a.dcs, "datacenters")->capture_default_str();
  c.add_option("--hosts-per-dc", a.hosts_per_dc, "hosts per datacenter (host 0: trainer)")
      ->capture_default_str();
  c.add_option("--rollouts-per-host", a.rollouts_per_host, "rollouts on each host")
      ->capture_default_str();
  c.add_option("--wan-rate", a.wan_rate, "each datacenter's WAN link, both ways (tc)")
      ->capture_default_str();
  c.add_option("--lan-rate", a.lan_rate, "each host's link, both ways (tc)")->capture_default_str();
  c.add_option("--size", a.size, "version size")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size")->capture_default_str();
  c.add_option("--versions", a.versions, "versions published, one after another (>= 2)")
      ->capture_default_str();
  c.add_option("--change-rate", a.change_rate,
               "fraction of elements each version changes against the one before")
      ->capture_default_str();
  c.add_option("--versions-dir", a.versions_dir,
               "publish real versions from here (v<N>.bin, from `bench delta --save-versions`) "
               "instead of synthetic ones")
      ->capture_default_str();
  c.add_option("--first-version", a.first_version, "--versions-dir: the first v<N>.bin")
      ->capture_default_str();
  c.add_option("--designs", a.designs, "direct, seed, delta, default")->capture_default_str();
  c.add_option("--poll-ms", a.poll_ms, "how often a rollout asks for a newer version")
      ->capture_default_str();
  c.add_option("--local-check-ms", a.local_check_ms,
               "seed: how often a rollout waiting for its host's relay asks for a plan again")
      ->capture_default_str();
  c.add_option("--relay-follow-ms", a.relay_follow_ms,
               "seed, delta: how often a receiving relay asks the store for its source's "
               "progress (relay.follow_poll_ms)")
      ->capture_default_str();
  c.add_option("--wait-ms", a.wait_ms,
               "how long the store may hold a rollout's or relay's question until it has news "
               "(a long poll; 0: they poll)")
      ->capture_default_str();
  c.add_option("--encryption", a.encryptions,
               "chunk stream encryption: auto, on, off, or a list (off,on) to run each design "
               "with each and print encrypted/clear")
      ->capture_default_str();
  c.add_flag("--json", a.json, "one JSON object per row");
}

// crossdc-run and crossdc-host: the parts of bench crossdc that run inside the emulated hosts.
void add_bench_crossdc_part(CLI::App& c, BenchCrossdcArgs& a) {
  c.add_option("--design", a.design);
  c.add_option("--dcs", a.dcs);
  c.add_option("--hosts-per-dc", a.hosts_per_dc);
  c.add_option("--rollouts-per-host", a.rollouts_per_host);
  c.add_option("--size", a.size);
  c.add_option("--chunk", a.chunk);
  c.add_option("--versions", a.versions);
  c.add_option("--change-rate", a.change_rate);
  c.add_option("--versions-dir", a.versions_dir);
  c.add_option("--first-version", a.first_version);
  c.add_option("--poll-ms", a.poll_ms);
  c.add_option("--local-check-ms", a.local_check_ms);
  c.add_option("--relay-follow-ms", a.relay_follow_ms);
  c.add_option("--wait-ms", a.wait_ms);
  c.add_option("--emuhosts", a.emuhosts);
  c.add_option("--prefix", a.prefix);
  c.add_option("--store", a.store);
  c.add_option("--keys", a.keys);
  c.add_option("--index", a.index);
  c.add_option("--encryption", a.encryption);
}

void add_bench_broadcast(CLI::App& c, BenchBroadcastArgs& a) {
  c.add_option("--relays", a.relays, "relays (N)")->capture_default_str();
  c.add_option("--size", a.size, "version size")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size")->capture_default_str();
  c.add_option("--link-rate", a.link_rate, "rate of every host's link (tc)")->capture_default_str();
  c.add_option("--link-latency", a.link_latency,
               "longest a packet may queue on a link (tc tbf latency; default: "
               "scripts/emuhosts.sh's)")
      ->capture_default_str();
  c.add_option("--designs", a.designs, "chain, tree, direct")->capture_default_str();
  c.add_option("--fanout", a.fanout, "children per relay in the tree")->capture_default_str();
  c.add_flag("--json", a.json, "one JSON object per row");
}

void add_bench_broadcast_run(CLI::App& c, BenchBroadcastArgs& a) {
  c.add_option("--design", a.design);
  c.add_option("--relays", a.relays);
  c.add_option("--size", a.size);
  c.add_option("--chunk", a.chunk);
  c.add_option("--fanout", a.fanout);
  c.add_option("--emuhosts", a.emuhosts);
  c.add_option("--prefix", a.prefix);
}

void add_bench_e2e(CLI::App& c, BenchE2eArgs& a) {
  c.add_option("--modes", a.modes,
               std::string("comma-separated modes (default: ") + kSimulateModes +
                   "; with --scale: " + kScaleModes + ", and the limit rows always)");
  c.add_option("--workload", a.workload, "job file whose fields replace the defaults");
  c.add_option("--set", a.overrides, "override a workload field: key=value");
  c.add_option("--rollouts", a.rollouts, "rollouts (default: the workload's, 16)");
  c.add_option("--prompts", a.prompts, "prompts per mode (default: the workload's)");
  add_rounds(c, a.rounds,
             "run every mode this many times in turn; report each mode's median round");
  c.add_flag("--compare-auth", a.compare_auth,
             "also run each mode with the control plane in plain mode (MODE+plain) and print "
             "authenticated / plain throughput");
  c.add_flag("--json", a.json, "one JSON object per mode");
  add_repack_bench(c, a.repack_bench, a.lengths, a.spreads,
                   "sluice against sluice-norepack on the job's lengths, lognormal p99/median 5, "
                   "10 and 20, and each --lengths file, interleaved every round");
}

void add_bench_elastic(CLI::App& c, BenchElasticArgs& a) {
  c.add_option("--hosts", a.hosts,
               "emulated hosts with a relay (each joiner gets a host of its own besides)")
      ->capture_default_str();
  c.add_option("--link-rate", a.link_rate, "every host's link (tc)")->capture_default_str();
  c.add_option("--trainer-link-rate", a.trainer_link_rate,
               "host 0's link (store, manager, actor): a rate, none (not limited) or empty "
               "(--link-rate)")
      ->capture_default_str();
  c.add_option("--size", a.size, "weight version size")->capture_default_str();
  c.add_option("--steps", a.steps, "rollouts: FROM,PEAK,TO")->capture_default_str();
  c.add_option("--designs", a.designs, "many, trainer")->capture_default_str();
  c.add_option("--prompts", a.prompts, "prompts in the job")->capture_default_str();
  c.add_option("--out", a.out_dir, "folder for the run folders");
  c.add_flag("--json", a.json, "one JSON object per design, then the ratio");
}

void add_bench_learner(CLI::App& c, BenchLearnerArgs& a) {
  c.add_option("job", a.job, "job file (actor.policy gpt)")->required();
  c.add_option("--set", a.overrides, "override a job field on every variant");
  c.add_option("--variant", a.variants,
               "'LABEL: key=value ...', job fields that this variant changes (repeatable; the "
               "job as given is the first row)");
  c.add_option("--updates", a.updates,
               "updates per variant (default: manager.prompts / prompts per batch)");
  c.add_option("--eval-every", a.eval_every,
               "held-out evaluation every N updates (default: actor.eval_every)");
  add_rounds(c, a.rounds,
             "run every variant this many times with other samples; report the median");
  c.add_flag("--json", a.json, "one JSON object per variant");
}

void add_bench_digest(CLI::App& c, BenchDigestArgs& a) {
  c.add_option("--size", a.size, "bytes hashed per round")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size (each chunk hashed on its own)")
      ->capture_default_str();
  c.add_option("--hashes", a.hashes, "xxh3, sha256, blake2b")
      ->delimiter(',')
      ->capture_default_str();
  c.add_option("--threads", a.threads, "threads for the second row (default: the host's cores)");
  c.add_option("--rounds", a.rounds, "rounds per row; the best counts")->capture_default_str();
  c.add_option("--link-gbps", a.link_gbps, "a link's rate in GB/s, for the cores it would need")
      ->capture_default_str();
  c.add_flag("--json", a.json, "one JSON line");
  c.add_flag("--device", a.device,
             "SHA-256 on each GPU (one chunk per thread): one chunk alone and --size/--chunk "
             "chunks at once; exit 77 without a GPU");
}

void add_bench_delta(CLI::App& c, BenchDeltaArgs& a) {
  c.add_option("--size", a.size, "synthetic version size")->capture_default_str();
  c.add_option("--chunk", a.chunk, "synthetic versions' chunk size")->capture_default_str();
  c.add_option("--rates", a.rates, "fractions of elements changed (synthetic)")
      ->delimiter(',')
      ->capture_default_str();
  c.add_option("--job", a.job,
               "job whose actor's consecutive versions are measured (default "
               "examples/grpo_arith.json; none: skip)");
  c.add_option("--set", a.overrides, "override a field of that job");
  c.add_option("--updates", a.updates, "the job's consecutive version pairs")
      ->capture_default_str();
  c.add_option("--level", a.level, "zstd level")->capture_default_str();
  c.add_option("--dtype", a.dtype,
               "dtype of the job's versions: f32 (as held) or bf16 (rounded, as published with "
               "actor.publish_dtype bf16)")
      ->capture_default_str();
  c.add_option("--save-versions", a.save_versions,
               "write each of the job's versions here (v<N>.bin: its bytes), for `bench crossdc "
               "--versions-dir`");
  c.add_flag("--json", a.json, "one JSON object per row");
}

void add_study_schedule(CLI::App& c, StudyScheduleArgs& a) {
  c.add_option("run_dir", a.run_dir, "a finished run's folder (with actor-batches.bin)")
      ->required();
  c.add_option("--seeds", a.seeds, "sampling seeds, 1..16")->capture_default_str();
  c.add_option("--every", a.every, "held-out evaluation every N steps (and at the end)")
      ->capture_default_str();
  c.add_option("--temperature", a.temperature, "sampling temperature (the rollouts')")
      ->capture_default_str();
  c.add_option("--steps", a.steps, "replay only the first N steps (default: all)");
  c.add_option("--set", a.overrides, "override a learner field: key=value");
  c.add_flag("--json", a.json, "one JSON object per run instead of the table");
}

void add_study_staleness(CLI::App& c, StudyArgs& a) {
  a.lags = {"0", "2", "4", "8", "16"};
  a.corrections = {"none", "behaviour-cap", "m2po"};
  c.add_option("job", a.job, "job file (actor.policy gpt)")->required();
  c.add_option("--lags", a.lags, "versions behind the newest, 0..64 (0: sync)")
      ->delimiter(',')
      ->capture_default_str();
  c.add_option("--corrections", a.corrections,
               "corrections of stale samples: none, behaviour-cap, m2po")
      ->delimiter(',')
      ->capture_default_str();
  c.add_option("--seeds", a.seeds, "seeds per setting, 1..16 (prompts and RNG)")
      ->capture_default_str();
  c.add_option("--updates", a.updates,
               "updates per run (default: the job's, manager.prompts / prompts per batch)");
  c.add_option("--every", a.every,
               "held-out evaluation every N updates (default: actor.eval_every)");
  c.add_option("--out", a.out, "output folder (default runs/study-staleness-<time>-<pid>)");
  c.add_option("--set", a.overrides, "override a job field: key=value");
  c.add_option("--jobs", a.jobs, "runs at a time, on threads (1..64)")->capture_default_str();
  c.add_option("--replot", a.replot,
               "run nothing: redraw the table, page and figure in this study folder from its "
               "results.json (give the study's flags)");
}

void add_transfer_source(CLI::App& c, TransferSourceArgs& a) {
  c.add_option("--listen", a.listen, "control endpoint")->capture_default_str();
  c.add_option("--bytes", a.bytes, "region size")->capture_default_str();
  c.add_option("--chunk", a.chunk, "chunk size")->capture_default_str();
  c.add_option("--name", a.name, "region name")->capture_default_str();
  c.add_option("--seed", a.seed, "data pattern seed")->capture_default_str();
  c.add_option("--corrupt-chunk", a.corrupt_chunk,
               "fault injection: corrupt this chunk after checksumming");
  c.add_flag("--ucx-get", a.ucx_get, "serve tcp readers through UCX's GET, no stream");
  c.add_option("--keys", a.keys, "job keys folder (its actor key): streams may encrypt");
  c.add_option("--encryption", a.encryption, "chunk streams: auto, on or off");
}

void add_transfer_read(CLI::App& c, TransferReadArgs& a) {
  c.add_option("--from", a.from, "control endpoints of the sources")->required();
  c.add_option("--name", a.name, "region name")->capture_default_str();
  c.add_option("--in-flight", a.in_flight, "GETs in flight per source");
  c.add_option("--verify", a.verify,
               "digest (SHA-256; XXH3 alone from a verified copy of this user on this host), "
               "digest-all (SHA-256 from any copy) or checksum (XXH3 alone)")
      ->capture_default_str();
  c.add_option("--timeout-ms", a.timeout_ms, "whole read");
  c.add_option("--op-timeout-ms", a.op_timeout_ms, "one GET");
  c.add_option("--verify-seed", a.verify_seed, "compare with the seeded pattern");
  c.add_flag("!--no-warmup", a.warmup, "skip the one-chunk warm-up read");
  c.add_option("--repeat", a.repeat, "timed reads of the whole region");
  c.add_flag("--ucx-get", a.ucx_get, "read over UCX's GET, not a chunk stream");
  c.add_option("--memory", a.memory, "host, or cuda: also pull into GPU memory");
  c.add_option("--device-path", a.device_path, "with cuda: auto, staged or direct");
  c.add_flag("--fanout", a.fanout, "with cuda: NCCL fan-out to the other GPUs");
  c.add_option("--keys", a.keys, "job keys folder (its rollout-0 key): streams may encrypt");
  c.add_option("--encryption", a.encryption, "chunk streams: auto, on or off");
}

}  // namespace

std::vector<Subcommand> bench_subcommands() {
  std::vector<Subcommand> t;
  t.push_back(subcommand<ChaosArgs>(
      "chaos", "run a job with random kill -9s of its roles, check nothing was lost or doubled",
      add_chaos, [](const ChaosArgs& a, const Context& ctx) {
        return run_chaos(a, self_exe(), ctx.environment);
      }));
  t.push_back(subcommand<AttackArgs>(
      "attack", "play known attacks against a running job (its run folder); exit 1 on a breach",
      add_attack, plain(run_attack)));
  t.push_back(subcommand<CompareArgs>(
      "compare", "two run folders of one job side by side: held-out accuracy at equal samples",
      add_compare, [](const CompareArgs& a, const Context&) {
        return run_compare(a.dirs[0], a.dirs[1], a.within);
      }));
  t.push_back(subcommand<SimulateArgs>(
      "simulate", "a job in simulated time, every mode side by side (the real manager code)",
      add_simulate, plain(run_simulate)));
  t.push_back(subcommand<BenchTransferArgs>(
      "bench transfer", "one-sided chunked reads between processes, against ucx_perftest",
      add_bench_transfer, with_env(run_bench_transfer)));
  t.push_back(subcommand<BenchCrossdcArgs>(
      "bench crossdc",
      "rollouts in emulated datacenters behind WAN links: WAN bytes per version and time until "
      "every rollout holds it, for direct and one seed per datacenter",
      add_bench_crossdc, with_env(run_bench_crossdc)));
  t.push_back(subcommand<BenchCrossdcArgs>("bench crossdc-run", "one part of bench crossdc",
                                           add_bench_crossdc_part,
                                           with_env(run_bench_crossdc_inside), true));
  t.push_back(subcommand<BenchCrossdcArgs>("bench crossdc-host", "one part of bench crossdc",
                                           add_bench_crossdc_part, with_env(run_bench_crossdc_host),
                                           true));
  t.push_back(subcommand<BenchBroadcastArgs>(
      "bench broadcast",
      "time until N relays in emulated hosts hold a version: chain, tree, direct",
      add_bench_broadcast, with_env(run_bench_broadcast)));
  t.push_back(subcommand<BenchE2eArgs>(
      "bench e2e", "one workload in every mode (sync ... sluice) as real processes, side by side",
      add_bench_e2e, with_env(run_bench_e2e)));
  t.push_back(subcommand<BenchElasticArgs>(
      "bench elastic",
      "scale a running job 2 -> 8 -> 3 rollouts on emulated hosts: join times, many holders "
      "against the trainer's copy, exactly-once, each figure with the CPU busy",
      add_bench_elastic, with_env(run_bench_elastic)));
  t.push_back(subcommand<BenchLearnerArgs>(
      "bench learner", "variants of the RL learner side by side: on-policy updates in one process",
      add_bench_learner, plain(run_bench_learner)));
  t.push_back(subcommand<StudyArgs>(
      "study staleness",
      "held-out accuracy against trained samples when generation lags the newest weights by a "
      "chosen number of versions, per correction of stale samples, against sync",
      add_study_staleness, plain(run_study_staleness)));
  t.push_back(subcommand<StudyScheduleArgs>(
      "study schedule",
      "a run's recorded schedule (which samples, which versions, in which order) through the "
      "study's learner: every response sampled again by its recorded version, and by the current "
      "one",
      add_study_schedule, plain(run_study_schedule)));
  t.push_back(subcommand<BenchDeltaArgs>(
      "bench delta", "bit-exact deltas between consecutive versions: synthetic and the real job's",
      add_bench_delta, plain(run_bench_delta)));
  t.push_back(subcommand<BenchDigestArgs>(
      "bench digest",
      "what verifying chunks costs per core: xxh3, sha256 (the signed digest), blake2b",
      add_bench_digest, plain(run_bench_digest)));
  t.push_back(subcommand<BenchBroadcastArgs>("bench broadcast-run", "one broadcast run",
                                             add_bench_broadcast_run,
                                             with_env(run_bench_broadcast_inside), true));
  // Processes that benches and tests start; not meant to be typed by hand.
  auto source = subcommand<TransferSourceArgs>(
      "transfer-source", "serve a region of test data", add_transfer_source,
      with_env(run_transfer_source), true, [](const TransferSourceArgs& a) { return a.ucx_get; });
  auto read = subcommand<TransferReadArgs>(
      "transfer-read", "read a region from sources, print JSON", add_transfer_read,
      with_env(run_transfer_read), true, [](const TransferReadArgs& a) { return a.ucx_get; });
  t.push_back(std::move(source));
  t.push_back(std::move(read));
  return t;
}

}  // namespace sluice::cli
