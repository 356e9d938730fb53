#include "cli/bench_elastic.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "cli/bench_util.hpp"
#include "cli/chaos.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/status.hpp"
#include "core/units.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t from = 0;
  while (from <= s.size()) {
    std::size_t to = std::min(s.find(',', from), s.size());
    if (to > from) out.push_back(s.substr(from, to - from));
    from = to + 1;
  }
  return out;
}

std::vector<json> read_lines(const fs::path& path) {
  std::vector<json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

// Waits until `ready()` or `timeout_s`; false on timeout or when `proc` exited meanwhile.
template <typename F>
bool wait_for(F ready, double timeout_s, core::Subprocess* proc) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_s));
  while (Clock::now() < deadline) {
    if (ready()) return true;
    if (proc && !proc->running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

core::Result<std::unique_ptr<core::Subprocess>> start(std::vector<std::string> argv,
                                                      const fs::path& log) {
  core::Subprocess::Options o;
  o.argv = std::move(argv);
  o.capture_stdout = false;
  o.stderr_path = log.string();
  return core::Subprocess::spawn(o);
}

json median_max(std::vector<double> v) {
  if (v.empty()) return json{{"median", nullptr}, {"max", nullptr}};
  std::sort(v.begin(), v.end());
  double med = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return json{{"median", med}, {"max", v.back()}};
}

struct Plan {
  std::uint32_t from = 0, peak = 0, to = 0;
};

// One design: the job, the scale-up, the scale-down, the checks.
core::Result<json> run_design(const BenchElasticArgs& a, const Plan& plan,
                              const std::string& design, std::uint64_t size, const fs::path& out) {
  const fs::path dir = out / design;
  std::error_code ec;
  fs::remove_all(dir, ec);
  const std::string exe = self_exe();
  const std::uint64_t group = 4;
  json job{{"name", "elastic-" + design},
           {"rollouts", plan.from},
           {"max_rollouts", plan.peak},
           {"progress_s", 0},
           {"timeout_s", a.timeout_s},
           {"log_level", "warn"},
           {"out_dir", dir.string()},
           {"hosts", {{"count", a.hosts}, {"link_rate", a.link_rate}, {"prefix", "sluice-el"}}},
           // Every chunk may come from up to 8 holders at once.
           {"store", {{"sources_per_chunk", 8}}},
           {"manager",
            {{"prompts", a.prompts},
             {"group_size", group},
             {"batch_trajectories", 32},
             {"heartbeat_timeout_ms", 4000}}},
           {"rollout",
            {{"report_ms", 100},
             {"pull_in_flight", 2},
             {"sim",
              {{"max_sequences", 8},
               {"t0_ms", 4.0},
               {"t1_ms", 0.5},
               {"lengths", {{"median", 48}, {"p99", 400}, {"max_len", 512}}}}}}},
           {"actor",
            {{"weight_bytes", size},
             {"chunk_bytes", 1u << 20},
             {"train_ms_per_token", 0.02},
             // A version every 2 s or more: the trainer's link (and its control plane) is not
             // saturated by its own publishing.
             {"train_ms_fixed", 2000},
             {"checkpoint_every_steps", 5},
             {"max_staleness", 4}}}};
  fs::create_directories(out, ec);
  const fs::path job_path = out / ("job-" + design + ".json");
  std::ofstream(job_path) << job.dump(2) << "\n";

  SLUICE_ASSIGN_OR_RETURN(auto run,
                          start({exe, "run", job_path.string()}, out / ("run-" + design + ".log")));
  // The job runs: its actor has trained (and published) a few steps.
  auto steps_done = [&] {
    std::size_t n = 0;
    for (const auto& l : read_lines(dir / "metrics.jsonl"))
      n += l.contains("reward_mean");
    return n >= 3;
  };
  if (!wait_for(steps_done, 300, run.get())) {
    run->signal(SIGTERM).ignore();
    run->wait(Millis(30000)).ignore();
    return core::timeout_error(fmt::format("{}: the job did not train 3 steps within 300 s; see {}",
                                           design, (out / ("run-" + design + ".log")).string()));
  }
  std::vector<std::string> add{exe, "run", "--add",
                               fmt::format("rollout={}", plan.peak - plan.from), dir.string()};
  if (design == "trainer") {
    add.push_back("--set");
    add.push_back(R"(rollout.join_read_from=["relay-0","actor-0"])");
  }
  SLUICE_ASSIGN_OR_RETURN(auto adder, start(add, out / ("add-" + design + ".log")));
  const std::size_t joiners = plan.peak - plan.from;
  bool all_joined = wait_for([&] { return read_lines(dir / "joins.jsonl").size() >= joiners; },
                             a.timeout_s / 2, adder.get());
  json removed = nullptr;
  if (plan.to < plan.peak) {
    SLUICE_ASSIGN_OR_RETURN(
        auto remover, start({exe, "run", "--remove", fmt::format("rollout={}", plan.peak - plan.to),
                             dir.string()},
                            out / ("remove-" + design + ".log")));
    auto code = remover->wait(Millis(60000));
    removed = code.is_ok() ? json(*code) : json(code.status().to_string());
  }
  auto run_code = run->wait(Millis(static_cast<std::int64_t>(a.timeout_s * 1000)));
  if (!run_code.is_ok()) {
    run->signal(SIGTERM).ignore();
    run->wait(Millis(30000)).ignore();
  }
  if (!adder->wait(Millis(30000)).is_ok()) {
    adder->signal(SIGTERM).ignore();
    adder->wait(Millis(10000)).ignore();
  }

  std::vector<double> weights_s, read_s, traj_s;
  std::uint64_t bytes = 0, same_host = 0;
  for (const auto& j : read_lines(dir / "joins.jsonl")) {
    weights_s.push_back(j.value("first_weights_s", -1.0));
    read_s.push_back(j.value("first_read_s", -1.0));
    traj_s.push_back(j.value("first_trajectory_s", -1.0));
    bytes += j.value("pulled_bytes", 0ull);
    same_host += j.value("pulled_same_host_bytes", 0ull);
  }
  json checks = chaos_checks(dir.string(), a.prompts * group);
  std::ifstream sf(dir / "summary.json");
  json summary = json::parse(sf, nullptr, false);
  json mgr = summary.is_object() ? summary.value("manager", json::object()) : json::object();
  json actor = summary.is_object() ? summary.value("actor", json::object()) : json::object();
  bool once = checks.value("completed", false) && checks.value("lost", json(1)) == json(0) &&
              checks.value("consumed_twice", 1ull) == 0;
  return json{{"design", design},
              {"scale", fmt::format("{} -> {} -> {}", plan.from, plan.peak, plan.to)},
              {"joiners", joiners},
              {"joined", weights_s.size()},
              {"all_joined", all_joined},
              {"first_weights_s", median_max(weights_s)},
              {"first_read_s", median_max(read_s)},
              {"first_trajectory_s", median_max(traj_s)},
              {"same_host_share", bytes ? static_cast<double>(same_host) / bytes : 0.0},
              {"removed_exit", removed},
              {"left", mgr.value("left", 0ull)},
              {"declared_dead", mgr.value("dead", 0ull)},
              {"expected", a.prompts * group},
              {"consumed", checks.value("consumed", 0ull)},
              {"lost", checks.value("lost", json())},
              {"consumed_twice", checks.value("consumed_twice", json())},
              {"mixed_version_consumed", actor.value("mixed_version_consumed", json())},
              {"staleness_max", actor.value("staleness_max", json())},
              {"exactly_once", once},
              {"outcome", checks.value("outcome", std::string())},
              {"run_dir", dir.string()}};
}

}  // namespace

int run_bench_elastic(const BenchElasticArgs& a, const std::vector<std::string>& environment) {
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "sluice bench elastic: %s\n", m.c_str());
    return 2;
  };
  std::vector<std::string> st = split(a.steps);
  Plan plan;
  try {
    if (st.size() != 3) throw std::invalid_argument("three steps");
    plan = {static_cast<std::uint32_t>(std::stoul(st[0])),
            static_cast<std::uint32_t>(std::stoul(st[1])),
            static_cast<std::uint32_t>(std::stoul(st[2]))};
  } catch (const std::exception&) {
    return bad("--steps must be FROM,PEAK,TO (e.g. 2,16,4)");
  }
  if (plan.from == 0 || plan.peak <= plan.from || plan.to == 0 || plan.to > plan.peak) {
    return bad("--steps FROM,PEAK,TO needs 0 < FROM < PEAK and 0 < TO <= PEAK");
  }
  if (a.hosts == 0 || a.hosts > 64) return bad("--hosts must be 1 to 64");
  auto size = core::parse_bytes(a.size);
  if (!size.is_ok() || *size == 0) return bad("--size: not a size (e.g. 32MiB)");
  std::vector<std::string> designs = split(a.designs);
  for (const auto& d : designs) {
    if (d != "many" && d != "trainer") return bad("--designs: many, trainer");
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "sluice bench elastic: emulated hosts need root\n");
    return 77;
  }
  if (find_emuhosts(environment).empty()) {
    std::fprintf(stderr, "sluice bench elastic: cannot find scripts/emuhosts.sh\n");
    return 1;
  }
  fs::path out = a.out_dir;
  if (out.empty()) {
    std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    out = fs::path("runs") / fmt::format("bench-elastic-{}", stamp);
  }
  std::vector<json> rows;
  int code = 0;
  for (const auto& d : designs) {
    CpuTimes before = read_cpu_times();
    auto r = run_design(a, plan, d, *size, fs::absolute(out));
    if (!r.is_ok()) {
      std::fprintf(stderr, "sluice bench elastic: %s\n", r.status().to_string().c_str());
      code = 1;
      continue;
    }
    (*r)["cpu_busy"] = cpu_busy_fraction(before, read_cpu_times());
    (*r)["hosts"] = a.hosts;
    (*r)["link_rate"] = a.link_rate;
    (*r)["size"] = *size;
    if (!(*r)["exactly_once"].get<bool>() || !(*r)["all_joined"].get<bool>()) code = 1;
    rows.push_back(*r);
    if (a.json) {
      std::printf("%s\n", r->dump().c_str());
    } else {
      const json& w = (*r)["first_weights_s"];
      const json& rd = (*r)["first_read_s"];
      const json& t = (*r)["first_trajectory_s"];
      std::printf(
          "%-8s %s: %zu/%zu joined; first weights median %.2f s max %.2f s after the first "
          "request, %.2f s / %.2f s after the process start; first trajectory "
          "median %.2f s max %.2f s; %.0f%% of bytes from the joiner's host; left %llu; "
          "exactly-once %s (consumed %llu of %llu, lost %s, twice %s); cpu %.0f%%\n",
          d.c_str(), (*r)["scale"].get<std::string>().c_str(),
          static_cast<std::size_t>((*r)["joined"]), static_cast<std::size_t>((*r)["joiners"]),
          rd["median"].is_number() ? rd["median"].get<double>() : -1.0,
          rd["max"].is_number() ? rd["max"].get<double>() : -1.0,
          w["median"].is_number() ? w["median"].get<double>() : -1.0,
          w["max"].is_number() ? w["max"].get<double>() : -1.0,
          t["median"].is_number() ? t["median"].get<double>() : -1.0,
          t["max"].is_number() ? t["max"].get<double>() : -1.0,
          100.0 * (*r)["same_host_share"].get<double>(),
          static_cast<unsigned long long>((*r)["left"].get<std::uint64_t>()),
          (*r)["exactly_once"].get<bool>() ? "holds" : "FAILED",
          static_cast<unsigned long long>((*r)["consumed"].get<std::uint64_t>()),
          static_cast<unsigned long long>((*r)["expected"].get<std::uint64_t>()),
          (*r)["lost"].dump().c_str(), (*r)["consumed_twice"].dump().c_str(),
          100.0 * (*r)["cpu_busy"].get<double>());
    }
    std::fflush(stdout);
  }
  const json* many = nullptr;
  const json* trainer = nullptr;
  for (const auto& r : rows) {
    if (r["design"] == "many") many = &r;
    if (r["design"] == "trainer") trainer = &r;
  }
  if (many && trainer) {
    auto stat = [](const json& r, const char* k, const char* which) {
      const json& v = r[k][which];
      return v.is_number() ? v.get<double>() : 0.0;
    };
    auto ratio_of = [&](const char* k, const char* which) {
      double m = stat(*many, k, which), t = stat(*trainer, k, which);
      return m > 0 ? t / m : 0.0;
    };
    json ratio{{"ratio", "trainer/many"},
               {"first_weights", ratio_of("first_read_s", "median")},
               {"first_weights_max", ratio_of("first_read_s", "max")},
               {"first_weights_from_start", ratio_of("first_weights_s", "median")},
               {"first_weights_from_start_max", ratio_of("first_weights_s", "max")},
               {"first_trajectory", ratio_of("first_trajectory_s", "median")}};
    if (a.json) {
      std::printf("%s\n", ratio.dump().c_str());
    } else {
      std::printf(
          "first weights from many holders %.2fx sooner than from the trainer's copy (median; "
          "max %.2fx), counted from the first request; %.2fx (max %.2fx) from the process "
          "start; first trajectory %.2fx sooner\n",
          ratio["first_weights"].get<double>(), ratio["first_weights_max"].get<double>(),
          ratio["first_weights_from_start"].get<double>(),
          ratio["first_weights_from_start_max"].get<double>(),
          ratio["first_trajectory"].get<double>());
    }
  }
  return code;
}

}  // namespace sluice::cli
