#include "launch/job_setup.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <initializer_list>
#include <optional>

#include "analysis/report.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "wire/security.hpp"
#include "wire/stream_crypto.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
namespace log = core::log;
using nlohmann::json;

namespace {

// The file a command role's argv[0] names: a path (relative to the role's workdir) when it has a
// '/', else the first executable of that name on the PATH of `environment`. posix_spawn looks
// nothing up, and a missing program should fail the job before anything starts, by its name.
core::Result<std::string> resolve_program(const std::string& what, const RoleCommand& command,
                                          const std::vector<std::string>& environment) {
  const std::string& program = command.argv[0];
  auto executable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    std::error_code ec;
    // Absolute, as the role starts in its workdir.
    const fs::path base =
        command.workdir.empty() ? fs::current_path(ec) : fs::absolute(command.workdir, ec);
    const fs::path file = (base / program).lexically_normal();
    if (!fs::exists(file, ec)) {
      return core::not_found(fmt::format(
          "{}: the program {} does not exist (relative paths are taken from {} {})", what,
          file.string(),
          command.workdir.empty() ? "the working folder"
                                  : "its workdir (in a job file: the job file's folder unless set)",
          base.string()));
    }
    if (!executable(file)) {
      return core::failed_precondition(
          fmt::format("{}: {} is not an executable file", what, file.string()));
    }
    return file.string();
  }
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : environment) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  std::size_t from = 0;
  while (from <= path.size()) {
    std::size_t to = std::min(path.find(':', from), path.size());
    fs::path dir = to > from ? fs::path(path.substr(from, to - from)) : fs::path(".");
    if (executable(dir / program)) return (dir / program).string();
    from = to + 1;
  }
  return core::not_found(
      fmt::format("{}: the program {} is not on PATH ({})", what, program, path));
}

// The string at `keys` in `doc`, taken from `folder` when relative; returns the path it became.
// Absent or of another type: left to the parser, which names a wrong type.
std::optional<fs::path> resolve_path(core::config::Json& doc,
                                     std::initializer_list<const char*> keys,
                                     const fs::path& folder) {
  core::config::Json* j = &doc;
  for (const char* key : keys) {
    if (!j->is_object() || !j->contains(key)) return std::nullopt;
    j = &(*j)[key];
  }
  if (!j->is_string()) return std::nullopt;
  const fs::path p = j->get<std::string>();
  if (p.empty() || p.is_absolute()) return std::nullopt;
  const fs::path resolved = (folder / p).lexically_normal();
  *j = resolved.string();
  return resolved;
}

}  // namespace

core::Result<core::config::Json> read_job_file(const std::string& path) {
  SLUICE_ASSIGN_OR_RETURN(core::config::Json doc, core::config::read_json_file(path));
  std::error_code ec;
  const fs::path folder = fs::absolute(path, ec).lexically_normal().parent_path();
  if (ec) return core::internal_error(fmt::format("{}: {}", path, ec.message()));
  resolve_path(doc, {"out_dir"}, folder);
  resolve_path(doc, {"manager", "state_path"}, folder);
  resolve_path(doc, {"actor", "checkpoint_dir"}, folder);
  if (auto lengths = resolve_path(doc, {"rollout", "sim", "lengths", "file"}, folder);
      lengths && !fs::exists(*lengths, ec)) {
    return core::not_found(fmt::format(
        "{}: rollout.sim.lengths.file {} does not exist (relative paths in a job file are taken "
        "from the job file's folder)",
        path, lengths->string()));
  }
  // A rollout's environment program runs in the job file's folder unless told otherwise.
  if (doc.is_object() && doc.contains("rollout") && doc["rollout"].is_object() &&
      doc["rollout"].contains("env_command")) {
    core::config::Json& r = doc["rollout"];
    if (!r.contains("env_workdir") || r["env_workdir"] == "") {
      r["env_workdir"] = folder.string();
    } else {
      resolve_path(r, {"env_workdir"}, folder);
    }
  }
  for (const char* role : {"actor_command", "rollout_command"}) {
    if (!doc.is_object() || !doc.contains(role) || !doc[role].is_object()) continue;
    core::config::Json& command = doc[role];
    if (!command.contains("argv")) continue;  // the built-in role
    if (!command.contains("workdir") || command["workdir"] == "") {
      command["workdir"] = folder.string();
    } else {
      resolve_path(command, {"workdir"}, folder);
    }
  }
  return doc;
}

