// `sluice simulate --scale`, `--validate` and `--update-only`: the simulator at scale, set beside
// real runs, and its weight-movement model on its own.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "bench/bench_e2e.hpp"
#include "bench/bench_util.hpp"
#include "bench/harness.hpp"
#include "bench/simulate.hpp"
#include "core/config.hpp"
#include "launch/job_setup.hpp"
#include "rollout/manager.hpp"
#include "rollout/mode_policy.hpp"
#include "sim/simulator.hpp"
#include "sim/weights.hpp"

namespace sluice::cli {

using nlohmann::json;

namespace {

// bench e2e ends by itself (each job has its timeout_s); this limit is only a backstop.
constexpr std::chrono::hours kMeasureBackstop{12};

void print_notes(const sim::SimInput& in) {
  for (const auto& note : in.sim.notes)
    std::printf("  assumption: %s\n", note.c_str());
}

}  // namespace

// ---- --scale: every mode on each setup at each split of its GPUs, one table.

namespace {

// One mode at one split of a setup's GPUs.
struct Run {
  double share = 0;  // the trainer's share of the cluster (sync-colocated: 1, every GPU trains)
  std::uint32_t trainer_gpus = 0, rollout_gpus = 0;
  sim::ModeResult r;
  bool best = false;  // the mode's highest trained tokens/s of the setup's splits
};

struct Setup {
  std::string name;
  std::uint32_t gpus = 0;  // the cluster: rollouts' GPUs and the trainer's
  std::vector<Run> runs;
};

const Run* best_run(const Setup& s, const std::string& mode) {
  for (const auto& run : s.runs) {
    if (run.best && run.r.label == mode) return &run;
  }
  return nullptr;
}

// Marks each mode's run with the highest whole-job throughput (the first of equals).
void mark_best(Setup& s) {
  std::map<std::string, std::size_t> best;  // mode -> index into runs
  for (std::size_t i = 0; i < s.runs.size(); ++i) {
    auto it = best.find(s.runs[i].r.label);
    if (it == best.end()) {
      best.emplace(s.runs[i].r.label, i);
    } else if (s.runs[i].r.tokens_per_s > s.runs[it->second].r.tokens_per_s) {
      it->second = i;
    }
  }
  for (const auto& entry : best)
    s.runs[entry.second].best = true;
}

// The stronger of sync (disaggregated, at its best split) and sync-colocated.
const Run* best_sync(const Setup& s) {
  const Run* a = best_run(s, "sync");
  const Run* b = best_run(s, "sync-colocated");
  if (!a) return b;
  if (!b) return a;
  return b->r.tokens_per_s > a->r.tokens_per_s ? b : a;
}

double run_ratio(const Run* a, const Run* b, bool steady) {
  if (!a || !b) return 0.0;
  return steady ? ratio(a->r.steady_tokens_per_s, b->r.steady_tokens_per_s)
                : ratio(a->r.tokens_per_s, b->r.tokens_per_s);
}

std::string run_ratio_text(const Run* a, const Run* b, bool steady) {
  if (!a || !b) return "-";
  return fmt::format("{:.2f}", run_ratio(a, b, steady));
}

// A peer of sluice: a simulated row that is neither a limit nor sluice mode itself (sluice's own
// variants, such as sluice-norepack, are ablations, not peers).
bool is_peer(const std::string& label) {
  if (label == "sluice" || sim::limit_label(label)) return false;
  auto v = rollout::parse_mode_variant(label);
  return !(v.is_ok() && v->mode == "sluice");
}

// The peer closest to sluice (the highest whole-job throughput of the peers, each at its best).
const Run* closest_peer(const Setup& s) {
  const Run* top = nullptr;
  for (const auto& run : s.runs) {
    if (!run.best || !is_peer(run.r.label)) continue;
    if (!top || run.r.tokens_per_s > top->r.tokens_per_s) top = &run;
  }
  return top;
}

std::string share_text(const Run& run) {
  return run.r.label == "sync-colocated" ? "all" : fmt::format("{:.3f}", run.share);
}

// Runs `modes` on one setup at each split (an empty list: the file's own).
core::Result<Setup> run_setup(const std::string& path, const SimulateArgs& args,
                              const std::vector<std::string>& modes,
                              const std::vector<double>& splits) {
  SLUICE_ASSIGN_OR_RETURN(sim::SimInput base, load_simulation(path, args.overrides));
  Setup s;
  s.name = std::filesystem::path(path).stem().string();
  s.gpus = base.rollouts * base.sim.gpus_per_rollout + base.sim.trainer_gpus;
  if (!args.json) {
    std::printf("== %s: %u GPUs (the file's split: %u for rollouts, %u for the trainer)\n",
                s.name.c_str(), s.gpus, base.rollouts * base.sim.gpus_per_rollout,
                base.sim.trainer_gpus);
    print_job_line(base);
    print_notes(base);
    std::fflush(stdout);
  }
  std::vector<std::string> per_split;
  bool colocated = false;
  for (const auto& m : modes) {
    if (m == "sync-colocated") {
      colocated = true;
    } else {
      per_split.push_back(m);
    }
  }
  std::vector<double> shares = splits;
  if (shares.empty()) shares.push_back(ratio(base.sim.trainer_gpus, s.gpus));
  for (double share : shares) {
    sim::SimInput in = base;
    if (!splits.empty()) {
      auto split = split_input(base, share);
      if (!split.is_ok()) return split.status().with_context(path);
      in = std::move(split).value();
    }
    const std::uint32_t rollout_gpus = in.rollouts * in.sim.gpus_per_rollout;
    if (!args.json) {
      std::printf(
          "  split %.3f: %u rollouts x %u GPUs, %u trainer GPUs, training %.5f ms a token "
          "+ %.0f ms a step\n",
          share, in.rollouts, in.sim.gpus_per_rollout, in.sim.trainer_gpus,
          in.actor.train_ms_per_token, in.actor.train_ms_fixed);
      std::fflush(stdout);
    }
    auto rows = simulate_modes(in, per_split, args.json);
    if (!rows.is_ok()) return rows.status().with_context(path);
    for (auto& r : *rows)
      s.runs.push_back(Run{share, in.sim.trainer_gpus, rollout_gpus, std::move(r), false});
  }
  if (colocated) {
    auto rows = simulate_modes(base, {"sync-colocated"}, args.json);
    if (!rows.is_ok()) return rows.status().with_context(path);
    s.runs.push_back(Run{1.0, s.gpus, s.gpus, std::move((*rows)[0]), false});
  }
  mark_best(s);
  return s;
}

// The share of the rollouts' GPU time spent generating (decoding or prefilling).
double generating_share(const sim::ModeResult& r) {
  const double all = r.gpus * r.wall_s;
  return all > 0 ? r.gpu.generating / all : 0.0;
}

void print_scale_json(const std::vector<Setup>& setups) {
  for (const auto& s : setups) {
    const Run* sl = best_run(s, "sluice");
    for (const auto& run : s.runs) {
      const sim::ModeResult& r = run.r;
      json o{{"setup", s.name},
             {"cluster_gpus", s.gpus},
             {"mode", r.label},
             {"trainer_share", run.share},
             {"trainer_gpus", run.trainer_gpus},
             {"rollout_gpus", run.rollout_gpus},
             {"best", run.best},
             {"tokens_per_s", r.tokens_per_s},
             {"steady_tokens_per_s", r.steady_tokens_per_s},
             {"rollout_util", r.rollout_util},
             {"weight_stall_frac", r.weight_stall_frac},
             {"staleness_mean", r.staleness_mean},
             {"staleness_p50", r.staleness_p50},
             {"staleness_p99", r.staleness_p99},
             {"staleness_max", r.staleness_max},
             {"dropped_token_frac", r.dropped_token_frac},
             {"gpu_generating", generating_share(r)},
             {"generating_share", r.generating_share},
             {"actor_idle_frac", r.actor_idle_frac},
             {"wall_s", r.wall_s},
             {"run_s", r.run_s}};
      if (sl) {
        o["sluice_ratio"] = run_ratio(sl, &run, false);
        o["sluice_steady_ratio"] = run_ratio(sl, &run, true);
      }
      std::printf("%s\n", o.dump().c_str());
    }
    // The setup's headline: sluice at its best split over the others at theirs.
    const Run* sync = best_sync(s);
    const Run* partial = best_run(s, "partial-rollout");
    json o{{"setup", s.name}, {"cluster_gpus", s.gpus}, {"summary", true}};
    if (sl) o["sluice_share"] = sl->share;
    if (sl && sync) {
      o["sync_variant"] = sync->r.label;
      o["sluice_over_sync"] = run_ratio(sl, sync, false);
      o["sluice_over_sync_steady"] = run_ratio(sl, sync, true);
    }
    if (sl && partial) {
      o["sluice_over_partial"] = run_ratio(sl, partial, false);
      o["sluice_over_partial_steady"] = run_ratio(sl, partial, true);
    }
    const Run* broadcast = best_run(s, "partial-broadcast");
    if (sl && broadcast) {
      o["sluice_over_partial_broadcast"] = run_ratio(sl, broadcast, false);
      o["sluice_over_partial_broadcast_steady"] = run_ratio(sl, broadcast, true);
    }
    const Run* limit = best_run(s, "limit");
    const Run* steady = best_run(s, "steady-limit");
    if (sl && limit) o["sluice_over_limit"] = run_ratio(sl, limit, false);
    if (sl && steady) o["sluice_steady_over_steady_limit"] = run_ratio(sl, steady, true);
    const Run* peer = closest_peer(s);
    if (sl && peer) {
      o["closest_peer"] = peer->r.label;
      o["sluice_over_closest_peer"] = run_ratio(sl, peer, false);
      o["sluice_ahead_of_peers"] = sl->r.tokens_per_s > peer->r.tokens_per_s;
    }
    std::printf("%s\n", o.dump().c_str());
  }
}

void print_scale_table(const std::vector<Setup>& setups) {
  std::printf(
      "\nevery run: trained tokens/s per mode and trainer share (share of the cluster's "
      "GPUs training; * marks the mode's best)\n%-22s %6s %-18s %6s %7s %7s %10s %10s "
      "%7s %8s %7s %6s\n",
      "setup", "GPUs", "mode", "share", "trainer", "rollout", "tokens/s", "steady/s", "util",
      "w-stall", "a-idle", "stale");
  for (const auto& s : setups) {
    for (const auto& run : s.runs) {
      const sim::ModeResult& r = run.r;
      std::printf("%-22s %6u %-18s %6s %7u %7u %10.0f %10.0f %6.1f%% %7.2f%% %6.1f%% %6.2f%s\n",
                  s.name.c_str(), s.gpus, r.label.c_str(), share_text(run).c_str(),
                  run.trainer_gpus, run.rollout_gpus, r.tokens_per_s, r.steady_tokens_per_s,
                  100 * r.rollout_util, 100 * r.weight_stall_frac, 100 * r.actor_idle_frac,
                  r.staleness_mean, run.best ? " *" : "");
    }
  }
  std::printf(
      "\neach mode at its best split; sluice/x: sluice's throughput (at its best) over the "
      "mode's (whole job, and its steady middle); gen: share of slot time generating outside "
      "start-up and the final drain; "
      "stale p50/p99/max: of the trajectories trained; drop: generated tokens dropped as too "
      "stale\n%-22s %6s %-18s %6s %10s %10s %6s %7s %7s %11s %6s %9s %9s\n",
      "setup", "GPUs", "mode", "share", "tokens/s", "steady/s", "gen", "w-stall", "a-idle", "stale",
      "drop", "sluice/x", "steady/x");
  for (const auto& s : setups) {
    const Run* sl = best_run(s, "sluice");
    for (const auto& run : s.runs) {
      if (!run.best) continue;
      const sim::ModeResult& r = run.r;
      const std::string stale =
          fmt::format("{}/{}/{}", r.staleness_p50, r.staleness_p99, r.staleness_max);
      std::printf(
          "%-22s %6u %-18s %6s %10.0f %10.0f %5.1f%% %6.2f%% %6.1f%% %11s %5.1f%% %9s %9s\n",
          s.name.c_str(), s.gpus, r.label.c_str(), share_text(run).c_str(), r.tokens_per_s,
          r.steady_tokens_per_s, 100 * r.generating_share, 100 * r.weight_stall_frac,
          100 * r.actor_idle_frac, stale.c_str(), 100 * r.dropped_token_frac,
          run_ratio_text(sl, &run, false).c_str(), run_ratio_text(sl, &run, true).c_str());
    }
  }
  std::printf(
      "\nwhere each mode's rollout GPU time went at its best split, and where its free slots went "
      "(share of slot time)\n%-22s %6s %-18s %9s %9s %9s %9s",
      "setup", "GPUs", "mode", "generate", "load", "barrier", "idle");
  for (const char* cause : rollout::kFreeSlotCauses)
    std::printf(" %9s", cause);
  std::printf("\n");
  for (const auto& s : setups) {
    for (const auto& run : s.runs) {
      if (!run.best) continue;
      const sim::ModeResult& r = run.r;
      const double all = r.gpus * r.wall_s;
      auto pct = [&](double x) { return all > 0 ? 100 * x / all : 0.0; };
      std::printf("%-22s %6u %-18s %8.1f%% %8.1f%% %8.1f%% %8.1f%%", s.name.c_str(), s.gpus,
                  r.label.c_str(), pct(r.gpu.generating), pct(r.gpu.loading), pct(r.gpu.barrier),
                  pct(r.gpu.idle));
      for (const auto& [cause, frac] : r.free_slots)
        std::printf(" %8.1f%%", 100 * frac);
      std::printf("\n");
    }
  }
  std::printf("\n");
  for (const auto& s : setups) {
    const Run* sl = best_run(s, "sluice");
    const Run* sync = best_sync(s);
    const Run* partial = best_run(s, "partial-rollout");
    const Run* broadcast = best_run(s, "partial-broadcast");
    const Run* limit = best_run(s, "limit");
    const Run* steady = best_run(s, "steady-limit");
    const Run* peer = closest_peer(s);
    std::printf(
        "%-22s sluice / sync %sx (steady %sx; against %s) [target >= 4]; sluice / "
        "partial-rollout %sx (steady %sx)",
        s.name.c_str(), run_ratio_text(sl, sync, false).c_str(),
        run_ratio_text(sl, sync, true).c_str(), sync ? sync->r.label.c_str() : "-",
        run_ratio_text(sl, partial, false).c_str(), run_ratio_text(sl, partial, true).c_str());
    if (broadcast) {
      std::printf("; sluice / partial-broadcast %sx (steady %sx) [target >= 1.4]",
                  run_ratio_text(sl, broadcast, false).c_str(),
                  run_ratio_text(sl, broadcast, true).c_str());
    }
    std::printf("\n%-22s", "");
    if (limit) {
      std::printf(" sluice / limit %s [target >= 0.9];", run_ratio_text(sl, limit, false).c_str());
    }
    if (steady) {
      std::printf(" sluice's steady / steady-limit %s [target >= 0.95];",
                  run_ratio_text(sl, steady, true).c_str());
    }
    if (sl && peer) {
      std::printf(" ahead of every peer: %s (closest %s, %sx)",
                  sl->r.tokens_per_s > peer->r.tokens_per_s ? "yes" : "no", peer->r.label.c_str(),
                  run_ratio_text(sl, peer, false).c_str());
    }
    std::printf("\n");
  }
  std::printf(
      "Laminar (arXiv 2510.12633) reports up to 5.48x over verl (synchronous) on 1024 "
      "GPUs and 1.39x over partial-rollout on average.\n");
}

// kScaleJobs from the source tree the binary sits in (build/sluice: ../examples), so that
// --scale runs from any working folder; from the working folder when that tree has none.
std::vector<std::string> default_scale_jobs() {
  namespace fs = std::filesystem;
  const fs::path exe_dir = fs::path(self_exe()).parent_path();
  std::vector<std::string> out;
  for (const std::string& job : kScaleJobs) {
    std::string found = job;
    for (const fs::path& root : {exe_dir / "..", exe_dir / ".." / ".."}) {
      std::error_code ec;
      if (fs::exists(root / job, ec)) {
        found = (root / job).lexically_normal().string();
        break;
      }
    }
    out.push_back(found);
  }
  return out;
}

}  // namespace

int run_simulate_scale(const SimulateArgs& args) {
  const std::vector<std::string> jobs = args.jobs.empty() ? default_scale_jobs() : args.jobs;
  auto modes = parse_sim_modes(args.modes.empty() ? kScaleModes : args.modes);
  if (!modes.is_ok()) {
    std::fprintf(stderr, "sluice simulate --scale: %s\n", modes.status().to_string().c_str());
    return 2;
  }
  // The table is judged against the two limits: they are computed (not simulated) and always in.
  for (const char* limit : {"steady-limit", "limit"}) {
    if (std::find(modes->begin(), modes->end(), limit) == modes->end()) {
      modes->insert(modes->begin(), limit);
    }
  }
  std::vector<double> splits;
  if (!args.splits.empty()) {
    auto parsed = parse_splits(args.splits);
    if (!parsed.is_ok()) {
      std::fprintf(stderr, "sluice simulate --scale: %s\n", parsed.status().to_string().c_str());
      return 2;
    }
    splits = std::move(parsed).value();
  }
  std::vector<Setup> setups;
  for (const auto& path : jobs) {
    auto s = run_setup(path, args, *modes, splits);
    if (!s.is_ok()) {
      std::fprintf(stderr, "sluice simulate --scale: %s\n", s.status().to_string().c_str());
      return s.status().code() == core::Code::kInvalidArgument ? 2 : 1;
    }
    setups.push_back(std::move(s).value());
  }
  if (args.json) {
    print_scale_json(setups);
  } else {
    print_scale_table(setups);
  }
  return 0;
}

// ---- --validate: bench e2e's configurations, simulated against measured.

namespace {

struct Scenario {
  std::string name;
  JobConfig job;
  sim::SimulateConfig sim;
  std::vector<std::string> bench_sets;  // --set arguments of the real run
  std::string measured;                 // a file of bench e2e --json lines, or empty
  bool needs_root = false;
};

// The two configurations bench e2e runs (docs/benchmarks.md), with the rates measured on this
// machine (docs/design figures: memcpy 13 GB/s, UCX shared memory 8.6 GB/s, TCP with 2 MiB
// segments 1.6 GB/s; an emulated host's link 1 Gbit/s = 0.125 GB/s).
std::vector<Scenario> validation_scenarios(const SimulateArgs& args) {
  std::vector<Scenario> out;
  Scenario one;
  one.name = "one host";
  one.job = default_e2e_workload();
  one.sim.gpus_per_host = one.job.rollouts;  // every rollout and the one relay on one host
  one.sim.stage_gbps = 13.0;
  one.sim.trainer_gbps = 8.6;
  one.sim.link_gbps = 8.6;
  one.sim.local_gbps = 8.6;
  one.sim.h2d_gbps = 13.0;
  one.measured = args.measured;
  out.push_back(one);

  Scenario four;
  four.name = "four emulated hosts";
  four.job = default_e2e_workload();
  four.job.hosts.count = 4;
  four.job.hosts.link_rate = "1gbit";
  four.job.relays = 4;
  four.job.actor.weight_bytes = 32u << 20;
  four.bench_sets = {"hosts.count=4", "hosts.link_rate=1gbit", "actor.weight_bytes=33554432"};
  four.sim.gpus_per_host = four.job.rollouts / 4;
  four.sim.stage_gbps = 13.0;
  four.sim.trainer_gbps = 0.125;
  four.sim.link_gbps = 0.125;
  four.sim.local_gbps = 1.6;  // UCX over TCP inside an emulated host
  four.sim.h2d_gbps = 13.0;
  four.measured = args.measured_hosts;
  four.needs_root = true;
  out.push_back(four);
  // The CPU the job's processes share: this machine's cores. The costs were measured apart from
  // bench e2e (docs/benchmarks.md, "Validation with a CPU model"): one rollout alone on the
  // default workload, with reports every 25 ms and every 5 ms (CPU seconds of the rollout and
  // manager processes from /proc/PID/stat, per decode step and per report; the generation time
  // lost per report from the rollout's own accounts), and a loopback TCP stream of 2 GiB
  // (getrusage of both ends).
  const unsigned hw = std::thread::hardware_concurrency();
  for (auto& s : out) {
    s.sim.progress_s = 0;
    s.sim.cpu.cores = hw > 0 ? hw : 1;
    s.sim.cpu.step_cpu_ms = 0.226;
    s.sim.cpu.report_cpu_ms = 0.18;
    s.sim.cpu.report_stall_ms = 0.31;
    s.sim.cpu.cpu_s_per_gb = 0.35;
    s.sim.notes = {
        "rates measured on this machine (docs/design.md): memcpy 13 GB/s, UCX shared memory 8.6 "
        "GB/s, UCX TCP 1.6 GB/s, an emulated link 1 Gbit/s",
        fmt::format("CPU model: {} cores shared (hardware_concurrency); per decode step {} ms, "
                    "per report {} ms (rollout 0.076 + manager 0.103), a report stops generation "
                    "{} ms, {} CPU s per GB pulled: one rollout alone (sluice run, report_ms 25 "
                    "and 5) and a loopback TCP stream, measured at 33e16be (docs/benchmarks.md)",
                    s.sim.cpu.cores, s.sim.cpu.step_cpu_ms, s.sim.cpu.report_cpu_ms,
                    s.sim.cpu.report_stall_ms, s.sim.cpu.cpu_s_per_gb),
        "not in the CPU model: the relays' serving and the chain between them, the actor's "
        "publish, prefill and weight switches (their times are as without it)"};
  }
  return out;
}

}  // namespace

core::Result<std::map<std::string, json>> parse_bench_e2e_rows(const std::string& text,
                                                               const std::string& where) {
  std::map<std::string, json> by_mode;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && !j.contains("mode") && j.contains("exactly_once_failed")) {
      const std::uint64_t failed = j.value("exactly_once_failed", std::uint64_t{0});
      if (failed > 0) {
        return core::failed_precondition(
            fmt::format("{}: the bench's exactly-once check failed in {} of {} runs", where, failed,
                        j.value("runs", std::uint64_t{0})));
      }
      continue;
    }
    if (!j.is_object() || !j.contains("mode") || !j["mode"].is_string()) {
      return core::invalid_argument(
          fmt::format("{}: not a bench e2e --json line: {}", where, line.substr(0, 80)));
    }
    by_mode[j["mode"].get<std::string>()] = j;
  }
  if (by_mode.empty()) return core::invalid_argument(where + ": no bench e2e --json lines");
  return by_mode;
}

