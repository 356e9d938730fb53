#include "launch/job_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/config.hpp"
#include "core/log.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
namespace log = core::log;
using nlohmann::json;

core::Status RoleCommand::validate() const {
  if (!argv.empty() && argv[0].empty()) return core::invalid_argument("argv[0] is empty");
  for (const auto& e : env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      return core::invalid_argument("env entry '" + e + "' is not NAME=VALUE");
    }
  }
  if (argv.empty() && (!env.empty() || !options.empty())) {
    return core::invalid_argument("env or options given without argv (the program to run)");
  }
  return {};
}

core::Status JobConfig::validate() const {
  if (rollouts == 0) return core::invalid_argument("rollouts must be at least 1");
  if (relays == 0) return core::invalid_argument("relays must be at least 1");
  if (timeout_s <= 0) return core::invalid_argument("timeout_s must be positive");
  if (auth != "curve" && auth != "plain") {
    return core::invalid_argument("auth must be curve or plain, not '" + auth + "'");
  }
  const bool keys = auth == "curve";
  SLUICE_TRY(core::check_stream_encryption(stream_encryption, keys, "job"));
  SLUICE_TRY(core::check_stream_encryption(relay.stream_encryption, keys, "relay"));
  SLUICE_TRY(core::check_stream_encryption(rollout.stream_encryption, keys, "rollout"));
  SLUICE_TRY(core::check_stream_encryption(actor.stream_encryption, keys, "actor"));
  if (duration_s < 0) return core::invalid_argument("duration_s must not be negative");
  if (max_rollouts != 0 && max_rollouts < rollouts) {
    return core::invalid_argument(fmt::format(
        "max_rollouts ({}) must be at least rollouts ({}), or 0", max_rollouts, rollouts));
  }
  if (max_relays != 0 && max_relays < relays) {
    return core::invalid_argument(
        fmt::format("max_relays ({}) must be at least relays ({}), or 0", max_relays, relays));
  }
  SLUICE_TRY(restart.validate());
  SLUICE_TRY(chaos.validate().with_context("chaos"));
  SLUICE_TRY(hosts.validate());
  SLUICE_TRY(log::parse_level(log_level).status());
  SLUICE_TRY(actor_command.validate().with_context("actor_command"));
  SLUICE_TRY(rollout_command.validate().with_context("rollout_command"));
  if (!mode.empty()) {
    rollout::ManagerConfig m = manager;
    m.mode = mode;
    SLUICE_TRY(m.validate().with_context("mode"));
  }
  if (manager.prompts == 0 && actor.steps == 0 && duration_s == 0) {
    return core::invalid_argument(
        "the job never ends: set manager.prompts (prompts in the job), actor.steps or "
        "duration_s");
  }
  // The task is configured in each role that uses it: the manager draws prompts from it, the
  // rollouts score with it, the actor warms up and evaluates on it. They must agree, or rewards
  // and evaluation would silently measure different tasks.
  std::vector<std::pair<std::string, json>> tasks;
  if (manager.prompt_source == "task") {
    tasks.emplace_back("manager.task", core::config::to_json(manager.task));
  }
  // A command role reads the task from its section too (docs/architecture.md, "Command roles").
  if (rollout.engine == "model" || rollout_command.enabled()) {
    tasks.emplace_back("rollout.task", core::config::to_json(rollout.task));
  }
  if (actor.policy == "gpt" || actor_command.enabled()) {
    tasks.emplace_back("actor.learner.task", core::config::to_json(actor.learner.task));
  }
  std::vector<std::string> roles;
  for (const auto& t : tasks)
    roles.push_back(t.first);
  for (std::size_t i = 1; i < tasks.size(); ++i) {
    for (const auto& [key, value] : tasks[0].second.items()) {
      const json other = tasks[i].second.value(key, json());
      if (other == value) continue;
      return core::invalid_argument(fmt::format(
          "the task differs between roles: {}.{} is {} but {}.{} is {}; set it the same in {}",
          tasks[0].first, key, value.dump(), tasks[i].first, key, other.dump(),
          fmt::join(roles, ", ")));
    }
  }
  return check_liveness_timing();
}

// A role is declared dead when it is silent for a time-out set in another role's section. Each
// beat must fit into its time-out at least twice, or one late beat (a loaded host, a long step)
// makes a live role look dead.
core::Status JobConfig::check_liveness_timing() const {
  struct Pair {
    const char* beat_key;
    std::uint64_t beat_ms;
    const char* timeout_key;
    std::uint64_t timeout_ms;
  };
  const Pair pairs[] = {
      {"actor.heartbeat_ms", actor.heartbeat_ms, "store.holder_ttl_ms", store.holder_ttl_ms},
      {"rollout.report_ms", rollout.report_ms, "manager.heartbeat_timeout_ms",
       manager.heartbeat_timeout_ms},
      {"actor.manager_call_ms", actor.manager_call_ms, "actor.manager_timeout_ms",
       actor.manager_timeout_ms},
  };
  for (const auto& p : pairs) {
    if (p.beat_ms * 2 > p.timeout_ms) {
      return core::invalid_argument(
          fmt::format("{} ({} ms) must be at most half of {} ({} ms): a live role would look dead "
                      "after one late beat",
                      p.beat_key, p.beat_ms, p.timeout_key, p.timeout_ms));
    }
  }
  // A report that gets no reply silences the rollout for its time-out plus the retry interval;
  // that too must fit into the manager's heartbeat time-out twice, or one slow reply makes a live
  // rollout dead (its work reclaimed, everything in flight thrown away).
  rollout::RolloutConfig rc = rollout;
  rc.derive_report_timing(manager.heartbeat_timeout_ms);
  const std::uint64_t silence = rc.report_timeout_ms + std::max(rc.report_retry_ms, rc.report_ms);
  if (silence * 2 > manager.heartbeat_timeout_ms) {
    return core::invalid_argument(fmt::format(
        "rollout.report_timeout_ms ({} ms) plus rollout.report_retry_ms ({} ms) must be at most "
        "half of manager.heartbeat_timeout_ms ({} ms): one unanswered report would make a live "
        "rollout look dead (leave them 0 to derive them from the heartbeat time-out)",
        rc.report_timeout_ms, std::max(rc.report_retry_ms, rc.report_ms),
        manager.heartbeat_timeout_ms));
  }
  return {};
}

