// `sluice bench e2e`: the same workload (seed, prompts, length distribution, rollouts, batch
// sizes) run once per mode, each a whole local job of real processes, side by side in one run.
#include "bench/bench_e2e.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "bench/bench_util.hpp"
#include "bench/result_table.hpp"
#include "core/config.hpp"
#include "launch/job.hpp"
#include "launch/job_setup.hpp"
#include "rollout/manager.hpp"
#include "rollout/mode_policy.hpp"
#include "rollout/sim_engine.hpp"
#include "sim/steady.hpp"

namespace sluice::cli {

using nlohmann::json;

namespace {

struct Row {
  std::string mode;
  double tokens_per_s = 0, rollout_util = 0, weight_stall_frac = 0, actor_idle_frac = 0;
  double staleness_mean = 0;
  std::uint64_t staleness_max = 0, repacks = 0, trained_tokens = 0, dropped = 0, mixed = 0;
  double repack_overhead_s = 0, wall_s = 0;
  // Over the steady middle of the job (sim/steady.hpp), from the actor's per-step metrics.
  double steady_tokens_per_s = 0, steady_from_s = 0, steady_to_s = 0;
  // Free rollout slots by cause, as fractions of all slot time (the manager's free_slot_s).
  std::vector<std::pair<std::string, double>> free_slots;
  // The share of slot time spent generating outside start-up (before a rollout's first weights,
  // not in its wall time) and the final drain (free slots with no work left in the job).
  double generating_share = 0;
  std::uint64_t staleness_p50 = 0, staleness_p99 = 0;
  double dropped_token_frac = 0;  // generated tokens the actor dropped as too stale
};

// The manager's causes of free slots, in the order the bench prints them.

// The actor's steps from its metrics.jsonl: each line of a training step carries the job's
// time and the trained tokens so far (evaluation lines carry no trained_tokens and are skipped).
std::vector<sim::StepEnd> read_step_ends(const std::string& run_dir) {
  std::vector<sim::StepEnd> out;
  std::ifstream f(std::filesystem::path(run_dir) / "metrics.jsonl");
  std::string line;
  std::uint64_t before = 0;
  while (std::getline(f, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("trained_tokens") || !j.contains("t")) continue;
    const auto total = j["trained_tokens"].get<std::uint64_t>();
    out.push_back(sim::StepEnd{j["t"].get<double>(), total >= before ? total - before : total});
    before = total;
  }
  return out;
}

Row summarize(const std::string& label, const JobResult& r, double steady_trim) {
  Row row;
  row.mode = label;
  const json& a = r.actor;
  row.tokens_per_s = a.value("tokens_per_s", 0.0);
  row.actor_idle_frac = a.value("actor_idle_frac", 0.0);
  row.staleness_mean = a.value("staleness_mean", 0.0);
  row.staleness_max = a.value("staleness_max", 0ull);
  row.staleness_p50 = a.value("staleness_p50", 0ull);
  row.staleness_p99 = a.value("staleness_p99", 0ull);
  const double accepted_tokens = a.value("accepted_tokens", 0.0);
  row.dropped_token_frac =
      accepted_tokens > 0 ? a.value("dropped_tokens", 0.0) / accepted_tokens : 0.0;
  row.trained_tokens = a.value("trained_tokens", 0ull);
  row.dropped = a.value("dropped_stale", 0ull);
  row.mixed = a.value("mixed_version_consumed", 0ull);
  row.wall_s = a.value("wall_s", 0.0);
  const sim::SteadyWindow w = sim::steady_window(read_step_ends(r.dir), steady_trim);
  row.steady_tokens_per_s = w.tokens_per_s;
  // Step times count from the job's start, wall_s from the actor's: the window is given in the
  // actor's clock, as wall_s is.
  const double offset = a.value("start_offset_s", 0.0);
  row.steady_from_s = std::max(0.0, w.from_s - offset);
  row.steady_to_s = std::max(0.0, w.to_s - offset);
  double wall = 0, occupancy = 0, stall = 0, reprefill = 0;
  for (const auto& ro : r.manager.value("rollouts", json::array())) {
    const json& s = ro.value("stats", json::object());
    wall += s.value("wall_s", 0.0);
    occupancy += s.value("occupancy_s", 0.0);
    stall += s.value("load_s", 0.0) + s.value("barrier_s", 0.0);
    reprefill += s.value("reprefill_s", 0.0);
  }
  row.rollout_util = wall > 0 ? occupancy / wall : 0;
  row.weight_stall_frac = wall > 0 ? stall / wall : 0;
  row.repacks = r.manager.value("repack_moves", 0ull);
  row.repack_overhead_s = reprefill;
  // Slot time: each rollout's wall time times its decode slots (the manager samples free slots
  // from the reports; occupancy and free slots then add up to about the whole).
  double slot_s = 0;
  for (const auto& ro : r.manager.value("rollouts", json::array())) {
    const json& s = ro.value("stats", json::object());
    slot_s += s.value("wall_s", 0.0) * s.value("max_sequences", 0.0);
  }
  const json free = r.manager.value("free_slot_s", json::object());
  for (const char* cause : rollout::kFreeSlotCauses)
    row.free_slots.emplace_back(cause, slot_s > 0 ? free.value(cause, 0.0) / slot_s : 0.0);
  const double end_share = slot_s > 0 ? free.value("end", 0.0) / slot_s : 0.0;
  row.generating_share = sim::active_generating_share(row.rollout_util, end_share);
  return row;
}

// A row's label: a mode, "sluice-norepack", either with "+plain" (the control plane in plain
// mode, for --compare-auth).
constexpr std::string_view kPlainSuffix = "+plain";
// Each of the bench's jobs fails if it has not finished within this (seconds).
constexpr double kJobTimeoutS = 300;
bool plain_label(const std::string& m) {
  return m.size() > kPlainSuffix.size() &&
         m.compare(m.size() - kPlainSuffix.size(), kPlainSuffix.size(), kPlainSuffix) == 0;
}
std::string base_label(const std::string& m) {
  return plain_label(m) ? m.substr(0, m.size() - kPlainSuffix.size()) : m;
}

// What a run's actor consumed (`accepted_ids`: every trajectory it trained on or dropped as too
// stale or abandoned): each of the job's trajectories once, none twice. `expected` 0 (a job
// without a prompt count): only "none twice". Copies the actor refused (`duplicates`, a resend
// of one it had) were not consumed.
struct OnceCheck {
  std::uint64_t lost = 0, twice = 0;
  bool ok() const { return lost == 0 && twice == 0; }
};
OnceCheck check_once(const json& actor, std::uint64_t expected) {
  OnceCheck c;
  std::set<std::string> ids;
  for (const auto& id : actor.value("accepted_ids", json::array())) {
    if (!ids.insert(id.get<std::string>()).second) ++c.twice;
  }
  if (expected > ids.size()) c.lost = expected - ids.size();
  return c;
}

// The lower middle of `v` (the median for an odd count).
double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// --repack-bench: sluice and sluice-norepack on every length distribution, interleaved (each
// round runs every distribution's pair, on first in odd rounds and off first in even ones, so
// that drift in the machine's load hits both alike).
int run_repack_bench(const BenchE2eArgs& args, const JobConfig& job, const std::string& stamp,
                     const std::vector<std::string>& environment,
                     const std::shared_ptr<EmulatedHosts>& hosts) {
  if (job.rollout.engine != "sim") {
    std::fprintf(stderr,
                 "sluice bench e2e: --repack-bench sets the simulated engine's lengths; the "
                 "rollouts' engine is '%s', not sim\n",
                 job.rollout.engine.c_str());
    return 2;
  }
  std::vector<LengthCase> cases =
      repack_bench_lengths(job.rollout.sim.lengths, args.spreads, args.lengths);
  std::vector<rollout::LengthStats> stats;
  for (auto& c : cases) {
    // The roles run in their own folders: a length file is named by its absolute path.
    if (c.lengths.kind == "file") {
      c.lengths.file = std::filesystem::absolute(c.lengths.file).lexically_normal().string();
    }
    auto st = rollout::length_stats(c.lengths, job.rollout.sim.seed, 20000);
    if (!st.is_ok()) {
      std::fprintf(stderr, "sluice bench e2e: --repack-bench: %s: %s\n", c.name.c_str(),
                   st.status().to_string().c_str());
      return 2;
    }
    stats.push_back(*st);
  }
  const std::uint64_t expected = job.manager.prompts * job.manager.group_size;
  const std::uint32_t rounds = std::max<std::uint32_t>(1, args.rounds);
  // [case][round]: the run with repack on, and with it off.
  std::vector<std::vector<Row>> on(cases.size()), off(cases.size());
  std::uint32_t runs = 0, failed_once = 0;
  for (std::uint32_t round = 1; round <= rounds; ++round) {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const bool on_first = round % 2 == 1;
      for (int k = 0; k < 2; ++k) {
        const bool repack = (k == 0) == on_first;
        const std::string label = repack ? "sluice" : "sluice-norepack";
        JobConfig j = job;
        j.mode = "sluice";
        j.manager.repack = repack;
        j.rollout.sim.lengths = cases[i].lengths;
        j.name = label;
        j.out_dir = fmt::format("{}/round-{}/lengths-{}/{}", stamp, round, i + 1, label);
        if (!args.json) {
          std::fprintf(stderr, "round %u of %u: %s, %s ...\n", round, rounds, cases[i].name.c_str(),
                       label.c_str());
        }
        auto r = run_local_job(j, self_exe(), environment, hosts);
        if (!r.is_ok()) {
          std::fprintf(stderr, "sluice bench e2e: %s, %s: %s\n", cases[i].name.c_str(),
                       label.c_str(), r.status().to_string().c_str());
          return 1;
        }
        const OnceCheck once = check_once(r->actor, expected);
        ++runs;
        if (!once.ok()) {
          ++failed_once;
          std::fprintf(stderr,
                       "sluice bench e2e: %s, %s, round %u: not exactly once: %llu lost, %llu "
                       "twice (%s)\n",
                       cases[i].name.c_str(), label.c_str(), round,
                       static_cast<unsigned long long>(once.lost),
                       static_cast<unsigned long long>(once.twice), r->dir.c_str());
        }
        (repack ? on : off)[i].push_back(summarize(label, *r, args.steady_trim));
      }
    }
  }
  if (!args.json) {
    std::printf("\n%-40s %10s %10s %8s %-22s %6s %8s\n", "lengths", "repack on", "repack off",
                "on/off", "rounds (on/off)", "moves", "p99/p50");
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::vector<double> on_tps, off_tps, each, moves;
    for (std::uint32_t k = 0; k < rounds; ++k) {
      on_tps.push_back(on[i][k].tokens_per_s);
      off_tps.push_back(off[i][k].tokens_per_s);
      each.push_back(ratio(on[i][k].tokens_per_s, off[i][k].tokens_per_s));
      moves.push_back(static_cast<double>(on[i][k].repacks));
    }
    std::uint64_t off_moves = 0;
    for (const auto& x : off[i])
      off_moves += x.repacks;
    const double spread =
        stats[i].p50 > 0 ? static_cast<double>(stats[i].p99) / static_cast<double>(stats[i].p50)
                         : 0.0;
    if (args.json) {
      std::printf("%s\n", json{{"lengths", cases[i].name},
                               {"repack_on_tokens_per_s", lower_median(on_tps)},
                               {"repack_off_tokens_per_s", lower_median(off_tps)},
                               {"on_off", lower_median(each)},
                               {"on_off_rounds", each},
                               {"repack_on_tokens_per_s_rounds", on_tps},
                               {"repack_off_tokens_per_s_rounds", off_tps},
                               {"repacks", lower_median(moves)},
                               {"repacks_off", off_moves},
                               {"p50", stats[i].p50},
                               {"p99", stats[i].p99}}
                              .dump()
                              .c_str());
      continue;
    }
    std::string rs;
    for (double x : each)
      rs += fmt::format("{}{:.3f}", rs.empty() ? "" : " ", x);
    std::printf("%-40s %10.0f %10.0f %7.3fx %-22s %6.0f %8.1f\n", cases[i].name.c_str(),
                lower_median(on_tps), lower_median(off_tps), lower_median(each), rs.c_str(),
                lower_median(moves), spread);
  }
  if (args.json) {
    std::printf("%s\n", json{{"runs", runs}, {"exactly_once_failed", failed_once}}.dump().c_str());
  } else {
    std::printf(
        "\ntokens/s and moves: each side's median round; on/off: the median of the rounds' "
        "ratios\nexactly once (every trajectory of the job accepted or dropped as stale, none "
        "twice): %u of %u runs\nrun folders: %s\n",
        runs - failed_once, runs, stamp.c_str());
  }
  return failed_once == 0 ? 0 : 1;
}

}  // namespace