core::Result<JobConfig> load_job_file(const std::string& path,
                                      const std::vector<std::string>& overrides) {
  SLUICE_ASSIGN_OR_RETURN(core::config::Json doc, read_job_file(path));
  for (const auto& o : overrides) {
    SLUICE_TRY(core::config::apply_override(doc, o));
    core::config::detail::log_override(o);
  }
  JobConfig job;
  SLUICE_TRY(core::config::parse(doc, job).with_context(path));
  return job;
}

core::Status settle_job(JobConfig& job) {
  if (!job.mode.empty()) job.manager.mode = job.mode;
  job.mode = job.manager.mode;
  // One batch and group size for everyone.
  job.actor.batch_trajectories = job.manager.batch_trajectories;
  job.actor.group_size = job.manager.group_size;
  // Work the actor would drop as too stale stops early.
  job.manager.abandon_stale = job.actor.staleness_policy == "drop";
  job.manager.max_staleness = job.actor.max_staleness;
  // Repack prices its moves with the rollouts' own timing; on the simulated engine it is known.
  rollout::RepackCost& cost = job.manager.repack_cost;
  if (cost.engine_timing && job.rollout.engine == "sim") {
    const rollout::SimEngineConfig& e = job.rollout.sim;
    cost.t0_ms = e.t0_ms * e.time_scale;
    cost.t1_ms = e.t1_ms * e.time_scale;
    cost.prefill_ms_per_token = e.prefill_ms_per_token * e.time_scale;
  }
  return job.validate();
}

core::Result<RolePrograms> resolve_role_programs(const JobConfig& job,
                                                 const std::vector<std::string>& environment) {
  RolePrograms programs;
  if (job.actor_command.enabled()) {
    SLUICE_ASSIGN_OR_RETURN(programs.actor,
                            resolve_program("actor_command", job.actor_command, environment));
  }
  if (job.rollout_command.enabled()) {
    SLUICE_ASSIGN_OR_RETURN(programs.rollout,
                            resolve_program("rollout_command", job.rollout_command, environment));
  }
  return programs;
}

std::string default_run_dir(const JobConfig& job) {
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&now));
  return fmt::format("runs/{}-{}-{}", job.name, stamp, ::getpid());
}