namespace {

// --set overrides go to both sides of a scenario: the bench run measured and the job simulated
// (a smaller job for a quick check, say).
core::Status apply_overrides(Scenario& s, const std::vector<std::string>& overrides) {
  if (overrides.empty()) return {};
  core::config::Json doc = core::config::to_json(s.job);
  for (const auto& o : overrides)
    SLUICE_TRY(core::config::apply_override(doc, o));
  JobConfig job;
  SLUICE_TRY(core::config::parse(doc, job));
  SLUICE_TRY(job.validate());
  s.job = std::move(job);
  s.bench_sets.insert(s.bench_sets.end(), overrides.begin(), overrides.end());
  return {};
}

core::Result<std::string> measure(const Scenario& s, const std::string& modes) {
  std::string cmd = fmt::format("'{}' bench e2e --json --modes {}", self_exe(), modes);
  for (const auto& set : s.bench_sets)
    cmd += " --set " + set;
  std::fprintf(stderr, "validate %s: measuring: %s\n", s.name.c_str(), cmd.c_str());
  std::vector<std::string> argv = {self_exe(), "bench", "e2e", "--json", "--modes", modes};
  for (const auto& set : s.bench_sets)
    argv.insert(argv.end(), {"--set", set});
  return run_capture(argv, {}, kMeasureBackstop);
}

double num(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : std::nan("");
}

std::string pct_diff(double sim, double real) {
  if (!(real > 0) || std::isnan(sim)) return "-";
  return fmt::format("{:+.1f}%", 100 * (sim - real) / real);
}

}  // namespace