JobConfig default_e2e_workload() {
  JobConfig j;
  j.name = "e2e";
  j.rollouts = 16;
  j.relays = 1;
  j.progress_s = 0;
  j.timeout_s = kJobTimeoutS;
  j.log_level = "warn";
  // The long tail: lognormal lengths with p99 / median = 10, truncated at 1024 tokens.
  j.rollout.sim.lengths.kind = "lognormal";
  j.rollout.sim.lengths.median = 64;
  j.rollout.sim.lengths.p99 = 640;
  j.rollout.sim.lengths.max_len = 1024;
  j.rollout.sim.max_sequences = 8;
  j.rollout.sim.t0_ms = 4.0;
  j.rollout.sim.t1_ms = 0.25;
  j.rollout.sim.prefill_ms_per_token = 0.01;
  j.rollout.sim.seed = 1;
  j.manager.group_size = 4;
  j.manager.batch_trajectories = 128;  // one batch fills every rollout (16 x 8)
  j.manager.prompts = 320;             // 1280 trajectories: 10 global batches
  j.manager.prompt_tokens = 32;
  j.manager.max_new_tokens = 1024;
  // The bound the staleness study licenses (lag 16 within 2 points of sync), as the actor's
  // default: at 4 the sluice row dropped 11.6% of its tokens as too stale (docs/benchmarks.md).
  j.actor.max_staleness = 16;
  j.actor.train_ms_fixed = 50;
  j.actor.train_ms_per_token = 0.02;
  j.actor.weight_bytes = 8u << 20;
  j.actor.chunk_bytes = 2u << 20;
  return j;
}