core::Status make_run_dir(const fs::path& dir, bool resume) {
  if (resume && !fs::exists(dir / "job.json")) {
    return core::not_found(fmt::format("cannot resume {}: it has no job.json", dir.string()));
  }
  // A new job never picks up another job's durable state by accident.
  if (!resume && (fs::exists(dir / "manager.db") || fs::exists(dir / "checkpoints"))) {
    return core::failed_precondition(fmt::format(
        "{} holds the durable state of an earlier job: continue it with sluice run --resume {}, "
        "or choose another run folder",
        dir.string(), dir.string()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return core::invalid_argument(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  return {};
}

void wire_job(JobConfig& job, const JobEndpoints& ep, const std::string& dir_name) {
  fs::path dir(dir_name);
  job.store.listen = ep.store_listen;
  job.relay.store = ep.store;
  job.manager.listen = ep.manager_listen;
  job.rollout.store = ep.store;
  job.rollout.manager = ep.manager;
  job.actor.store = ep.store;
  job.actor.manager = ep.manager;
  job.actor.summary_path = (dir / "actor-summary.json").string();
  job.actor.metrics_path = (dir / "metrics.jsonl").string();
  job.actor.weights_path = (dir / "final_weights.safetensors").string();
  job.actor.batches_path = (dir / "actor-batches.bin").string();
  // The durable state a restarted role recovers from (and `sluice run --resume` continues from).
  if (job.manager.state_path.empty()) job.manager.state_path = (dir / "manager.db").string();
  if (job.actor.checkpoint_dir.empty()) job.actor.checkpoint_dir = (dir / "checkpoints").string();
  job.actor.store_lease_ttl_ms = job.store.lease_ttl_ms;  // the one the store uses
  job.relay.store_lease_ttl_ms = job.store.lease_ttl_ms;
  job.rollout.store_lease_ttl_ms = job.store.lease_ttl_ms;
  job.relay.model = job.rollout.model = job.actor.model;
  for (std::string* s :
       {&job.relay.stream_encryption, &job.rollout.stream_encryption, &job.actor.stream_encryption})
    if (*s == "auto") *s = job.stream_encryption;
}

core::Status make_job_security(JobConfig& job, const std::string& keys_dir, bool keep_existing) {
  if (job.auth == "curve") {
    bool have = keep_existing && fs::exists(core::members_file_path(keys_dir));
    if (!have) {
      // Spare identities up to max_relays / max_rollouts: roles that join later
      // (sluice run --add) are members from the start; nobody else is.
      SLUICE_TRY(
          core::make_job_keys(keys_dir, job_identities(std::max(job.relays, job.max_relays),
                                                       std::max(job.rollouts, job.max_rollouts)))
              .status()
              .with_context("job keys"));
    }
  } else {
    core::warn_plain("job " + job.name + " (auth plain)");
    if (job.stream_encryption == "auto")
      core::log::warn(
          "job {}: auth plain has no keys to encrypt with: chunk streams between "
          "datacenters go clear (stream_encryption auto)",
          job.name);
  }
  job.store.security = role_security(job, keys_dir, "weightstore");
  job.manager.security = role_security(job, keys_dir, "rollout-manager");
  job.actor.security = role_security(job, keys_dir, "actor");
  return {};
}

core::Result<std::string> make_agent_token(JobConfig& job, const fs::path& path,
                                           const std::string& rollout_path) {
  if (job.rollout.agent_listen.empty() || !job.rollout.agent_token_file.empty())
    return std::string();
  std::array<std::uint8_t, 24> raw{};
  SLUICE_TRY(core::stream_crypto::fill_random(raw.data(), raw.size()));
  std::string token;
  for (std::uint8_t b : raw)
    token += fmt::format("{:02x}", b);
  SLUICE_TRY(core::write_private_file(path.string(), token + "\n"));
  job.rollout.agent_token_file = rollout_path;
  return token;
}

core::Status check_plain_public(const JobConfig& job, bool allowed, const std::string& command) {
  if (job.auth != "plain" || allowed) return {};
  return core::invalid_argument(
      "auth \"plain\" with the store and the manager bound on 0.0.0.0: anyone who reaches their "
      "ports could publish weights or take trajectories. Use auth \"curve\" (the default), or "
      "pass --allow-plain-public to " +
      command + " if the network is private");
}

void write_run_summary(const fs::path& dir, const JobConfig& job, const JobResult& result,
                       const json& watch, const core::Status& outcome, double wall_s) {
  json summary{{"job", job.name},         {"mode", job.manager.mode},
               {"actor", result.actor},   {"manager", result.manager},
               {"events", result.events}, {"restarts", result.restarts},
               {"watch", watch},          {"outcome", outcome.is_ok() ? "ok" : outcome.to_string()},
               {"wall_s", wall_s}};
  std::ofstream(dir / "summary.json") << summary.dump(2) << "\n";
  // The report: plots of the run, in one self-contained HTML file. A job that failed early may
  // have no metrics; that is a warning, not a second failure.
  if (auto rs =
          write_report(dir.string(), fmt::format("sluice job {} ({})", job.name, job.manager.mode));
      !rs.is_ok()) {
    log::warn("sluice run: no report: {}", rs.to_string());
  }
}

}  // namespace sluice::cli
