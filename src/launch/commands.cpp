#include "launch/commands.hpp"

#include <unistd.h>

#include <cstdio>

#include "analysis/compare.hpp"
#include "core/config.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "wire/messaging.hpp"
#include "launch/executable.hpp"
#include "launch/fleet_roles.hpp"
#include "launch/job.hpp"
#include "launch/job_setup.hpp"
#include "launch/role_file.hpp"
#include "launch/role_metrics.hpp"
#include "relay/relay.hpp"
#include "weightstore/service.hpp"

namespace sluice::cli {

namespace log = core::log;

namespace {

// What every role's configuration has in common.
struct CommonConfig {
  std::string log_level = "info";  // trace|debug|info|warn|error|off

  template <typename V>
  void describe(V& v) {
    v("log_level", log_level, "log level: trace, debug, info, warn, error or off");
  }
  core::Status validate() const { return log::parse_level(log_level).status(); }
};

inline constexpr char kStoreSection[] = "store";
inline constexpr char kRelaySection[] = "relay";

// `sluice weightstore`: the common settings and the store's.
int run_weightstore(const RoleArgs& args, const std::vector<std::string>& overrides) {
  bool printed = false;
  auto cfg = load_role<weightstore::ServiceConfig, kStoreSection>(args, overrides, &printed);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice weightstore: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  if (printed) return 0;
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, cfg->metrics_listen, "weightstore", "store");
  if (!metrics.is_ok()) {
    std::fprintf(stderr, "sluice weightstore: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  auto service = weightstore::StoreService::create(*loop, cfg->section);
  if (!service.is_ok()) {
    std::fprintf(stderr, "sluice weightstore: %s\n", service.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<weightstore::StoreService> svc = std::move(service).value();
  std::printf("endpoint %s\n", svc->endpoint().c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  loop->on_shutdown([&](int) {
    svc.reset();
    loop->stop();
  });
  core::Status s = loop->run();
  log::info("weightstore: stopped ({})", s.to_string());
  return 0;
}

// `sluice relay`: the common settings and the relay's.
int run_relay(const RoleArgs& args, const std::vector<std::string>& overrides,
              const std::vector<std::string>& environment) {
  bool printed = false;
  auto cfg = load_role<relay::RelayConfig, kRelaySection>(
      args, overrides, &printed, [](relay::RelayConfig& r) {
        if (r.relay_id.empty()) r.relay_id = "relay-" + std::to_string(::getpid());
        log::set_process_name(r.relay_id);
      });
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice relay: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  if (printed) return 0;
  auto loop = core::EventLoop::create().value();
  loop->handle_shutdown_signals();
  auto metrics = start_role_metrics(*loop, cfg->metrics_listen, "relay", cfg->section.relay_id);
  if (!metrics.is_ok()) {
    std::fprintf(stderr, "sluice relay: %s\n", metrics.status().to_string().c_str());
    return 2;
  }
  auto r = relay::Relay::create(*loop, cfg->section, environment);
  if (!r.is_ok()) {
    std::fprintf(stderr, "sluice relay: %s\n", r.status().to_string().c_str());
    return 1;
  }
  loop->on_shutdown([&](int) { (*r)->stop(); });
  std::printf("relay %s\n", cfg->section.relay_id.c_str());
  std::fflush(stdout);
  announce_metrics(metrics->get());
  (*r)->run().ignore();
  return 0;
}

}  // namespace

int run_role(const RoleArgs& args, const std::vector<std::string>& environment) {
  log::set_process_name(args.role);
  auto overrides = core::config::overrides_from_env(environment);
  overrides.insert(overrides.end(), args.overrides.begin(), args.overrides.end());
  if (args.role == "weightstore") return run_weightstore(args, overrides);
  if (args.role == "relay") return run_relay(args, overrides, environment);
  if (args.role == "rollout-manager") return run_rollout_manager(args, overrides);
  if (args.role == "rollout") return run_rollout(args, overrides, environment);
  if (args.role == "actor") return run_actor(args, overrides, environment);
  auto cfg = core::config::load<CommonConfig>(args.config_path, overrides);
  if (!cfg.is_ok()) {
    std::fprintf(stderr, "sluice %s: %s\n", args.role.c_str(), cfg.status().to_string().c_str());
    return 2;
  }
  std::string effective = core::config::to_json(*cfg).dump(2);
  if (args.print_config_only) {
    std::printf("%s\n", effective.c_str());
    return 0;
  }
  log::info("effective configuration:\n{}", effective);
  std::fprintf(stderr, "sluice %s: this role is not part of this build yet\n", args.role.c_str());
  return 1;
}

namespace {

// Prints what a finished job did (sluice run, sluice run --resume).
int print_job_result(const JobConfig& job, const core::Result<JobResult>& r) {
  if (!r.is_ok()) {
    std::fprintf(stderr, "sluice run: %s\n", r.status().to_string().c_str());
    return 1;
  }
  const auto& a = r->actor;
  const auto& m = r->manager;
  std::printf(
      "job %s (%s) done in %.1f s: %llu steps, %llu trained tokens (%.0f tokens/s), "
      "staleness mean %.2f max %llu, %llu duplicates refused, %llu repack moves\n",
      job.name.c_str(), m.value("mode", std::string()).c_str(), a.value("wall_s", 0.0),
      static_cast<unsigned long long>(a.value("steps", 0ull)),
      static_cast<unsigned long long>(a.value("trained_tokens", 0ull)),
      a.value("tokens_per_s", 0.0), a.value("staleness_mean", 0.0),
      static_cast<unsigned long long>(a.value("staleness_max", 0ull)),
      static_cast<unsigned long long>(a.value("duplicates", 0ull)),
      static_cast<unsigned long long>(m.value("repack_moves", 0ull)));
  for (const auto& [name, rs] : r->restarts.items()) {
    std::printf("restarted: %s %llu times\n", name.c_str(),
                static_cast<unsigned long long>(rs.value("restarts", 0ull)));
  }
  for (const auto& e : r->events)
    std::printf("event: %s\n", e.c_str());
  double before = a.value("initial_accuracy", -1.0), after = a.value("final_accuracy", -1.0);
  if (before >= 0 && after >= 0) {
    std::printf(
        "held-out accuracy (prompts never trained on): %.1f%% after the warm start, "
        "%.1f%% at the end (%+.1f points)\n",
        100 * before, 100 * after, 100 * (after - before));
    std::fputs(format_by_terms(a.value("initial_accuracy_by_terms", nlohmann::json()).dump(),
                               a.value("final_accuracy_by_terms", nlohmann::json()).dump())
                   .c_str(),
               stdout);
  }
  std::printf("run folder: %s (report.html, metrics.jsonl, final_weights.safetensors)\n",
              r->dir.c_str());
  return 0;
}

}  // namespace

int run_job(const std::string& job_path, const std::vector<std::string>& overrides,
            const std::string& out_dir, const std::vector<std::string>& environment) {
  auto job = load_job_file(job_path, overrides);
  if (job.is_ok()) {
    if (!out_dir.empty()) job->out_dir = out_dir;
    core::Status v = job->validate();
    if (!v.is_ok()) job = v.with_context(job_path);
  }
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice run: %s\n", job.status().to_string().c_str());
    return 2;
  }
  return print_job_result(*job, run_local_job(*job, self_exe(), environment));
}

int resume_job(const std::string& run_dir, const std::vector<std::string>& environment) {
  auto job = load_run_job(run_dir);
  if (!job.is_ok()) {
    std::fprintf(stderr, "sluice run --resume: %s\n", job.status().to_string().c_str());
    return 2;
  }
  std::fprintf(stderr, "sluice run: resuming %s from %s\n", job->name.c_str(), run_dir.c_str());
  return print_job_result(*job, run_local_job(*job, self_exe(), environment, nullptr, true));
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

int run_keys(const KeysArgs& args) {
  auto members = core::make_job_keys(args.dir, job_identities(args.relays, args.rollouts));
  if (!members.is_ok()) {
    std::fprintf(stderr, "sluice keys: %s\n", members.status().to_string().c_str());
    return 1;
  }
  for (const auto& m : members->all()) {
    std::printf("%-16s %-16s %s\n", m.identity.c_str(), m.role.c_str(),
                core::key_file_path(args.dir, m.identity).c_str());
  }
  std::printf("members (the allow-list): %s\n", core::members_file_path(args.dir).c_str());
  return 0;
}

int run_ping(const PingArgs& args) {
  auto loop = core::EventLoop::create();
  if (!loop.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", loop.status().to_string().c_str());
    return 1;
  }
  auto security = tool_security(args.auth, "ping");
  if (security.is_ok() && security->curve()) {
    const core::Member* peer = security->members->by_identity(args.peer);
    if (!peer) {
      security = core::invalid_argument("--peer " + args.peer + " is not a member of the job");
    } else {
      security->server_key = peer->public_key;
    }
  }
  if (!security.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", security.status().to_string().c_str());
    return 2;
  }
  auto client = core::Client::create(**loop, args.endpoint, *security);
  if (!client.is_ok()) {
    std::fprintf(stderr, "sluice ping: %s\n", client.status().to_string().c_str());
    return 2;
  }
  int failures = 0;
  for (int i = 0; i < args.count; ++i) {
    auto t0 = core::Clock::now();
    auto reply = (*client)->ping(core::Millis(args.timeout_ms));
    double ms = std::chrono::duration<double, std::milli>(core::Clock::now() - t0).count();
    if (!reply.is_ok()) {
      std::printf("ping %s: %s\n", args.endpoint.c_str(), reply.status().to_string().c_str());
      ++failures;
      continue;
    }
    std::printf("pong from %s: pid %d, protocol %d, %.3f ms\n", args.endpoint.c_str(),
                reply->body.value("pid", 0), reply->body.value("protocol_version", 0), ms);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace sluice::cli