namespace {

// The workload: the defaults, then the --workload file's fields, the --set overrides,
// --rollouts and --prompts.
core::Result<JobConfig> e2e_workload(const BenchE2eArgs& args) {
  // A workload file is a job file: it replaces the defaults field by field.
  core::config::Json doc = core::config::to_json(default_e2e_workload());
  if (!args.workload.empty()) {
    SLUICE_ASSIGN_OR_RETURN(core::config::Json w, read_job_file(args.workload));
    doc.merge_patch(w);
  }
  for (const auto& o : args.overrides)
    SLUICE_TRY(core::config::apply_override(doc, o));
  if (args.rollouts > 0) doc["rollouts"] = args.rollouts;
  if (args.prompts > 0) doc["manager"]["prompts"] = args.prompts;
  JobConfig job;
  SLUICE_TRY(core::config::parse(doc, job));
  SLUICE_TRY(job.validate());
  return job;
}

// Each mode named once and known; prints what is wrong otherwise.
bool check_modes(const std::vector<std::string>& modes) {
  std::set<std::string> named;
  for (const auto& m : modes) {
    if (!named.insert(m).second) {
      std::fprintf(stderr, "sluice bench e2e: mode '%s' is named twice in --modes\n", m.c_str());
      return false;
    }
    auto variant = rollout::parse_mode_variant(base_label(m));
    if (!variant.is_ok()) {
      std::fprintf(stderr, "sluice bench e2e: %s\n", variant.status().message().c_str());
      return false;
    }
  }
  return true;
}

void print_workload(const JobConfig& job) {
  auto stats = rollout::length_stats(job.rollout.sim.lengths, job.rollout.sim.seed, 20000);
  if (!stats.is_ok()) return;
  std::printf(
      "workload: %u rollouts x %u sequences, %llu prompts x %u samples, batch %u, "
      "lengths p50 %llu p99 %llu max %llu (p99/p50 %.1f), staleness bound %llu\n",
      job.rollouts, job.rollout.sim.max_sequences,
      static_cast<unsigned long long>(job.manager.prompts), job.manager.group_size,
      job.manager.batch_trajectories, static_cast<unsigned long long>(stats->p50),
      static_cast<unsigned long long>(stats->p99), static_cast<unsigned long long>(stats->max),
      static_cast<double>(stats->p99) / static_cast<double>(std::max<std::uint64_t>(1, stats->p50)),
      static_cast<unsigned long long>(job.actor.max_staleness));
  if (job.rollout.sim.turns > 1) {
    std::printf(
        "episodes: %u model turns, each call answered with %u tokens after a lognormal latency "
        "(median %.0f ms, p99 %.0f ms, at most %.0f ms)\n",
        job.rollout.sim.turns, job.rollout.sim.env_tokens, job.rollout.env_latency.median_ms,
        job.rollout.env_latency.p99_ms, job.rollout.env_latency.max_ms);
  }
  std::fflush(stdout);
}

// Every mode's runs, round by round, and the median round of each.
struct E2eRuns {
  std::vector<std::string> modes;
  std::uint32_t rounds = 1;
  std::map<std::string, std::vector<Row>> by_mode;  // every round, in round order
  std::vector<Row> rows;                            // each mode's median round, in --modes order
  std::uint32_t once_runs = 0, once_failed = 0;     // exactly-once checks, and those that failed
  std::string stamp;                                // the run folders' parent

