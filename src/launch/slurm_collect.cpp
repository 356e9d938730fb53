// `sluice slurm-collect RUN_DIR`: the end of a Slurm job's run folder (see launch/slurm.hpp).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "launch/job.hpp"
#include "launch/job_setup.hpp"
#include "launch/slurm.hpp"
#include "rollout/manager_client.hpp"
#include "wire/messaging.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
using core::Millis;
using nlohmann::json;

namespace {

// The manager's status, asked as the job's operator; an empty object when it does not answer.
json manager_status(const JobConfig& job, const fs::path& dir, const std::string& endpoint) {
  core::Security security = core::Security::plain();
  if (job.auth == "curve") {
    auto loaded = core::load_security(role_security(job, (dir / "keys").string(), "operator"),
                                      "sluice slurm-collect");
    if (!loaded.is_ok()) {
      core::log::warn("sluice slurm-collect: {}", loaded.status().to_string());
      return json::object();
    }
    security = *loaded;
  }
  auto loop = core::EventLoop::create();
  if (!loop.is_ok()) return json::object();
  auto client = rollout::ManagerClient::create(**loop, endpoint, security, kManagerStatusTimeout);
  if (!client.is_ok()) return json::object();
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto st = (*client)->status(kManagerStatusTimeout);
    if (st.is_ok()) return st->fields;
  }
  core::log::warn("sluice slurm-collect: the rollout manager at {} did not answer", endpoint);
  return json::object();
}

// Restarts per role process and what happened to them, from role.sh's events.jsonl.
void read_events(const fs::path& path, JobResult& result) {
  std::ifstream f(path);
  std::map<std::string, json> restarts;
  for (std::string line; std::getline(f, line);) {
    json e = json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    std::string what = e.value("event", ""), name = e.value("name", "");
    if (what == "died") {
      auto& r = restarts[name];
      r["role"] = e.value("role", "");
      r["restarts"] = r.value("restarts", 0) + 1;
      r["kills"] = 0;
      result.events.push_back(fmt::format("{} on {} exited (status {}), restarted", name,
                                          e.value("host", "?"), e.value("status", -1)));
    } else if (what == "gave_up") {
      result.events.push_back(fmt::format("{} on {} exited (status {}) and is not restarted again",
                                          name, e.value("host", "?"), e.value("status", -1)));
    }
  }
  result.restarts = json::object();
  for (auto& [name, r] : restarts)
    result.restarts[name] = r;
}

}  // namespace

int run_slurm_collect(const SlurmCollectArgs& args) {
  auto loaded = load_run_job(args.run_dir);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "sluice slurm-collect: %s\n", loaded.status().to_string().c_str());
    return 2;
  }
  const JobConfig& job = *loaded;
  const fs::path dir(args.run_dir);
  JobResult result;
  result.dir = dir.string();
  result.manager = manager_status(job, dir, args.manager);
  read_events(dir / "events.jsonl", result);
  core::Status outcome;
  if (args.actor_status == 124 && !args.stopped) {
    outcome = core::timeout_error(fmt::format("job did not finish within {} s", job.timeout_s));
  } else if (args.actor_status != 0 && !args.stopped) {
    outcome = core::internal_error(fmt::format("the actor's step failed (status {}); its log: {}",
                                               args.actor_status, (dir / "actor.log").string()));
  }
  std::ifstream f(job.actor.summary_path);
  result.actor = json::parse(f, nullptr, false);
  if (result.actor.is_discarded()) {
    result.actor = json::object();
    if (outcome.is_ok()) {
      outcome = core::internal_error(
          fmt::format("the actor's summary {} is missing or unreadable; its log: {}",
                      job.actor.summary_path, (dir / "actor.log").string()));
    }
  }
  if (args.stopped) result.events.push_back("stopped after duration_s");
  json watch{{"latest", result.manager.value("latest", 0ull)}};
  write_run_summary(dir, job, result, watch, outcome, args.wall_s);
  if (!outcome.is_ok()) {
    std::fprintf(stderr, "sluice slurm: job %s (%s): %s\n", job.name.c_str(), dir.c_str(),
                 outcome.to_string().c_str());
    return 1;
  }
  const json& a = result.actor;
  std::printf(
      "job %s (%s) done in %.1f s: %llu steps, %llu trained tokens, %llu trajectories, "
      "staleness max %llu; run folder: %s\n",
      job.name.c_str(), job.manager.mode.c_str(), args.wall_s,
      static_cast<unsigned long long>(a.value("steps", 0ull)),
      static_cast<unsigned long long>(a.value("trained_tokens", 0ull)),
      static_cast<unsigned long long>(result.manager.value("finished", 0ull)),
      static_cast<unsigned long long>(a.value("staleness_max", 0ull)), dir.c_str());
  return 0;
}

}  // namespace sluice::cli