int run_simulate_validate(const SimulateArgs& args) {
  const std::string mode_list = args.modes.empty() ? kSimulateModes : args.modes;
  auto modes = parse_sim_modes(mode_list);
  if (!modes.is_ok()) {
    std::fprintf(stderr, "sluice simulate --validate: %s\n", modes.status().to_string().c_str());
    return 2;
  }
  int worst = 0;
  bool all_within = true;
  for (Scenario& s : validation_scenarios(args)) {
    if (core::Status st = apply_overrides(s, args.overrides); !st.is_ok()) {
      std::fprintf(stderr, "sluice simulate --validate: --set: %s\n", st.to_string().c_str());
      return 2;
    }
    std::string text;
    std::string source = s.measured;
    if (!s.measured.empty()) {
      std::ifstream f(s.measured);
      if (!f) {
        std::fprintf(stderr, "sluice simulate --validate: cannot read %s\n", s.measured.c_str());
        return 2;
      }
      text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    } else if (s.needs_root && ::geteuid() != 0) {
      std::string sets;
      for (const auto& set : s.bench_sets)
        sets += " --set " + set;
      std::printf(
          "== %s: not measured (emulated hosts need root: run as root, or give "
          "--measured-hosts FILE from `sudo sluice bench e2e --json%s`)\n\n",
          s.name.c_str(), sets.c_str());
      continue;
    } else {
      auto t = measure(s, mode_list);
      if (!t.is_ok()) {
        std::fprintf(stderr, "sluice simulate --validate: %s\n", t.status().to_string().c_str());
        return 1;
      }
      text = *t;
      source = "a bench e2e run just now";
    }
    auto measured = parse_bench_e2e_rows(text, source);
    if (!measured.is_ok()) {
      std::fprintf(stderr, "sluice simulate --validate: %s\n",
                   measured.status().to_string().c_str());
      return 2;
    }
    auto st = settle_job(s.job);
    if (!st.is_ok()) {
      std::fprintf(stderr, "sluice simulate --validate: %s\n", st.to_string().c_str());
      return 1;
    }
    const sim::SimInput in = simulation_input(s.job, s.sim);
    auto ran = simulate_modes(in, *modes, true);
    if (!ran.is_ok()) {
      std::fprintf(stderr, "sluice simulate --validate: %s\n", ran.status().to_string().c_str());
      return 1;
    }
    std::printf("== %s: simulated against measured (%s)\n", s.name.c_str(), source.c_str());
    print_job_line(in);
    print_notes(in);
    std::printf("%-16s %9s %9s %7s %9s %9s %7s %7s %7s %8s %8s\n", "mode", "sim tok/s", "real",
                "diff", "sim stdy", "real", "diff", "sim utl", "real", "sim wst", "real");
    for (const auto& r : *ran) {
      auto it = measured->find(r.label);
      if (it == measured->end()) {
        std::printf("%-16s %9.0f %9s   (not in the measured run)\n", r.label.c_str(),
                    r.tokens_per_s, "-");
        continue;
      }
      const json& m = it->second;
      const double real = num(m, "tokens_per_s"), real_steady = num(m, "steady_tokens_per_s");
      const double d = real > 0 ? std::fabs(r.tokens_per_s - real) / real : 1.0;
      if (d > 0.10) all_within = false;
      worst = std::max(worst, static_cast<int>(std::lround(100 * d)));
      std::printf("%-16s %9.0f %9.0f %7s %9.0f %9.0f %7s %6.1f%% %6.1f%% %7.2f%% %7.2f%%\n",
                  r.label.c_str(), r.tokens_per_s, real, pct_diff(r.tokens_per_s, real).c_str(),
                  r.steady_tokens_per_s, real_steady,
                  pct_diff(r.steady_tokens_per_s, real_steady).c_str(), 100 * r.rollout_util,
                  100 * num(m, "rollout_util"), 100 * r.weight_stall_frac,
                  100 * num(m, "weight_stall_frac"));
    }
    std::printf("\n");
  }
  std::printf("largest throughput difference: %d%% (target: within 10%% for every mode): %s\n",
              worst, all_within ? "met" : "not met");
  return 0;
}

