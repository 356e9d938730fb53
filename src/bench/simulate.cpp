// `sluice simulate`: the same table and JSON keys as `sluice bench e2e`, plus where each mode's
// GPU time went and throughput over the steady middle of the job.
#include "bench/simulate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include "bench/bench_util.hpp"
#include "bench/result_table.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "launch/job_setup.hpp"
#include "rollout/manager.hpp"
#include "rollout/mode_policy.hpp"
#include "sim/simulator.hpp"

namespace sluice::cli {

using nlohmann::json;

namespace {

json to_json(const sim::ModeResult& r, const sim::ModeResult* sync, const sim::ModeResult* sl) {
  json o = mode_json(mode_figures(r.label, r));
  if (sync) o["ratio_to_sync"] = ratio(r.tokens_per_s, sync->tokens_per_s);
  if (sl) o["sluice_ratio"] = ratio(sl->tokens_per_s, r.tokens_per_s);
  const double all = r.gpus * r.wall_s;
  auto share = [&](double x) { return all > 0 ? x / all : 0.0; };
  o["gpus"] = r.gpus;
  o["gpu_time"] = json{{"generating", share(r.gpu.generating)},
                       {"loading", share(r.gpu.loading)},
                       {"barrier", share(r.gpu.barrier)},
                       {"idle", share(r.gpu.idle)}};
  o["steps"] = r.steps;
  o["versions"] = r.versions;
  o["mixed_version_consumed"] = r.mixed;
  o["trajectories"] = r.total_trajectories;
  o["trained_trajectories"] = r.trained_trajectories;
  o["trained_twice"] = r.trained_twice;
  o["version_regressions"] = r.version_regressions;
  o["events"] = r.events;
  o["reports"] = r.reports;
  o["run_s"] = r.run_s;
  return o;
}

}  // namespace

void print_job_line(const sim::SimInput& input) {
  auto stats = rollout::length_stats(input.engine.lengths, input.engine.seed, 20000);
  std::printf(
      "simulated job: %u rollouts x %u GPUs (%u GPUs), %u sequences each, %llu prompts x %u "
      "samples, batch %u, lengths p50 %llu p99 %llu max %llu, %.2f GB a version\n",
      input.rollouts, input.sim.gpus_per_rollout, input.rollouts * input.sim.gpus_per_rollout,
      input.engine.max_sequences, static_cast<unsigned long long>(input.manager.prompts),
      input.manager.group_size, input.manager.batch_trajectories,
      static_cast<unsigned long long>(stats.is_ok() ? stats->p50 : 0),
      static_cast<unsigned long long>(stats.is_ok() ? stats->p99 : 0),
      static_cast<unsigned long long>(stats.is_ok() ? stats->max : 0),
      static_cast<double>(input.actor.weight_bytes) / 1e9);
}

sim::SimInput simulation_input(const JobConfig& j, const sim::SimulateConfig& simulate) {
  sim::SimInput in;
  in.manager = j.manager;
  in.engine = j.rollout.sim;
  in.env_latency = j.rollout.env_latency;
  in.rollouts = j.rollouts;
  in.report_ms = j.rollout.report_ms;
  in.actor.batch_trajectories = j.actor.batch_trajectories;
  in.actor.group_size = j.actor.group_size;
  in.actor.max_staleness = j.actor.max_staleness;
  in.actor.staleness_policy = j.actor.staleness_policy;
  in.actor.stale_weight = j.actor.stale_weight;
  in.actor.collect_ms = j.actor.collect_ms;
  in.actor.train_ms_fixed = j.actor.train_ms_fixed;
  in.actor.train_ms_per_token = j.actor.train_ms_per_token;
  in.actor.weight_bytes = j.actor.weight_bytes;
  in.actor.chunk_bytes = j.actor.chunk_bytes;
  in.sim = simulate;
  return in;
}

core::Result<sim::SimInput> load_simulation(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  SLUICE_ASSIGN_OR_RETURN(core::config::Json doc, read_job_file(path));
  for (const auto& o : overrides)
    SLUICE_TRY(core::config::apply_override(doc, o));
  SimulateJob sj;
  SLUICE_TRY(core::config::parse(doc, sj).with_context(path));
  SLUICE_TRY(settle_job(sj.job).with_context(path));
  sim::SimInput in = simulation_input(sj.job, sj.simulate);
  if (in.manager.prompts == 0) {
    return core::invalid_argument(path +
                                  ": manager.prompts must be set: a simulation runs the "
                                  "job to its end");
  }
  return in;
}

core::Result<std::vector<std::string>> parse_sim_modes(const std::string& list) {
  std::vector<std::string> modes = split_commas(list);
  std::set<std::string> named;
  for (const auto& m : modes) {
    if (!named.insert(m).second) {
      return core::invalid_argument(fmt::format("mode '{}' is named twice in --modes", m));
    }
    if (!sim::sim_only_label(m) && !rollout::parse_mode_variant(m).is_ok()) {
      return core::invalid_argument(
          fmt::format("unknown mode '{}' (sync, one-step-off, stream, partial-rollout, sluice, {}, "
                      "{})",
                      m, rollout::kModeVariants, sim::kSimOnlyLabels));
    }
  }
  return modes;
}

core::Result<sim::SimInput> split_input(const sim::SimInput& in, double trainer_share) {
  const std::uint32_t gpr = in.sim.gpus_per_rollout;
  const std::uint32_t cluster = in.rollouts * gpr + in.sim.trainer_gpus;
  if (in.sim.trainer_gpus == 0) {
    return core::invalid_argument(
        "simulate.trainer_gpus must be set to split the cluster (the trainer's speed a GPU is "
        "actor.train_ms_per_token x trainer_gpus)");
  }
  if (!in.sim.gpu_types.empty()) {
    return core::invalid_argument("a split of the cluster does not apply with simulate.gpu_types");
  }
  if (!(trainer_share > 0 && trainer_share < 1)) {
    return core::invalid_argument(fmt::format("trainer share {} is not in (0, 1)", trainer_share));
  }
  const auto rollouts = static_cast<std::uint32_t>(
      std::floor((1 - trainer_share) * static_cast<double>(cluster) / gpr + 1e-9));
  const std::uint32_t trainer = cluster - rollouts * gpr;
  if (rollouts == 0 || trainer == 0) {
    return core::invalid_argument(
        fmt::format("trainer share {} of {} GPUs leaves {} rollouts of {} GPUs and {} trainer GPUs",
                    trainer_share, cluster, rollouts, gpr, trainer));
  }
  sim::SimInput out = in;
  out.rollouts = rollouts;
  out.sim.trainer_gpus = trainer;
  out.actor.train_ms_per_token =
      in.actor.train_ms_per_token * in.sim.trainer_gpus / static_cast<double>(trainer);
  return out;
}

core::Result<sim::SimInput> colocated_input(const sim::SimInput& in) {
  if (in.sim.trainer_gpus == 0) {
    return core::invalid_argument(
        "sync-colocated needs simulate.trainer_gpus (the trainer's speed a GPU is "
        "actor.train_ms_per_token x trainer_gpus)");
  }
  if (!in.sim.gpu_types.empty()) {
    return core::invalid_argument("sync-colocated does not apply with simulate.gpu_types");
  }
  const std::uint32_t gpr = in.sim.gpus_per_rollout;
  const std::uint32_t cluster = in.rollouts * gpr + in.sim.trainer_gpus;
  sim::SimInput out = in;
  out.rollouts = cluster / gpr;
  out.sim.trainer_gpus = cluster;
  out.actor.train_ms_per_token =
      in.actor.train_ms_per_token * in.sim.trainer_gpus / static_cast<double>(cluster);
  return out;
}

core::Result<std::vector<double>> parse_splits(const std::string& list) {
  std::vector<double> out;
  for (const auto& item : split_commas(list)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || !std::isfinite(v)) {
      return core::invalid_argument(
          fmt::format("--splits: '{}' is not a number (the trainer's share of the GPUs)", item));
    }
    if (!(v > 0 && v < 1)) {
      return core::invalid_argument(fmt::format(
          "--splits: {} is not a share of the GPUs: each must be above 0 and below 1", item));
    }
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      return core::invalid_argument(fmt::format("--splits: {} is named twice", item));
    }
    out.push_back(v);
  }
  if (out.empty()) return core::invalid_argument("--splits: no share given");
  return out;
}

