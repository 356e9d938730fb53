#include "bench/bench_elastic.hpp"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "bench/bench_util.hpp"
#include "bench/chaos.hpp"
#include "bench/cpu_busy.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/status.hpp"
#include "core/units.hpp"
#include "launch/emulated_hosts.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

constexpr std::uint64_t kGroupSize = 4;  // samples per prompt in the bench's job
// How often wait_for() looks; the job trains its first steps within kFirstStepsS seconds.
constexpr Millis kReadyPoll{200};
constexpr double kFirstStepsS = 300;
// A job or a `sluice run --add` exits within kRunExit of SIGTERM (or of its end); a removal
// (`sluice run --remove`, which waits for its victims to leave) within kRemoveWait.
constexpr Millis kRunExit{30000};
constexpr Millis kRemoveWait{60000};
constexpr Millis kAddExit{10000};  // after its SIGTERM, when it outlived kRunExit

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
    std::this_thread::sleep_for(kReadyPoll);
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

constexpr std::uint64_t kChunkBytes = 1u << 20;

struct Plan {
  std::uint32_t from = 0, peak = 0, to = 0;
};

// The figures per design, each with the span of wall time it was measured over (the CPU that
// matters is the CPU of that span): the joiners' `key` seconds, each joiner's span running from
// `start` to the figure's end.
struct FigureSpec {
  const char* key;    // in joins.jsonl and the row
  const char* label;  // in the text output
};
constexpr FigureSpec kFigures[] = {
    {"first_read_s", "first weights from the first request"},  // the headline
    {"first_weights_s", "first weights from the process start"},
    {"first_trajectory_s", "first trajectory from the process start"},
};

// One joiner's line of joins.jsonl, on the wall clock.
struct Join {
  double created = 0;  // process start (Unix seconds)
  double first_weights_s = -1, first_read_s = -1, first_trajectory_s = -1;
  double value(const std::string& key) const {
    if (key == "first_read_s") return first_read_s;
    if (key == "first_weights_s") return first_weights_s;
    return first_trajectory_s;
  }
  // The span the figure `key` of this joiner covers: its read for first_read_s, else from its
  // process start.
  std::pair<double, double> span(const std::string& key) const {
    double end = created + value(key);
    double begin = key == "first_read_s" ? created + first_weights_s - first_read_s : created;
    return {begin, end};
  }
};

json cpu_json(const CpuWindow& w, const CpuVerdict& verdict) {
  return json{{"mean", w.mean},           {"peak", w.peak},    {"intervals", w.intervals},
              {"from_unix", w.from_s},    {"to_unix", w.to_s}, {"admitted", verdict.admitted},
              {"refusal", verdict.reason}};
}

// A figure over all joiners: median and max, and how busy the CPU was from the first joiner's
// span start to the last one's end, but not before `all_up` (the last joiner's process start):
// the wave's start-ups (about 0.2 s of CPU each, all at once) come before the joiners' reads, and
// are reported on their own (wave_startup_cpu).
json figure(const std::vector<Join>& joins, const std::string& key,
            const std::vector<CpuSample>& samples, double all_up) {
  std::vector<double> v;
  double from = 0, to = 0;
  bool any = false;
  for (const Join& j : joins) {
    if (j.value(key) < 0 || j.created <= 0) continue;
    v.push_back(j.value(key));
    auto [b, e] = j.span(key);
    from = any ? std::min(from, b) : b;
    to = any ? std::max(to, e) : e;
    any = true;
  }
  json out = median_max(v);
  CpuWindow w = any ? cpu_window(samples, std::max(from, all_up), to) : CpuWindow{};
  out["cpu"] = cpu_json(w, judge_cpu(w));
  return out;
}

CpuVerdict verdict_of(const json& fig) {
  const json& c = fig["cpu"];
  return {c.value("admitted", false), c.value("refusal", std::string())};
}