// ---- --update-only: the weight-movement model for one version.

namespace {

// The setup's update with the ways of signing and verifying side by side, host-share relays:
// what each `--set` would show. Relays that verify on the CPU take as many cores as a trainer
// host digests with.
struct Variant {
  std::string label;
  double update_s = 0;
};

std::vector<Variant> verification_variants(const sim::SimulateConfig& base, std::uint32_t rollouts,
                                           std::uint64_t bytes, std::uint64_t chunk) {
  constexpr std::uint64_t kLeafBytes = 64u << 10;
  std::vector<Variant> out;
  for (const char* signing : {"after-staging", "streamed"}) {
    sim::SimulateConfig c = base;
    c.relay_holds = "host-share";
    c.signing = signing;
    auto add = [&](std::string label, const sim::SimulateConfig& v) {
      out.push_back({fmt::format("{}, {}", signing, label),
                     sim::update_times(v, rollouts, bytes, chunk).switch_end_s});
    };
    sim::SimulateConfig relays = c;
    relays.device_sha256_gbps = 0;
    relays.relay_digest_cores = c.trainer_digest_cores;
    if (relays.relay_digest_cores > 0 && relays.digest_gbps_per_core > 0) {
      add(fmt::format("relays verify on {} cores", relays.relay_digest_cores), relays);
    }
    if (c.device_sha256_gbps > 0) {
      sim::SimulateConfig gpus = c;
      gpus.relay_digest_cores = 0;
      gpus.device_digest_leaf_bytes = 0;
      add("GPUs verify, a chunk a thread", gpus);
      gpus.device_digest_leaf_bytes = kLeafBytes;
      add("GPUs verify 64 KiB leaves (not built)", gpus);
    }
    sim::SimulateConfig none = c;
    none.relay_digest_cores = 0;
    none.device_sha256_gbps = 0;
    add("nobody verifies (not allowed)", none);
  }
  return out;
}

}  // namespace