core::Result<std::vector<sim::ModeResult>> simulate_modes(const sim::SimInput& in,
                                                          const std::vector<std::string>& modes,
                                                          bool quiet) {
  // The manager logs every publish and join at info: quiet unless the user asked for more.
  if (core::log::level() == core::log::Level::kInfo) core::log::set_level(core::log::Level::kWarn);
  std::vector<sim::ModeResult> rows;
  for (const auto& m : modes) {
    sim::Progress progress;
    if (!quiet)
      progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    sim::SimInput colocated;
    if (m == "sync-colocated") {
      SLUICE_ASSIGN_OR_RETURN(colocated, colocated_input(in));
    }
    SLUICE_ASSIGN_OR_RETURN(
        sim::ModeResult r, sim::simulate_mode(m == "sync-colocated" ? colocated : in, m, progress));
    if (!quiet) {
      std::fprintf(stderr, "simulated %s: %.0f s of job in %.1f s (%llu events)\n", m.c_str(),
                   r.wall_s, r.run_s, static_cast<unsigned long long>(r.events));
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

namespace {

// Repack on against off, one length distribution per row.
int run_repack_bench(const SimulateArgs& args, const sim::SimInput& base) {
  const std::vector<LengthCase> dists =
      repack_bench_lengths(base.engine.lengths, args.spreads, args.lengths);
  if (!args.json) {
    std::printf("%-40s %12s %12s %8s %8s %8s\n", "lengths", "repack on", "repack off", "on/off",
                "moves", "p99/p50");
  }
  bool failed = false;
  for (const auto& d : dists) {
    sim::SimInput in = base;
    in.engine.lengths = d.lengths;
    auto stats = rollout::length_stats(d.lengths, in.engine.seed, 20000);
    if (!stats.is_ok()) {
      std::fprintf(stderr, "sluice simulate: %s: %s\n", d.name.c_str(),
                   stats.status().to_string().c_str());
      return 2;
    }
    auto on = sim::simulate_mode(in, "sluice", [](const std::string&) {});
    auto off = sim::simulate_mode(in, "sluice-norepack", [](const std::string&) {});
    if (!on.is_ok() || !off.is_ok()) {
      std::fprintf(stderr, "sluice simulate: %s: %s\n", d.name.c_str(),
                   (on.is_ok() ? off.status() : on.status()).to_string().c_str());
      failed = true;
      continue;
    }
    const double r = ratio(on->tokens_per_s, off->tokens_per_s);
    const double spread =
        stats->p50 > 0 ? static_cast<double>(stats->p99) / static_cast<double>(stats->p50) : 0.0;
    if (args.json) {
      std::printf("%s\n",
                  json{{"lengths", d.name},
                       {"repack_on_tokens_per_s", on->tokens_per_s},
                       {"repack_off_tokens_per_s", off->tokens_per_s},
                       {"on_off", r},
                       {"steady_on_off", ratio(on->steady_tokens_per_s, off->steady_tokens_per_s)},
                       {"repacks", on->repacks},
                       {"p50", stats->p50},
                       {"p99", stats->p99}}
                      .dump()
                      .c_str());
    } else {
      std::printf("%-40s %12.0f %12.0f %7.3fx %8llu %8.1f\n", d.name.c_str(), on->tokens_per_s,
                  off->tokens_per_s, r, static_cast<unsigned long long>(on->repacks), spread);
    }
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}

}  // namespace

int run_simulate(const SimulateArgs& args) {
  if (args.scale) return run_simulate_scale(args);
  if (args.validate) return run_simulate_validate(args);
  if (args.update_only) return run_simulate_update(args);
  if (args.jobs.size() != 1) {
    std::fprintf(stderr, "sluice simulate: give one job file (several only with --scale)\n");
    return 2;
  }
  auto in = load_simulation(args.jobs[0], args.overrides);
  if (!in.is_ok()) {
    std::fprintf(stderr, "sluice simulate: %s\n", in.status().to_string().c_str());
    return 2;
  }
  if (args.repack_bench) {
    if (core::log::level() == core::log::Level::kInfo) {
      core::log::set_level(core::log::Level::kWarn);
    }
    return run_repack_bench(args, *in);
  }
  auto modes = parse_sim_modes(args.modes.empty() ? kSimulateModes : args.modes);
  if (!modes.is_ok()) {
    std::fprintf(stderr, "sluice simulate: %s\n", modes.status().to_string().c_str());
    return 2;
  }
  if (core::log::level() == core::log::Level::kInfo) core::log::set_level(core::log::Level::kWarn);
  const sim::SimInput& input = *in;
  if (!args.json) {
    print_job_line(input);
    for (const auto& note : input.sim.notes)
      std::printf("  assumption: %s\n", note.c_str());
    std::fflush(stdout);
  }
  auto ran = simulate_modes(input, *modes, args.json);
  if (!ran.is_ok()) {
    std::fprintf(stderr, "sluice simulate: %s\n", ran.status().to_string().c_str());
    return 1;
  }
  std::vector<sim::ModeResult> rows = std::move(ran).value();
  auto find = [&](const std::string& m) -> const sim::ModeResult* {
    for (const auto& r : rows) {
      if (r.label == m) return &r;
    }
    return nullptr;
  };
  const sim::ModeResult* sync = find("sync");
  const sim::ModeResult* sl = find("sluice");
  if (args.json) {
    for (const auto& r : rows)
      std::printf("%s\n", to_json(r, sync, sl).dump().c_str());
    return 0;
  }
  std::vector<ModeFigures> figures;
  for (const auto& r : rows)
    figures.push_back(mode_figures(r.label, r));
  print_mode_table(figures);
  std::printf(
      "\nwhere GPU time went (share of GPUs x the job's simulated time)\n%-18s %9s %9s "
      "%9s %9s %10s\n",
      "mode", "generate", "load", "barrier", "idle", "job (s)");
  for (const auto& r : rows) {
    const double all = r.gpus * r.wall_s;
    auto pct = [&](double x) { return all > 0 ? 100 * x / all : 0.0; };
    std::printf("%-18s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %10.1f\n", r.label.c_str(),
                pct(r.gpu.generating), pct(r.gpu.loading), pct(r.gpu.barrier), pct(r.gpu.idle),
                r.wall_s);
  }
  print_free_slots(figures,
                   "\nfree rollout slots (share of all slot time), as in sluice bench e2e");
  return 0;
}

}  // namespace sluice::cli