// The job file of one design: `plan.from` rollouts on their hosts, room for the joiners on
// hosts of their own, and the relays' polling scaled to a chunk's time on one link.
json elastic_job(const BenchElasticArgs& a, const Plan& plan, const std::string& design,
                 std::uint64_t size, std::uint64_t chunk_ms, std::uint64_t publish_ms,
                 const fs::path& dir) {
  const std::uint32_t joiners = plan.peak - plan.from;
  return json{{"name", "elastic-" + design},
              {"rollouts", plan.from},
              {"max_rollouts", plan.peak},
              {"progress_s", 0},
              {"timeout_s", a.timeout_s},
              {"log_level", "warn"},
              {"out_dir", dir.string()},
              {"hosts",
               {{"count", a.hosts + joiners},
                {"joiner_hosts", joiners},
                {"link_rate", a.link_rate},
                {"trainer_link_rate", a.trainer_link_rate},
                {"prefix", "sluice-el"}}},
              // Every holder is named for every chunk (the relays and the actor): `many` stripes
              // across all of them, and `trainer` always finds the master relay among them.
              {"store", {{"sources_per_chunk", std::max<std::uint32_t>(8, a.hosts + 1)}}},
              {"manager",
               {{"prompts", a.prompts},
                {"group_size", kGroupSize},
                {"batch_trajectories", 32},
                // A free slot takes work at once (a joiner holding the newest version starts
                // generating), as in the benchmarks' sluice rows.
                {"admission", "continuous"},
                {"heartbeat_timeout_ms", 4000}}},
              // A relay that has read all its predecessor holds asks the store for more every
              // follow_poll_ms (3 ms by default, for fast links): at 50 Mbit/s a 1 MiB chunk takes
              // 170 ms, and six relays asking every 3 ms kept the store 20% of a core busy (2,400
              // requests a second). An eighth of a chunk's time adds at most that much per hop.
              {"relay",
               {{"follow_poll_ms", std::max<std::uint64_t>(3, chunk_ms / 8)},
                {"reask_ms", std::max<std::uint64_t>(10, chunk_ms / 4)}}},
              {"rollout",
               // Reports 4 a second: every process's idle cost counts against the CPU limit.
               {{"report_ms", 250},
                {"pull_in_flight", 2},
                {"sim",
                 {{"max_sequences", 8},
                  {"t0_ms", 4.0},
                  {"t1_ms", 0.5},
                  {"lengths", {{"median", 48}, {"p99", 400}, {"max_len", 512}}}}}}},
              {"actor",
               {{"weight_bytes", size},
                {"chunk_bytes", kChunkBytes},
                {"train_ms_per_token", 0.02},
                // A version no more often than the chain can carry 2.5 times over (see publish_ms):
                // a joiner's wave meets at most one version being forwarded.
                {"train_ms_fixed", publish_ms},
                {"checkpoint_every_steps", 5},
                {"max_staleness", 4}}}};
}