core::Result<core::Security> tool_security(const AuthArgs& auth, const std::string& tool) {
  if (auth.plain) {
    if (!auth.keys_dir.empty()) return core::invalid_argument("give --keys or --plain, not both");
    core::warn_plain("sluice " + tool);
    return core::Security::plain();
  }
  if (auth.keys_dir.empty()) {
    return core::invalid_argument(
        "the job's roles authenticate their peers: give --keys DIR (the job's keys: sluice keys "
        "DIR, or RUN_DIR/keys of sluice run) or, for a job in plain mode, --plain");
  }
  core::SecurityConfig sc;
  sc.key_file = core::key_file_path(auth.keys_dir, auth.as);
  sc.members_file = core::members_file_path(auth.keys_dir);
  return core::load_security(sc, "sluice " + tool);
}

std::vector<std::pair<std::string, std::string>> job_identities(std::uint32_t relays,
                                                                std::uint32_t rollouts) {
  std::vector<std::pair<std::string, std::string>> ids{{"weightstore", core::kRoleWeightstore},
                                                       {"rollout-manager", core::kRoleManager},
                                                       {"actor", core::kRoleActor},
                                                       {"operator", core::kRoleOperator}};
  for (std::uint32_t i = 0; i < relays; ++i)
    ids.emplace_back("relay-" + std::to_string(i), core::kRoleRelay);
  for (std::uint32_t i = 0; i < rollouts; ++i)
    ids.emplace_back("rollout-" + std::to_string(i), core::kRoleRollout);
  return ids;
}

core::SecurityConfig role_security(const JobConfig& job, const std::string& keys_dir,
                                   const std::string& identity) {
  core::SecurityConfig sc;
  sc.mode = job.auth;
  if (job.auth == "curve") {
    sc.key_file = core::key_file_path(keys_dir, identity);
    sc.members_file = core::members_file_path(keys_dir);
  }
  return sc;
}

std::string local_keys_dir(const JobConfig& job) {
  return (fs::absolute(job.out_dir) / "keys").string();
}

std::uint32_t relay_hosts(const JobConfig& job) {
  return job.hosts.joiner_hosts < job.hosts.count ? job.hosts.count - job.hosts.joiner_hosts
                                                  : job.hosts.count;
}

std::uint32_t rollout_host(const JobConfig& job, std::uint32_t index) {
  if (job.hosts.count == 0) return 0;
  const std::uint32_t base = relay_hosts(job);
  if (base < job.hosts.count && index >= job.rollouts) {
    return 1 + base + (index - job.rollouts) % (job.hosts.count - base);
  }
  return 1 + index % base;
}

std::uint32_t relay_host(const JobConfig& job, std::uint32_t index) {
  return job.hosts.count > 0 ? 1 + index % relay_hosts(job) : 0;
}

relay::RelayConfig relay_role_config(const JobConfig& job, std::uint32_t index,
                                     const std::string& keys_dir) {
  relay::RelayConfig rc = job.relay;
  rc.relay_id = fmt::format("relay-{}", index);
  rc.security = role_security(job, keys_dir, rc.relay_id);
  if (std::uint32_t host = relay_host(job, index); host > 0) rc.host = EmulatedHosts::label(host);
  return rc;
}

rollout::RolloutConfig rollout_role_config(const JobConfig& job, std::uint32_t index,
                                           const std::string& keys_dir) {
  rollout::RolloutConfig rc = job.rollout;
  rc.rollout_id = fmt::format("rollout-{}", index);
  rc.security = role_security(job, keys_dir, rc.rollout_id);
  rc.sim.seed = job.rollout.sim.seed;  // one workload: lengths depend on the seed and id only
  rc.derive_report_timing(job.manager.heartbeat_timeout_ms);
  if (std::uint32_t host = rollout_host(job, index); host > 0) {
    rc.host = EmulatedHosts::label(host);
    bool relay_here = false;
    for (std::uint32_t r = 0; r < job.relays; ++r)
      relay_here = relay_here || relay_host(job, r) == host;
    if (!relay_here) rc.local_wait_ms = 0;
  }
  return rc;
}

}  // namespace sluice::cli