int run_simulate_update(const SimulateArgs& args) {
  if (args.jobs.size() != 1) {
    std::fprintf(stderr, "sluice simulate --update-only: give one job file\n");
    return 2;
  }
  auto in = load_simulation(args.jobs[0], args.overrides);
  if (!in.is_ok()) {
    std::fprintf(stderr, "sluice simulate --update-only: %s\n", in.status().to_string().c_str());
    return 2;
  }
  const sim::SimulateConfig& c = in->sim;
  const std::uint64_t bytes = in->actor.weight_bytes;
  const std::uint64_t chunk = in->actor.chunk_bytes;
  // Both arrangements, whatever the file says: relays of whole versions, and host-share relays.
  sim::SimulateConfig whole_c = c, share_c = c;
  whole_c.relay_holds = "whole";
  share_c.relay_holds = "host-share";
  const sim::UpdateTimes whole = sim::update_times(whole_c, in->rollouts, bytes, chunk);
  const sim::UpdateTimes share = sim::update_times(share_c, in->rollouts, bytes, chunk);
  const std::uint32_t gpus = in->rollouts * c.gpus_per_rollout;
  auto to_json = [](const sim::UpdateTimes& u) {
    return json{{"stage_s", u.stage_s},
                {"digest_s", u.digest_s},
                {"relays_start_s", u.relays_start_s},
                {"first_relay_s", u.first_relay_s},
                {"last_relay_s", u.last_relay_s},
                {"relay_bytes", u.relay_bytes},
                {"switch_start_s", u.switch_start_s},
                {"switch_end_s", u.switch_end_s},
                {"stall_s", u.stall_s},
                {"verify_tail_s", u.verify_tail_s},
                {"update_s", u.switch_end_s}};
  };
  const std::vector<Variant> variants = verification_variants(c, in->rollouts, bytes, chunk);
  const sim::DeviceVerify verify = sim::device_verify(c, bytes, chunk);
  if (args.json) {
    json o = to_json(whole);
    o["bytes"] = bytes;
    o["inference_gpus"] = gpus;
    o["hosts"] = whole.hosts;
    o["trainer_gpus"] = c.trainer_gpus;
    o["trainer_hosts"] = sim::trainer_hosts(c);
    o["floor_s"] = whole.floor_s;
    o["host_share"] = to_json(share);
    json vs = json::array();
    for (const Variant& v : variants)
      vs.push_back({{"variant", v.label}, {"update_s", v.update_s}});
    o["variants"] = vs;
    std::printf("%s\n", o.dump().c_str());
    return 0;
  }
  std::printf(
      "weight update of %.3g GB (%.0f GiB) from %u trainer GPUs (%u hosts) to %u inference "
      "GPUs on %u hosts (%u rollouts x %u GPUs), %s broadcast, %.0f MiB chunks\n",
      static_cast<double>(bytes) / 1e9, static_cast<double>(bytes) / (1u << 30), c.trainer_gpus,
      sim::trainer_hosts(c), gpus, whole.hosts, in->rollouts, c.gpus_per_rollout,
      c.broadcast.c_str(), static_cast<double>(chunk) / (1u << 20));
  print_notes(*in);
  const double master_gbps = std::min(c.link_gbps, sim::trainer_hosts(c) * c.trainer_gbps);
  std::printf("seconds from the publish call; every rollout asks for the version at once\n");
  std::printf("%-48s %12s %12s\n", "", "whole", "host-share");
  std::printf("%-48s %12s %12s\n", "", "(relays)", "(relays)");
  std::printf("%-48s %9.0f GB %9.0f GB\n", "each relay holds", whole.relay_bytes / 1e9,
              share.relay_bytes / 1e9);
  std::printf("%-48s %12.3f %12.3f\n", "trainer has staged it (the actor's stall)", whole.stage_s,
              share.stage_s);
  std::printf("%-48s %12.3f %12.3f\n", "trainer has staged and digested every chunk",
              whole.digest_s, share.digest_s);
  std::printf("%-48s %12.3f %12.3f\n",
              c.signing == "streamed" ? "relays start: first batch signed (streamed)"
                                      : "relays start: manifest signed (after staging)",
              whole.relays_start_s, share.relays_start_s);
  std::printf("%-48s %12.3f %12.3f\n", "first relay holds its part", whole.first_relay_s,
              share.first_relay_s);
  std::printf("%-48s %12.3f %12.3f\n", "last relay holds its part", whole.last_relay_s,
              share.last_relay_s);
  std::printf("%-48s %12.3f %12.3f\n", "GPUs start loading their shares (stall starts)",
              whole.switch_start_s, share.switch_start_s);
  if (verify.rate > 0) {
    std::printf("%-48s %12.3f %12.3f\n", "GPUs verify: the last chunk, after it lands",
                whole.verify_tail_s, share.verify_tail_s);
  }
  std::printf("%-48s %12.3f %12.3f\n", "last GPU switched (stall ends): the update",
              whole.switch_end_s, share.switch_end_s);
  std::printf("%-48s %12.3f %12.3f\n", "the GPU stall alone", whole.stall_s, share.stall_s);
  std::printf(
      "rates: staging %.0f GB/s; a master relay reads striped from %u trainer hosts at "
      "%.0f GB/s, %.0f GB/s in all; relay -> relay %.0f GB/s; a GPU loads its 1/%u "
      "share (%.1f GB) at %.0f GB/s\n",
      c.stage_gbps, sim::trainer_hosts(c), c.trainer_gbps, master_gbps, c.link_gbps,
      c.gpus_per_rollout, static_cast<double>(bytes) / c.gpus_per_rollout / 1e9, c.h2d_gbps);
  if (c.digest_gbps_per_core > 0) {
    auto cores = [](std::uint32_t n) {
      return n == 0 ? std::string("not modelled") : fmt::format("{} cores", n);
    };
    std::printf(
        "digests: SHA-256 at %.2f GB/s a core; a trainer host digests with %s, a relay host "
        "verifies with %s; signing %s, %.2f ms a signature%s\n",
        c.digest_gbps_per_core, cores(c.trainer_digest_cores).c_str(),
        c.relay_digest_cores == 0 && c.device_sha256_gbps > 0
            ? "no cores (it forwards; the GPUs verify)"
            : cores(c.relay_digest_cores).c_str(),
        c.signing.c_str(), c.sign_ms,
        c.signing == "streamed" ? fmt::format(", batches of {} chunks", c.sign_batch_chunks).c_str()
                                : "");
  }
  if (verify.rate > 0) {
    const double per_thread = c.device_sha256_gbps * 1e9 / c.device_threads;
    std::printf(
        "GPUs verify on the device: SHA-256 at %.1f GB/s a GPU with its %u threads busy, %.2f "
        "MB/s a thread; a GPU hashes %.0f %s of %s at once: %.2f GB/s a GPU, "
        "the last %.3f s after it lands%s\n",
        c.device_sha256_gbps, c.device_threads, per_thread / 1e6, verify.in_flight,
        c.device_digest_leaf_bytes > 0 ? "leaves" : "chunks",
        verify.unit_bytes >= (1u << 20)
            ? fmt::format("{:g} MiB", verify.unit_bytes / (1u << 20)).c_str()
            : fmt::format("{:g} KiB", verify.unit_bytes / 1024).c_str(),
        verify.rate / 1e9, verify.tail_s,
        c.device_digest_leaf_bytes > 0 ? " (with its chunk's root)" : "");
  }
  std::printf(
      "line-rate floor (each host receives only its GPUs' share at %.0f GB/s, nothing "
      "else counted): %.3f s\n",
      c.link_gbps, whole.floor_s);
  std::printf("the update with host-share relays, signed and verified each way (--set):\n");
  for (const Variant& v : variants)
    std::printf("  %-60s %9.3f s\n", v.label.c_str(), v.update_s);
  std::printf(
      "published for comparison (not measured here): Perplexity "
      "1.3 s, checkpoint-engine 16 s (1T parameters)\n");
  return 0;
}

}  // namespace sluice::cli