// One design: the job, the scale-up, the scale-down, the checks.
core::Result<json> run_design(const BenchElasticArgs& a, const Plan& plan,
                              const std::string& design, std::uint64_t size, double rate,
                              std::uint64_t publish_ms, const fs::path& out) {
  // A chunk's time on one link.
  const auto chunk_ms = static_cast<std::uint64_t>(kChunkBytes / rate * 1000.0);
  const fs::path dir = out / design;
  std::error_code ec;
  fs::remove_all(dir, ec);
  const std::string exe = self_exe();
  const std::uint64_t group = kGroupSize;
  const std::uint32_t joiners = plan.peak - plan.from;
  const json job = elastic_job(a, plan, design, size, chunk_ms, publish_ms, dir);
  fs::create_directories(out, ec);
  const fs::path job_path = out / ("job-" + design + ".json");
  std::ofstream(job_path) << job.dump(2) << "\n";

  CpuSampler cpu(200);
  const CpuTimes cpu_start = read_cpu_times();
  SLUICE_ASSIGN_OR_RETURN(auto run,
                          start({exe, "run", job_path.string()}, out / ("run-" + design + ".log")));
  // The job runs: its actor has trained (and published) a few steps.
  auto steps_done = [&] {
    std::size_t n = 0;
    for (const auto& l : read_lines(dir / "metrics.jsonl"))
      n += l.contains("reward_mean");
    return n >= 3;
  };
  if (!wait_for(steps_done, kFirstStepsS, run.get())) {
    run->signal(SIGTERM).ignore();
    run->wait(kRunExit).ignore();
    return core::timeout_error(fmt::format("{}: the job did not train 3 steps within {} s; see {}",
                                           design, kFirstStepsS,
                                           (out / ("run-" + design + ".log")).string()));
  }
  std::vector<std::string> add{exe, "run", "--add", fmt::format("rollout={}", joiners),
                               dir.string()};
  if (design == "trainer") {
    add.push_back("--set");
    // The master relay alone: the actor's host is not limited (it carries the control plane), so
    // reading from the actor too would go around the trainer's link rather than through it.
    add.push_back(R"(rollout.join_read_from=["relay-0"])");
  }
  const double add_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  SLUICE_ASSIGN_OR_RETURN(auto adder, start(add, out / ("add-" + design + ".log")));
  bool all_joined = wait_for([&] { return read_lines(dir / "joins.jsonl").size() >= joiners; },
                             a.timeout_s / 2, adder.get());
  json removed = nullptr;
  if (plan.to < plan.peak) {
    SLUICE_ASSIGN_OR_RETURN(
        auto remover, start({exe, "run", "--remove", fmt::format("rollout={}", plan.peak - plan.to),
                             dir.string()},
                            out / ("remove-" + design + ".log")));
    auto code = remover->wait(kRemoveWait);
    removed = code.is_ok() ? json(*code) : json(code.status().to_string());
  }
  auto run_code = run->wait(Millis(static_cast<std::int64_t>(a.timeout_s * 1000)));
  if (!run_code.is_ok()) {
    run->signal(SIGTERM).ignore();
    run->wait(kRunExit).ignore();
  }
  if (!adder->wait(kRunExit).is_ok()) {
    adder->signal(SIGTERM).ignore();
    adder->wait(kAddExit).ignore();
  }
  const double cpu_run = cpu_busy_fraction(cpu_start, read_cpu_times());
  cpu.stop();
  const std::vector<CpuSample> samples = cpu.samples();

  std::vector<Join> joins;
  std::uint64_t bytes = 0, same_host = 0;
  for (const auto& j : read_lines(dir / "joins.jsonl")) {
    Join jn;
    jn.created = j.value("created_unix", 0.0);
    jn.first_weights_s = j.value("first_weights_s", -1.0);
    jn.first_read_s = j.value("first_read_s", -1.0);
    jn.first_trajectory_s = j.value("first_trajectory_s", -1.0);
    joins.push_back(jn);
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
  json row{{"design", design},
           {"scale", fmt::format("{} -> {} -> {}", plan.from, plan.peak, plan.to)},
           {"joiners", joiners},
           {"joined", joins.size()},
           {"all_joined", all_joined},
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
           {"cpu_busy", cpu_run},
           {"run_dir", dir.string()}};
  double all_up = add_unix;
  for (const Join& j : joins)
    all_up = std::max(all_up, j.created);
  const CpuWindow startup = cpu_window(samples, add_unix, all_up);
  row["wave_startup_cpu"] = cpu_json(startup, judge_cpu(startup));
  for (const auto& f : kFigures)
    row[f.key] = figure(joins, f.key, samples, all_up);
  return row;
}

double number(const json& v) {
  return v.is_number() ? v.get<double>() : -1.0;
}

// "2.91 s / 3.10 s [CPU mean 31%, peak 44%]", or with "NOT A FIGURE: <why>" when refused.
std::string figure_text(const json& fig) {
  const json& c = fig["cpu"];
  std::string cpu = fmt::format("CPU mean {:.0f}%, peak {:.0f}%", 100.0 * number(c["mean"]),
                                100.0 * number(c["peak"]));
  if (!c.value("admitted", false)) {
    cpu = fmt::format("NOT A FIGURE: {}", c.value("refusal", std::string()));
  }
  return fmt::format("median {:.2f} s, max {:.2f} s [{}]", number(fig["median"]),
                     number(fig["max"]), cpu);
}

}  // namespace