  const Row* find(const std::string& m) const {
    for (const auto& r : rows) {
      if (r.mode == m) return &r;
    }
    return nullptr;
  }
};

// One mode's job in one round.
JobConfig mode_job(const JobConfig& job, const std::string& m, const E2eRuns& runs,
                   std::uint32_t round) {
  JobConfig j = job;
  const rollout::ModeVariant variant = *rollout::parse_mode_variant(base_label(m));
  j.mode = variant.mode;
  j.manager.repack = variant.repack;
  if (!variant.admission.empty()) j.manager.admission = variant.admission;
  if (!variant.tail.empty()) j.manager.tail = variant.tail;
  if (plain_label(m)) j.auth = "plain";
  j.name = m;
  j.out_dir = runs.rounds == 1 ? fmt::format("{}/{}", runs.stamp, m)
                               : fmt::format("{}/round-{}/{}", runs.stamp, round, m);
  return j;
}

// Runs every mode `runs.rounds` times in turn; false when a job failed (said on stderr).
bool run_rounds(const BenchE2eArgs& args, const JobConfig& job, E2eRuns& runs,
                const std::vector<std::string>& environment,
                const std::shared_ptr<EmulatedHosts>& hosts) {
  for (std::uint32_t round = 1; round <= runs.rounds; ++round) {
    for (const auto& m : runs.modes) {
      if (!args.json) {
        if (runs.rounds == 1) {
          std::fprintf(stderr, "running %s ...\n", m.c_str());
        } else {
          std::fprintf(stderr, "round %u of %u: running %s ...\n", round, runs.rounds, m.c_str());
        }
      }
      auto r = run_local_job(mode_job(job, m, runs, round), self_exe(), environment, hosts);
      if (!r.is_ok()) {
        std::fprintf(stderr, "sluice bench e2e: %s\n", r.status().to_string().c_str());
        return false;
      }
      const OnceCheck once = check_once(r->actor, job.manager.prompts * job.manager.group_size);
      ++runs.once_runs;
      if (!once.ok()) {
        ++runs.once_failed;
        std::fprintf(stderr,
                     "sluice bench e2e: %s, round %u: not exactly once: %llu lost, %llu "
                     "twice (%s)\n",
                     m.c_str(), round, static_cast<unsigned long long>(once.lost),
                     static_cast<unsigned long long>(once.twice), r->dir.c_str());
      }
      runs.by_mode[m].push_back(summarize(m, *r, args.steady_trim));
    }
  }
  // Each mode's median round by tokens/s (the lower of the two middle ones for an even count).
  for (const auto& m : runs.modes) {
    std::vector<Row> sorted = runs.by_mode[m];
    std::sort(sorted.begin(), sorted.end(),
              [](const Row& a, const Row& b) { return a.tokens_per_s < b.tokens_per_s; });
    runs.rows.push_back(sorted[(sorted.size() - 1) / 2]);
  }
  return true;
}

// --json: one object per mode, then the exactly-once count.
void print_e2e_json(E2eRuns& runs) {
  const auto& rows = runs.rows;
  auto& by_mode = runs.by_mode;
  const std::uint32_t rounds = runs.rounds;
  auto find = [&](const std::string& m) { return runs.find(m); };
  const Row* sync = find("sync");
  const Row* sl = find("sluice");
  const std::uint32_t once_runs = runs.once_runs, once_failed = runs.once_failed;
  for (const auto& r : rows) {
    json o = mode_json(mode_figures(r.mode, r));
    o["generating_share"] = r.generating_share;
    if (sync) o["ratio_to_sync"] = ratio(r.tokens_per_s, sync->tokens_per_s);
    if (const Row* p = plain_label(r.mode) ? nullptr : find(r.mode + std::string(kPlainSuffix)))
      o["auth_ratio_to_plain"] = ratio(r.tokens_per_s, p->tokens_per_s);
    if (sl) o["sluice_ratio"] = ratio(sl->tokens_per_s, r.tokens_per_s);
    if (rounds > 1) {
      json each = json::array();
      for (const auto& x : by_mode[r.mode])
        each.push_back(x.tokens_per_s);
      o["tokens_per_s_rounds"] = std::move(each);
    }
    std::printf("%s\n", o.dump().c_str());
  }
  std::printf("%s\n",
              json{{"runs", once_runs}, {"exactly_once_failed", once_failed}}.dump().c_str());
}

// The tables, the round-by-round figures and the ratios against the targets.
void print_e2e_tables(E2eRuns& runs) {
  const auto& rows = runs.rows;
  auto& by_mode = runs.by_mode;
  const auto& modes = runs.modes;
  const auto& stamp = runs.stamp;
  const std::uint32_t rounds = runs.rounds;
  auto find = [&](const std::string& m) { return runs.find(m); };
  const Row* sync = find("sync");
  const Row* sl = find("sluice");
  const std::uint32_t once_runs = runs.once_runs, once_failed = runs.once_failed;
  std::vector<ModeFigures> figures;
  for (const auto& r : rows)
    figures.push_back(mode_figures(r.mode, r));
  print_mode_table(figures);
  print_free_slots(figures,
                   "\nfree rollout slots (share of all slot time); while work waited: loading "
                   "weights, draining an old\nversion, other; while none waited: the budget ahead "
                   "of the actor was used up, the actor's backlog was full,\nnone left in the job");
  std::printf(
      "\nslot time and staleness: gen = share of slot time generating outside start-up and the "
      "final drain;\nstale = staleness of the trajectories trained (p50/p99/max); drop = "
      "generated tokens dropped as too stale\n%-20s %7s %12s %7s\n",
      "mode", "gen", "stale", "drop");
  for (const auto& r : rows) {
    const std::string stale =
        fmt::format("{}/{}/{}", r.staleness_p50, r.staleness_p99, r.staleness_max);
    std::printf("%-20s %6.1f%% %12s %6.1f%%\n", r.mode.c_str(), 100 * r.generating_share,
                stale.c_str(), 100 * r.dropped_token_frac);
  }
  std::printf("exactly once: %u of %u runs%s\n", once_runs - once_failed, once_runs,
              once_failed ? " (FAILED: see above)" : "");
  const Row* norepack = find("sluice-norepack");
  const Row* partial = find("partial-rollout");
  // Round by round: what each mode measured, and sluice's ratio to it within the same round.
  auto spread = [&](const std::string& other) {
    if (rounds == 1 || !sl || by_mode.count(other) == 0) return std::string();
    std::string out = " (rounds:";
    for (std::uint32_t i = 0; i < rounds; ++i) {
      out += fmt::format(" {:.2f}",
                         ratio(by_mode["sluice"][i].tokens_per_s, by_mode[other][i].tokens_per_s));
    }
    return out + ")";
  };
  if (rounds > 1) {
    std::printf("\ntokens/s in each round (the table above shows each mode's median round)\n%-18s",
                "mode");
    for (std::uint32_t i = 1; i <= rounds; ++i)
      std::printf(" %9s", fmt::format("round {}", i).c_str());
    std::printf("\n");
    for (const auto& m : modes) {
      std::printf("%-18s", m.c_str());
      for (const auto& x : by_mode[m])
        std::printf(" %9.0f", x.tokens_per_s);
      std::printf("\n");
    }
  }
  std::printf("\n");
  if (sl && sync) {
    std::printf("sluice / sync:            %.2fx (target >= 2.5)%s\n",
                ratio(sl->tokens_per_s, sync->tokens_per_s), spread("sync").c_str());
  }
  if (sl && partial) {
    std::printf("sluice / partial-rollout: %.2fx (target >= 1.0)%s\n",
                ratio(sl->tokens_per_s, partial->tokens_per_s), spread("partial-rollout").c_str());
  }
  if (sl) {
    std::printf("sluice weight stall:      %.2f%% of rollout time (target < 2%%)\n",
                100 * sl->weight_stall_frac);
  }
  if (sl && norepack) {
    std::printf("repack on / off:          %.2fx%s\n",
                ratio(sl->tokens_per_s, norepack->tokens_per_s), spread("sluice-norepack").c_str());
  }
  for (const auto& r : rows) {
    if (plain_label(r.mode)) continue;
    if (const Row* p = find(r.mode + std::string(kPlainSuffix))) {
      std::printf("%-16s authenticated (curve) / plain: %.0f / %.0f tokens/s = %.3fx\n",
                  r.mode.c_str(), r.tokens_per_s, p->tokens_per_s,
                  ratio(r.tokens_per_s, p->tokens_per_s));
    }
  }
  std::printf("run folders: %s\n", stamp.c_str());
}

}  // namespace

