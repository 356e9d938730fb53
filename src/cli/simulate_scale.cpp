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

#include "cli/bench_e2e.hpp"
#include "cli/bench_util.hpp"
#include "cli/job_setup.hpp"
#include "cli/simulate.hpp"
#include "sim/simulator.hpp"
#include "sim/weights.hpp"

namespace sluice::cli {

using nlohmann::json;

namespace {

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

const sim::ModeResult* find_mode(const std::vector<sim::ModeResult>& rows, const std::string& m) {
  for (const auto& r : rows) {
    if (r.label == m) return &r;
  }
  return nullptr;
}

std::string ratio_text(const sim::ModeResult* a, const sim::ModeResult* b, bool steady) {
  if (!a || !b) return "-";
  return fmt::format("{:.2f}", steady ? ratio(a->steady_tokens_per_s, b->steady_tokens_per_s)
                                      : ratio(a->tokens_per_s, b->tokens_per_s));
}

void print_notes(const sim::SimInput& in) {
  for (const auto& note : in.sim.notes)
    std::printf("  assumption: %s\n", note.c_str());
}

}  // namespace

// ---- --scale: every mode on each setup, one table.

int run_simulate_scale(const SimulateArgs& args) {
  const std::vector<std::string> jobs = args.jobs.empty() ? kScaleJobs : args.jobs;
  auto modes = parse_sim_modes(args.modes);
  if (!modes.is_ok()) {
    std::fprintf(stderr, "sluice simulate --scale: %s\n", modes.status().to_string().c_str());
    return 2;
  }
  struct Setup {
    std::string name;
    std::uint32_t gpus = 0;  // the cluster: rollouts' GPUs and the trainer's
    std::vector<sim::ModeResult> rows;
  };
  std::vector<Setup> setups;
  for (const auto& path : jobs) {
    auto in = load_simulation(path, args.overrides);
    if (!in.is_ok()) {
      std::fprintf(stderr, "sluice simulate --scale: %s\n", in.status().to_string().c_str());
      return 2;
    }
    Setup s;
    s.name = std::filesystem::path(path).stem().string();
    s.gpus = in->rollouts * in->sim.gpus_per_rollout + in->sim.trainer_gpus;
    if (!args.json) {
      std::printf("== %s: %u GPUs (%u for rollouts, %u for the trainer)\n", s.name.c_str(), s.gpus,
                  in->rollouts * in->sim.gpus_per_rollout, in->sim.trainer_gpus);
      print_job_line(*in);
      print_notes(*in);
      std::fflush(stdout);
    }
    auto ran = simulate_modes(*in, *modes, args.json);
    if (!ran.is_ok()) {
      std::fprintf(stderr, "sluice simulate --scale: %s: %s\n", path.c_str(),
                   ran.status().to_string().c_str());
      return 1;
    }
    s.rows = std::move(ran).value();
    setups.push_back(std::move(s));
  }
  if (args.json) {
    for (const auto& s : setups) {
      const sim::ModeResult* sl = find_mode(s.rows, "sluice");
      for (const auto& r : s.rows) {
        json o{{"setup", s.name},
               {"cluster_gpus", s.gpus},
               {"mode", r.label},
               {"tokens_per_s", r.tokens_per_s},
               {"steady_tokens_per_s", r.steady_tokens_per_s},
               {"rollout_util", r.rollout_util},
               {"weight_stall_frac", r.weight_stall_frac},
               {"staleness_mean", r.staleness_mean},
               {"actor_idle_frac", r.actor_idle_frac},
               {"wall_s", r.wall_s},
               {"run_s", r.run_s}};
        if (sl) {
          o["sluice_ratio"] = ratio(sl->tokens_per_s, r.tokens_per_s);
          o["sluice_steady_ratio"] = ratio(sl->steady_tokens_per_s, r.steady_tokens_per_s);
        }
        std::printf("%s\n", o.dump().c_str());
      }
    }
    return 0;
  }
  std::printf(
      "\ntrained tokens/s per mode; sluice/x: sluice's throughput over the mode's (whole "
      "job, and its steady middle)\n%-22s %6s %-16s %10s %10s %7s %8s %7s %7s %9s %9s\n",
      "setup", "GPUs", "mode", "tokens/s", "steady/s", "util", "w-stall", "a-idle", "stale",
      "sluice/x", "steady/x");
  for (const auto& s : setups) {
    const sim::ModeResult* sl = find_mode(s.rows, "sluice");
    for (const auto& r : s.rows) {
      std::printf("%-22s %6u %-16s %10.0f %10.0f %6.1f%% %7.2f%% %6.1f%% %7.2f %9s %9s\n",
                  s.name.c_str(), s.gpus, r.label.c_str(), r.tokens_per_s, r.steady_tokens_per_s,
                  100 * r.rollout_util, 100 * r.weight_stall_frac, 100 * r.actor_idle_frac,
                  r.staleness_mean, ratio_text(sl, &r, false).c_str(),
                  ratio_text(sl, &r, true).c_str());
    }
  }
  std::printf("\n");
  for (const auto& s : setups) {
    const sim::ModeResult* sl = find_mode(s.rows, "sluice");
    const sim::ModeResult* sync = find_mode(s.rows, "sync");
    const sim::ModeResult* partial = find_mode(s.rows, "partial-rollout");
    const bool target = s.gpus >= 1024;
    std::printf(
        "%-22s sluice / sync %sx (steady %sx)%s; sluice / partial-rollout %sx (steady "
        "%sx)%s\n",
        s.name.c_str(), ratio_text(sl, sync, false).c_str(), ratio_text(sl, sync, true).c_str(),
        target ? " [target >= 5.5]" : "", ratio_text(sl, partial, false).c_str(),
        ratio_text(sl, partial, true).c_str(), target ? " [target >= 1.4]" : "");
    // The trainer bounds every mode: tokens/s over the time the actor was busy (training and
    // publishing) is what the job would reach with generation never in its way.
    if (sl && sl->actor_idle_frac < 1) {
      std::printf(
          "%-22s the trainer's own rate (sluice's tokens over the actor's busy time): %.0f "
          "tokens/s; sync reaches %.0f%% of it, sluice %.0f%%\n",
          "", sl->tokens_per_s / (1 - sl->actor_idle_frac),
          sync ? 100 * sync->tokens_per_s * (1 - sl->actor_idle_frac) / sl->tokens_per_s : 0.0,
          100 * (1 - sl->actor_idle_frac));
    }
  }
  std::printf(
      "Laminar (arXiv 2510.12633) reports up to 5.48x over verl (synchronous) on 1024 "
      "GPUs and 1.39x over partial-rollout on average.\n");
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

// bench e2e --json lines by mode.
core::Result<std::map<std::string, json>> parse_measured(const std::string& text,
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
    if (!j.is_object() || !j.contains("mode") || !j["mode"].is_string()) {
      return core::invalid_argument(
          fmt::format("{}: not a bench e2e --json line: {}", where, line.substr(0, 80)));
    }
    by_mode[j["mode"].get<std::string>()] = j;
  }
  if (by_mode.empty()) return core::invalid_argument(where + ": no bench e2e --json lines");
  return by_mode;
}

core::Result<std::string> measure(const Scenario& s, const std::string& modes) {
  std::string cmd = fmt::format("'{}' bench e2e --json --modes {}", self_exe(), modes);
  for (const auto& set : s.bench_sets)
    cmd += " --set " + set;
  std::fprintf(stderr, "validate %s: measuring: %s\n", s.name.c_str(), cmd.c_str());
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return core::internal_error("could not start: " + cmd);
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
    out.append(buf, n);
  const int rc = ::pclose(p);
  if (rc != 0) return core::internal_error(fmt::format("{} failed ({})", cmd, rc));
  return out;
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
  auto modes = parse_sim_modes(args.modes);
  if (!modes.is_ok()) {
    std::fprintf(stderr, "sluice simulate --validate: %s\n", modes.status().to_string().c_str());
    return 2;
  }
  int worst = 0;
  bool all_within = true;
  for (Scenario& s : validation_scenarios(args)) {
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
      auto t = measure(s, args.modes);
      if (!t.is_ok()) {
        std::fprintf(stderr, "sluice simulate --validate: %s\n", t.status().to_string().c_str());
        return 1;
      }
      text = *t;
      source = "a bench e2e run just now";
    }
    auto measured = parse_measured(text, source);
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
  const sim::Placement p = sim::place(c, in->rollouts);
  const std::vector<double> relay = sim::relay_complete_s(c, p.hosts, bytes, in->actor.chunk_bytes);
  const double first = *std::min_element(relay.begin(), relay.end());
  const double last = *std::max_element(relay.begin(), relay.end());
  const double stage = sim::publish_stall_s(c, bytes);
  const double pull = sim::pull_s(c, bytes);
  const double sw = sim::switch_s(c, bytes);
  const double total = stage + last + pull + sw;
  if (args.json) {
    json o{{"bytes", bytes},       {"inference_gpus", in->rollouts * c.gpus_per_rollout},
           {"hosts", p.hosts},     {"trainer_gpus", c.trainer_gpus},
           {"stage_s", stage},     {"first_relay_s", first},
           {"last_relay_s", last}, {"pull_s", pull},
           {"switch_s", sw},       {"update_s", total}};
    std::printf("%s\n", o.dump().c_str());
    return 0;
  }
  std::printf(
      "weight update of %.3g GB (%.0f GiB) from %u trainer GPUs to %u inference GPUs on "
      "%u hosts (%u rollouts x %u GPUs), %s broadcast, %.0f MiB chunks\n",
      static_cast<double>(bytes) / 1e9, static_cast<double>(bytes) / (1u << 30), c.trainer_gpus,
      in->rollouts * c.gpus_per_rollout, p.hosts, in->rollouts, c.gpus_per_rollout,
      c.broadcast.c_str(), static_cast<double>(in->actor.chunk_bytes) / (1u << 20));
  print_notes(*in);
  std::printf("  trainer stages the version (the actor waits)   %8.3f s  at %.0f GB/s\n", stage,
              c.stage_gbps);
  std::printf(
      "  first relay holds all of it                     %8.3f s  trainer -> relay %.0f GB/s\n",
      first, c.trainer_gbps);
  std::printf(
      "  last relay holds all of it                      %8.3f s  relay -> relay %.0f GB/s\n", last,
      c.link_gbps);
  std::printf("  a rollout pulls it from its relay (background)  %8.3f s  at %.0f GB/s\n", pull,
              c.local_gbps);
  std::printf("  a rollout switches to it (its GPUs stall)       %8.3f s  %.0f GB/s per GPU\n", sw,
              c.h2d_gbps);
  std::printf("  update, publish to the last GPU switched        %8.3f s\n", total);
  // Not the model: what line rate allows if each host received only its own GPUs' share (as a
  // sharded point-to-point update does) instead of a whole copy for its relay.
  const double share = std::min(1.0, static_cast<double>(c.gpus_per_host) / c.gpus_per_rollout);
  std::printf(
      "  for reference (not the model): each host receiving only its GPUs' share at line "
      "rate: %.3f s\n",
      static_cast<double>(bytes) * share / (c.link_gbps * 1e9));
  std::printf(
      "published for comparison: Perplexity 1.3 s, checkpoint-engine 16 s (1T "
      "parameters)\n");
  return 0;
}

}  // namespace sluice::cli