namespace {

// One design's lines of the table.
void print_design(const std::string& d, const json& r, const std::string& load) {
  std::printf(
      "%-8s %s (load average at its start %s): %zu/%zu joined; %.0f%% of bytes from the "
      "joiner's host; left %llu; exactly-once %s (consumed %llu of %llu, lost %s, twice %s); "
      "CPU %.0f%% busy over the run\n",
      d.c_str(), r["scale"].get<std::string>().c_str(), load.c_str(),
      static_cast<std::size_t>(r["joined"]), static_cast<std::size_t>(r["joiners"]),
      100.0 * r["same_host_share"].get<double>(),
      static_cast<unsigned long long>(r["left"].get<std::uint64_t>()),
      r["exactly_once"].get<bool>() ? "holds" : "FAILED",
      static_cast<unsigned long long>(r["consumed"].get<std::uint64_t>()),
      static_cast<unsigned long long>(r["expected"].get<std::uint64_t>()), r["lost"].dump().c_str(),
      r["consumed_twice"].dump().c_str(), 100.0 * r["cpu_busy"].get<double>());
  const json& su = r["wave_startup_cpu"];
  std::printf(
      "  %-8s the wave's start-up (the --add until the last joiner is up, %.2f s; not a "
      "figure): CPU mean %.0f%%, peak %.0f%%\n",
      d.c_str(), number(su["to_unix"]) - number(su["from_unix"]), 100.0 * number(su["mean"]),
      100.0 * number(su["peak"]));
  for (const auto& f : kFigures) {
    std::printf("  %-8s %s: %s\n", d.c_str(), f.label, figure_text(r[f.key]).c_str());
  }
}

// trainer / many for every figure, each gated on the CPU (bench/cpu_busy.hpp); 3 when the
// headline (a joiner's first weights, median) could not be a figure, else 0.
int print_ratios(const BenchElasticArgs& a, const std::vector<json>& rows) {
  int code = 0;
  const json* many = nullptr;
  const json* trainer = nullptr;
  for (const auto& r : rows) {
    if (r["design"] == "many") many = &r;
    if (r["design"] == "trainer") trainer = &r;
  }
  if (many && trainer) {
    json ratios{{"ratio", "trainer/many"}};
    std::vector<std::string> lines;
    for (const auto& f : kFigures) {
      for (const char* which : {"median", "max"}) {
        const json& fm = (*many)[f.key];
        const json& ft = (*trainer)[f.key];
        GatedRatio g = gated_ratio(number(ft[which]), verdict_of(ft), number(fm[which]),
                                   verdict_of(fm), "trainer", "many");
        const std::string name = std::string(f.key) + "_" + which;
        ratios[name] = g.ratio ? json(*g.ratio) : json(nullptr);
        if (!g.ratio) ratios[name + "_refused"] = g.refusal;
        lines.push_back(g.ratio ? fmt::format("{}: {:.2f}x sooner from many holders ({})", f.label,
                                              *g.ratio, which)
                                : fmt::format("{} ({}): {}", f.label, which, g.refusal));
        // The headline: a joiner's first weights from its first request, median.
        if (&f == &kFigures[0] && std::string(which) == "median" && !g.ratio) {
          code = 3;
        }
      }
    }
    if (a.json) {
      std::printf("%s\n", ratios.dump().c_str());
    } else {
      std::printf("trainer's copy / many holders:\n");
      for (const auto& l : lines)
        std::printf("  %s\n", l.c_str());
    }
  }
  return code;
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
    return bad("--steps must be FROM,PEAK,TO (e.g. 2,8,3)");
  }
  if (plan.from == 0 || plan.peak <= plan.from || plan.to == 0 || plan.to > plan.peak) {
    return bad("--steps FROM,PEAK,TO needs 0 < FROM < PEAK and 0 < TO <= PEAK");
  }
  if (a.hosts == 0 || a.hosts + (plan.peak - plan.from) > 64) {
    return bad(fmt::format(
        "--hosts must be at least 1, and with one host per joiner ({}) at most 64 in all",
        plan.peak - plan.from));
  }
  auto size = core::parse_bytes(a.size);
  if (!size.is_ok() || *size == 0) return bad("--size: not a size (e.g. 32MiB)");
  auto rate = link_rate_bytes_per_s(a.link_rate);
  if (!rate.is_ok() || !(*rate > 0)) {
    return bad("--link-rate: " +
               (rate.is_ok() ? std::string("must be above 0") : rate.status().message()));
  }
  if (!a.trainer_link_rate.empty() && a.trainer_link_rate != "none") {
    auto r0 = link_rate_bytes_per_s(a.trainer_link_rate);
    if (!r0.is_ok()) return bad("--trainer-link-rate: " + r0.status().message());
  }
  std::vector<std::string> designs = split(a.designs);
  if (designs.empty()) return bad("--designs: many, trainer");
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
  // One version crosses a link in size / rate; the chain of relays forwards it pipelined in about
  // that long. A version every 2.5 times that (and never more often than every 2 s) keeps the
  // links free more than half the time, and the relays' forwarding (the job's largest CPU cost
  // before the wave) low.
  const double link_s = static_cast<double>(*size) / *rate;
  const auto publish_ms =
      static_cast<std::uint64_t>(std::max(2000.0, std::ceil(2.5 * link_s * 1000.0)));
  const std::string load_start = load_average();
  if (!a.json) {
    std::printf(
        "elastic: %u hosts with a relay, %u joiners on hosts of their own, every link %s "
        "(%.1f MB/s) but host 0's (store, manager, actor: %s), versions of %s (%.2f s a link), "
        "a version every %.1f s or more; load average at start %s; a figure counts only with "
        "the CPU at most %.0f%% busy\n",
        a.hosts, plan.peak - plan.from, a.link_rate.c_str(), *rate / 1e6,
        a.trainer_link_rate.empty()     ? a.link_rate.c_str()
        : a.trainer_link_rate == "none" ? "not limited"
                                        : a.trainer_link_rate.c_str(),
        a.size.c_str(), link_s, publish_ms / 1000.0, load_start.c_str(), 100.0 * kCpuBusyLimit);
    std::fflush(stdout);
  }
  std::vector<json> rows;
  int code = 0;
  for (const auto& d : designs) {
    const std::string load = load_average();
    auto r = run_design(a, plan, d, *size, *rate, publish_ms, fs::absolute(out));
    if (!r.is_ok()) {
      std::fprintf(stderr, "sluice bench elastic: %s\n", r.status().to_string().c_str());
      code = 1;
      continue;
    }
    (*r)["hosts"] = a.hosts;
    (*r)["link_rate"] = a.link_rate;
    (*r)["trainer_link_rate"] = a.trainer_link_rate;
    (*r)["size"] = *size;
    (*r)["publish_ms"] = publish_ms;
    (*r)["load_average_start"] = load;
    if (!(*r)["exactly_once"].get<bool>() || !(*r)["all_joined"].get<bool>()) code = 1;
    rows.push_back(*r);
    if (a.json) {
      std::printf("%s\n", r->dump().c_str());
    } else {
      print_design(d, *r, load);
    }
    std::fflush(stdout);
  }
  if (int r = print_ratios(a, rows); r != 0 && code == 0) code = r;
  return code;
}

}  // namespace sluice::cli