int run_bench_e2e(const BenchE2eArgs& args, const std::vector<std::string>& environment) {
  auto workload = e2e_workload(args);
  if (!workload.is_ok()) {
    std::fprintf(stderr, "sluice bench e2e: %s\n", workload.status().to_string().c_str());
    return 2;
  }
  const JobConfig& job = *workload;
  E2eRuns runs;
  runs.modes = split_commas(args.modes);
  if (!check_modes(runs.modes)) return 2;
  if (!args.json) print_workload(job);
  if (args.compare_auth) {
    std::vector<std::string> both;
    for (const auto& m : runs.modes) {
      if (plain_label(m)) continue;
      both.push_back(m);
      both.push_back(m + std::string(kPlainSuffix));
    }
    runs.modes = both;
  }
  runs.stamp = fmt::format("runs/bench-e2e-{}", ::getpid());
  // Every mode on the same emulated hosts, made once.
  std::shared_ptr<EmulatedHosts> hosts;
  if (job.hosts.count > 0) {
    auto h = EmulatedHosts::up(job.hosts, environment);
    if (!h.is_ok()) {
      std::fprintf(stderr, "sluice bench e2e: %s\n", h.status().to_string().c_str());
      return 1;
    }
    hosts = std::move(h).value();
  }
  if (args.repack_bench) return run_repack_bench(args, job, runs.stamp, environment, hosts);
  runs.rounds = std::max<std::uint32_t>(1, args.rounds);
  if (!run_rounds(args, job, runs, environment, hosts)) return 1;
  if (args.json) {
    print_e2e_json(runs);
  } else {
    print_e2e_tables(runs);
  }
  return 0;
}

}  // namespace sluice::cli
