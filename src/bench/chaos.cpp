#include "bench/chaos.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/config.hpp"
#include "launch/job.hpp"
#include "launch/job_setup.hpp"
#include "launch/supervisor.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  std::ifstream f(path);
  if (!f) return json();
  json j = json::parse(f, nullptr, false);
  return j.is_discarded() ? json() : j;
}

// `j[key]` when it is an object, else an empty one: a job that timed out writes null for a role
// that never reported (an actor still training, a manager that did not answer), and the checks
// must still say what they can rather than throw.
// `j[key]` converted to the default's type, or the default when it is missing, null or of
// another type.
template <typename T>
T field_or(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  try {
    return it->template get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

json object_at(const json& j, const char* key) {
  if (!j.is_object()) return json::object();
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : json::object();
}

}  // namespace

json chaos_checks(const std::string& run_dir, std::uint64_t expected) {
  fs::path dir(run_dir);
  json summary = read_json(dir / "summary.json");
  json out = json::object();
  out["run_dir"] = run_dir;
  if (!summary.is_object()) {
    out["completed"] = false;
    out["error"] = "no summary.json";
    return out;
  }
  const json actor = object_at(summary, "actor");
  const json mgr = object_at(summary, "manager");
  out["outcome"] = field_or(summary, "outcome", std::string());

  // Kills and restarts per role.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> per_role;
  const json restarts = object_at(summary, "restarts");
  for (const auto& [name, r] : restarts.items()) {
    if (!r.is_object()) continue;
    auto& pr = per_role[field_or(r, "role", std::string("?"))];
    pr.first += field_or(r, "kills", 0ull);
    pr.second += field_or(r, "restarts", 0ull);
  }
  json roles = json::object();
  for (const auto& [role, kr] : per_role)
    roles[role] = json{{"kills", kr.first}, {"restarts", kr.second}};
  out["roles"] = roles;

  // Trajectories: every id the actor consumed (accepted_ids: trained, its effect in the final
  // weights, or dropped as too stale) must be an expected id exactly once; trained_ids are the
  // trained ones, none of them twice either.
  auto ids = [&](const char* key) { return field_or(actor, key, std::vector<std::string>{}); };
  std::vector<std::string> consumed = ids("accepted_ids"), trained = ids("trained_ids");
  auto twice_in = [](const std::vector<std::string>& v) {
    std::map<std::string, std::uint32_t> seen;
    std::uint64_t n = 0;
    for (const auto& id : v)
      n += seen[id]++ > 0 ? 1 : 0;
    return std::make_pair(n, seen.size());
  };
  auto [twice, unique] = twice_in(consumed);
  out["generated"] = field_or(mgr, "finished", 0ull);
  out["consumed"] = unique;
  out["trained"] = trained.size();
  out["consumed_twice"] = twice + twice_in(trained).first;
  out["duplicates_refused"] =
      field_or(actor, "duplicates", 0ull) + field_or(mgr, "duplicates", 0ull);
  // A job of a fixed duration (expected 0) completes when it ran its time; one of a fixed size
  // when the manager has every trajectory acknowledged, or, when the manager was killed at the
  // very end and the job ended before its restart, when the actor consumed every one once.
  const bool all_consumed = expected > 0 && unique == expected && twice == 0;
  out["completed"] = field_or(summary, "outcome", std::string()) == "ok" &&
                     (expected == 0 || field_or(mgr, "done", false) || all_consumed);
  if (expected > 0) {
    out["lost"] = unique >= expected ? 0 : expected - unique;
  } else {
    out["lost"] = nullptr;  // an open-ended job: nothing to count against
  }
  out["expected"] = expected;

  // Readers: versions that went backwards (the launcher watched each rollout's loaded version),
  // chunks that failed verification against the version's manifest (a torn chunk or one of
  // another version; the rollouts count them, each refused and read again), and repacked work
  // offered to a rollout of another version (refused, counted).
  const json watch = object_at(summary, "watch");
  out["versions_backwards"] = field_or(watch, "versions_backwards", 0ull);
  std::uint64_t refused = 0, wrong_version = 0;
  const json fleet = field_or(mgr, "rollouts", json::array());
  for (const auto& ro : fleet.is_array() ? fleet : json::array()) {
    const json st = object_at(ro, "stats");
    refused += field_or(st, "checksum_failures", 0ull);
    wrong_version += field_or(st, "refused_version", 0ull);
  }
  out["chunks_refused_by_verification"] = refused;
  out["imports_of_another_version"] = wrong_version;

  // The job's time from its roles' start to the actor's end (a resumed actor's own wall_s
  // counts only from its last start).
  out["wall_s"] = field_or(summary, "wall_s", field_or(actor, "wall_s", 0.0));
  out["trained_tokens"] = field_or(actor, "trained_tokens", 0ull);
  out["initial_accuracy"] = field_or(actor, "initial_accuracy", -1.0);
  out["final_accuracy"] = field_or(actor, "final_accuracy", -1.0);
  return out;
}

namespace {

core::Result<JobConfig> load_job(const ChaosArgs& args) {
  SLUICE_ASSIGN_OR_RETURN(JobConfig job, load_job_file(args.job_path, args.overrides));
  SLUICE_TRY(job.validate().with_context(args.job_path));
  return job;
}

void print_table(const json& base, const json& chaos, bool have_base) {
  auto num = [](const json& j, const char* k) {
    const json& v = j.value(k, json());
    if (v.is_null()) return std::string("-");
    if (v.is_number_float()) return fmt::format("{:.1f}", v.get<double>());
    return v.dump();
  };
  std::printf("%-34s %14s %14s\n", "", have_base ? "without faults" : "", "with kills");
  for (const char* k : {"completed", "generated", "consumed", "trained", "lost", "consumed_twice",
                        "versions_backwards", "chunks_refused_by_verification",
                        "imports_of_another_version", "wall_s", "trained_tokens"}) {
    std::printf("%-34s %14s %14s\n", k, have_base ? num(base, k).c_str() : "",
                num(chaos, k).c_str());
  }
  auto pct = [](const json& j, const char* k) {
    double v = j.value(k, -1.0);
    return v < 0 ? std::string("-") : fmt::format("{:.1f}%", 100 * v);
  };
  std::printf("%-34s %14s %14s\n", "held-out accuracy at the end",
              have_base ? pct(base, "final_accuracy").c_str() : "",
              pct(chaos, "final_accuracy").c_str());
  std::printf("kills and restarts by role:");
  const json roles = chaos.value("roles", json::object());
  for (const auto& [role, kr] : roles.items()) {
    std::printf(" %s %llu/%llu", role.c_str(),
                static_cast<unsigned long long>(kr.value("kills", 0ull)),
                static_cast<unsigned long long>(kr.value("restarts", 0ull)));
  }
  std::printf("\n");
}

}  // namespace

namespace {

// The checks on both runs: completion, nothing lost or consumed twice, no version backwards,
// every kill landed, and against the fault-free run trained tokens and accuracy. "ok" and
// "failed" (what did not hold) beside the figures.
json chaos_verdict(const ChaosArgs& args, const json& base, const json& chaos) {
  json verdict = json::object();
  std::vector<std::string> failed;
  if (!chaos.value("completed", false)) failed.push_back("the job did not complete");
  if (chaos.value("lost", json()).is_number() && chaos.value("lost", 0ull) > 0) {
    failed.push_back("trajectories lost");
  }
  if (chaos.value("consumed_twice", 0ull) > 0) failed.push_back("trajectories consumed twice");
  if (chaos.value("versions_backwards", 0ull) > 0) failed.push_back("a version went backwards");
  std::uint64_t landed = 0;
  const json killed_roles = chaos.value("roles", json::object());
  for (const auto& [role, kr] : killed_roles.items())
    landed += kr.value("kills", 0ull);
  verdict["kills_landed"] = landed;
  if (landed < args.kills) {
    failed.push_back(fmt::format(
        "only {} of {} kills landed before the job ended (use --every, or a longer job)", landed,
        args.kills));
  }
  if (args.baseline) {
    double ta = base.value("trained_tokens", 0.0), tb = chaos.value("trained_tokens", 0.0);
    verdict["trained_tokens_ratio"] = ta > 0 ? tb / ta : 0.0;
    double wa = base.value("wall_s", 0.0), wb = chaos.value("wall_s", 0.0);
    verdict["wall_ratio"] = wa > 0 ? wb / wa : 0.0;
    // Over a fixed time the kills may cost throughput, not the job: the ratio is the check.
    if (args.duration_s > 0 &&
        verdict["trained_tokens_ratio"].get<double>() < args.min_token_ratio) {
      failed.push_back(
          fmt::format("trained tokens with kills are {:.3f} of those without (at least "
                      "{:.2f} expected)",
                      verdict["trained_tokens_ratio"].get<double>(), args.min_token_ratio));
    }
    double aa = base.value("final_accuracy", -1.0), ab = chaos.value("final_accuracy", -1.0);
    if (aa >= 0 && ab >= 0) {
      verdict["accuracy_gap_points"] = 100 * (ab - aa);
      if (std::abs(100 * (ab - aa)) > 5) failed.push_back("accuracy more than 5 points off");
    }
  }
  verdict["ok"] = failed.empty();
  verdict["failed"] = failed;
  return verdict;
}

}  // namespace

int run_chaos(const ChaosArgs& args, const std::string& sluice_exe,
              const std::vector<std::string>& environment) {
  auto loaded = load_job(args);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "sluice chaos: %s\n", loaded.status().to_string().c_str());
    return 2;
  }
  JobConfig job = std::move(loaded).value();
  std::uint64_t seed = args.seed;
  if (seed == 0) {
    seed = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count() % 1000000 + 1);
  }
  std::string base_dir = args.out_dir;
  if (base_dir.empty()) {
    std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
    base_dir = fmt::format("runs/chaos-{}-{}", job.name, stamp);
  }
  if (args.duration_s > 0) job.duration_s = args.duration_s;
  std::uint64_t expected = job.duration_s > 0 ? 0 : job.manager.prompts * job.manager.group_size;
  std::fprintf(stderr, "sluice chaos: seed %llu, %u kills, roles %s, run folders under %s\n",
               static_cast<unsigned long long>(seed), args.kills,
               args.roles.empty() ? "all" : args.roles.c_str(), base_dir.c_str());

  json base;
  double base_wall = 0;
  if (args.baseline) {
    JobConfig b = job;
    b.chaos = ChaosConfig{};
    b.out_dir = base_dir + "/without-faults";
    std::fprintf(stderr, "sluice chaos: the job without faults first\n");
    auto r = run_local_job(b, sluice_exe, environment);
    if (!r.is_ok()) {
      std::fprintf(stderr, "sluice chaos: the job failed without faults: %s\n",
                   r.status().to_string().c_str());
      return 1;
    }
    base = chaos_checks(b.out_dir, expected);
    base_wall = base.value("wall_s", 0.0);
  }

  JobConfig c = job;
  c.chaos.kills = args.kills;
  c.chaos.seed = seed;
  if (!args.roles.empty()) c.chaos.roles = args.roles;
  c.chaos.every_s = args.every_s;
  if (args.every_s == 0) {
    // Kills spread over most of the fault-free job's length (or the fixed duration).
    double span = job.duration_s > 0 ? job.duration_s : (base_wall > 0 ? base_wall : 60.0);
    c.chaos.first_s = std::min(c.chaos.first_s, 0.1 * span);
    c.chaos.window_s = std::max(1.0, 0.8 * span - c.chaos.first_s);
  }
  c.out_dir = base_dir + "/with-kills";
  if (auto v = c.validate(); !v.is_ok()) {
    std::fprintf(stderr, "sluice chaos: %s\n", v.to_string().c_str());
    return 2;
  }
  std::fprintf(stderr, "sluice chaos: the job with %u kills\n", args.kills);
  auto r = run_local_job(c, sluice_exe, environment);
  if (!r.is_ok()) {
    std::fprintf(stderr, "sluice chaos: the job with kills failed: %s\n",
                 r.status().to_string().c_str());
  }
  json chaos = chaos_checks(c.out_dir, expected);

  const json verdict = chaos_verdict(args, base, chaos);
  const std::vector<std::string> failed = verdict["failed"].get<std::vector<std::string>>();
  json all{{"seed", seed},
           {"kills", args.kills},
           {"without_faults", base},
           {"with_kills", chaos},
           {"verdict", verdict}};
  std::ofstream(fs::path(base_dir) / "chaos.json") << all.dump(2) << "\n";
  if (args.json) {
    std::printf("%s\n", all.dump().c_str());
  } else {
    std::printf("sluice chaos: seed %llu, %u kills\n", static_cast<unsigned long long>(seed),
                args.kills);
    print_table(base, chaos, args.baseline);
    if (verdict.contains("trained_tokens_ratio")) {
      std::printf("trained tokens with kills / without: %.3f; wall time %.2fx\n",
                  verdict["trained_tokens_ratio"].get<double>(),
                  verdict["wall_ratio"].get<double>());
    }
    if (verdict.contains("accuracy_gap_points")) {
      std::printf("held-out accuracy with kills minus without: %+.1f points\n",
                  verdict["accuracy_gap_points"].get<double>());
    }
    std::printf("%s\n", failed.empty()
                            ? "every check held"
                            : fmt::format("FAILED: {}", fmt::join(failed, "; ")).c_str());
  }
  return failed.empty() ? 0 : 1;
}

}  // namespace sluice::cli
