#include "launch/job.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "core/config.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "launch/job_config.hpp"
#include "launch/job_setup.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"
#include "wire/messaging.hpp"
#include "wire/security.hpp"
#include "wire/stream_crypto.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

// How often the version watch asks the manager for its status.
constexpr Millis kVersionWatchPeriod{1000};
// A job measured over a fixed time: the actor's wait to write its summary after SIGTERM.
constexpr Millis kActorStopWait{20000};

// The newest figures the actor has written to metrics.jsonl, for the live progress line. The file
// grows while the job runs; each call reads only the lines added since the last one (a line still
// being written is left for the next call).
class MetricsTail {
 public:
  explicit MetricsTail(fs::path path) : path_(std::move(path)) {}

  void poll() {
    std::ifstream f(path_, std::ios::binary);
    if (!f) return;
    f.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(f, line)) {
      if (f.eof()) break;  // no newline yet: a partial line
      offset_ += line.size() + 1;
      json j = json::parse(line, nullptr, false);
      if (!j.is_object()) continue;
      if (j.contains("accuracy")) accuracy_ = j.value("accuracy", -1.0);
      if (j.contains("reward_mean")) {
        step_ = j.value("step", 0ull);
        reward_ = j.value("reward_mean", 0.0);
        tokens_per_s_ = j.value("tokens_per_s", 0.0);
        staleness_ = j.value("staleness_mean", 0.0);
      }
    }
  }

  // "step 25, reward 0.41, held-out accuracy 52.0%, 4470 tokens/s, staleness 1.40", or what the
  // actor is doing before its first step.
  std::string describe() const {
    std::string acc =
        accuracy_ >= 0 ? fmt::format(", held-out accuracy {:.1f}%", 100.0 * accuracy_) : "";
    if (step_ == 0) return accuracy_ >= 0 ? "actor ready" + acc : "actor warming up";
    return fmt::format("step {}, reward {:.2f}{}, {:.0f} tokens/s, staleness {:.2f}", step_,
                       reward_, acc, tokens_per_s_, staleness_);
  }

 private:
  fs::path path_;
  std::size_t offset_ = 0;
  std::uint64_t step_ = 0;
  double reward_ = 0, tokens_per_s_ = 0, staleness_ = 0, accuracy_ = -1;
};

// Versions seen going backwards, checked from the outside while the job runs: the manager's
// newest version, and the version each rollout process has loaded (a restarted rollout is a new
// reader; until it loads a version it reports 0, which is not counted).
class VersionWatch {
 public:
  void observe(const json& status, Supervisor& sup) {
    if (!status.is_object() || status.empty()) return;
    std::uint64_t latest = status.value("latest", 0ull);
    if (latest < latest_) {
      ++backwards_;
      log::warn("sluice run: the manager's newest version went from {} to {}", latest_, latest);
    }
    latest_ = std::max(latest_, latest);
    for (const auto& r : status.value("rollouts", json::array())) {
      std::string id = r.value("id", std::string());
      std::uint64_t v = r.value("version", 0ull);
      Supervisor::Proc* p = sup.find(id);
      if (!p || v == 0 || !r.value("alive", false)) continue;
      auto& [incarnation, seen] = readers_[id];
      if (incarnation != p->restarts) {
        incarnation = p->restarts;
        seen = 0;
      }
      if (v < seen) {
        ++backwards_;
        log::warn("sluice run: {} went from version {} to {}", id, seen, v);
      }
      seen = std::max(seen, v);
    }
  }
  json to_json() const { return json{{"versions_backwards", backwards_}, {"latest", latest_}}; }
  std::uint64_t latest() const { return latest_; }

 private:
  std::uint64_t latest_ = 0, backwards_ = 0;
  std::map<std::string, std::pair<std::uint32_t, std::uint64_t>> readers_;
};

// What a crashed role's log says about the crash: from UCX's "Caught signal" report (its
// backtrace follows) when the log's last lines have one, else its last `n` lines.
std::vector<std::string> crash_lines(const fs::path& path, std::size_t n) {
  std::ifstream f(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(f, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > 4 * n) lines.pop_front();
  }
  auto from = lines.size() > n ? lines.end() - static_cast<std::ptrdiff_t>(n) : lines.begin();
  for (auto it = lines.begin(); it != lines.end(); ++it) {
    if (it->find("Caught signal") != std::string::npos) from = it;
  }
  auto to = std::min(lines.end(), from + static_cast<std::ptrdiff_t>(2 * n));
  return {from, to};
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Whether `port` can be bound on loopback now (it is released again at once).
bool port_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// A free TCP port for a role to listen on. Taken below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port the kernel handed out for the test bind could be handed
// to some other process's outgoing connection before the role binds it (a manager that then
// "did not come up" in a busy test run). Below the range only explicit binders compete, and a
// random pick makes two of them choosing the same port unlikely. The kernel's pick is the
// fallback.
core::Result<int> free_port() {
  int low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> low;
  if (low > 11000) {
    std::random_device rd;
    std::uniform_int_distribution<int> pick(10000, low - 1);
    for (int i = 0; i < 64; ++i) {
      int port = pick(rd);
      if (port_free(port)) return port;
    }
  }
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return core::internal_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  if (port <= 0) return core::internal_error("could not find a free port");
  return port;
}

// The roles' /metrics addresses in Prometheus's file-based service discovery format
// (file_sd_configs), rewritten when a restarted role announces a new one: a Prometheus pointed at
// this file scrapes the job without further configuration. Written to a temporary name and
// renamed, so a reader never sees half a file.
void write_prometheus_targets(const fs::path& path, const Supervisor& sup) {
  json targets = json::array();
  for (const auto& p : sup.procs()) {
    if (p->metrics_url.empty()) continue;
    std::string hostport = p->metrics_url.substr(std::string("http://").size());
    hostport = hostport.substr(0, hostport.find('/'));
    targets.push_back(
        json{{"targets", json::array({hostport})},
             {"labels", {{"job", "sluice"}, {"role", p->spec.role}, {"name", p->spec.name}}}});
  }
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp);
    f << targets.dump(2) << "\n";
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) log::warn("sluice run: cannot write {}: {}", path.string(), ec.message());
}

}  // namespace

core::Result<JobConfig> load_run_job(const std::string& run_dir) {
  fs::path path = fs::path(run_dir) / "job.json";
  if (!fs::exists(path)) {
    return core::not_found(
        fmt::format("{} is not a run folder: it has no job.json (sluice run writes one)", run_dir));
  }
  SLUICE_ASSIGN_OR_RETURN(JobConfig job, core::config::load<JobConfig>(path.string(), {}));
  job.out_dir = run_dir;
  return job;
}

std::vector<std::string> job_role_environment(const JobConfig& job,
                                              const std::vector<std::string>& environment) {
  std::vector<std::string> env;
  auto user_set = [&](const std::string& var) {
    return std::any_of(environment.begin(), environment.end(),
                       [&](const std::string& e) { return e.rfind(var + "=", 0) == 0; });
  };
  bool user_tls = user_set("UCX_TLS");
  if (job.hosts.count > 0) {
    // Weights cross the emulated links over TCP. UCX's shared-memory transports would reach a
    // holder on another emulated host directly (one kernel), around the links.
    if (!user_tls) env.push_back("UCX_TLS=tcp");
    if (!user_set("UCX_NET_DEVICES")) env.push_back("UCX_NET_DEVICES=eth0");
    env.push_back("UCX_WARN_UNUSED_ENV_VARS=n");
  } else if (!user_tls) {
    env.push_back("UCX_TLS=sm,self");
    // sluice's TCP defaults are unused then, and UCX would say so on the roles' standard output.
    env.push_back("UCX_WARN_UNUSED_ENV_VARS=n");
  }
  return env;
}

namespace {

// `sluice run`'s local job in four steps: plan (settle the job, its hosts, run folder, ports,
// endpoints and keys), start (each role in order, waiting for its ready line), supervise
// (restarts, chaos, progress, until the actor finishes or the job must stop) and collect (the
// manager's final status, summary.json).

// What plan_job settles before any role starts.
struct JobPlan {
  JobConfig job;
  fs::path dir;                          // the run folder
  std::shared_ptr<EmulatedHosts> hosts;  // null: every role on this host
  std::vector<std::string> child_env;    // added to every role's environment
  RolePrograms programs;                 // command roles' programs, resolved
  std::string manager_ep;
  core::Security launcher_security = core::Security::plain();  // the launcher acts as operator
};

// The job's hosts, settings, programs, run folder, ports, endpoints and keys; job.json written.
core::Result<JobPlan> plan_job(JobConfig job, const std::vector<std::string>& environment,
                               std::shared_ptr<EmulatedHosts> hosts, bool resume) {
  JobPlan plan;
  // Every role of a local job runs on this host, so weights move over shared memory. Unless the
  // user chose the transports, the job's data plane uses shared memory only: it is the fastest
  // path on one host, and it keeps UCX 1.13's tcp transport out of the job altogether (reads over
  // tcp go through chunk streams; see core::TransferOptions::tcp_stream).
  plan.child_env = job_role_environment(job, environment);
  bool user_tls = std::any_of(environment.begin(), environment.end(),
                              [](const std::string& e) { return e.rfind("UCX_TLS=", 0) == 0; });
  SLUICE_TRY(job.hosts.validate());
  if (job.hosts.count == 0) hosts.reset();
  if (job.hosts.count > 0) {
    if (!hosts) {
      SLUICE_ASSIGN_OR_RETURN(hosts, EmulatedHosts::up(job.hosts, environment));
    }
    SLUICE_TRY(hosts->enter(0));
    if (job.relays != relay_hosts(job)) {
      log::info("job: {} relays, one on each rollout host{}", relay_hosts(job),
                job.hosts.joiner_hosts > 0 ? " but the joiners' hosts" : "");
      job.relays = relay_hosts(job);
    }
  } else if (!user_tls) {
    log::info("job: UCX_TLS=sm,self for its processes (one host; set UCX_TLS to choose)");
  }
  plan.hosts = hosts;
  SLUICE_TRY(settle_job(job));
  // Command roles: their programs, found before anything starts.
  SLUICE_ASSIGN_OR_RETURN(plan.programs, resolve_role_programs(job, environment));

  if (job.out_dir.empty()) job.out_dir = default_run_dir(job);
  // Absolute: a command role runs in its own workdir and reads these paths from its role file.
  plan.dir = fs::absolute(job.out_dir).lexically_normal();
  SLUICE_TRY(make_run_dir(plan.dir, resume));

  SLUICE_ASSIGN_OR_RETURN(int store_port, free_port());
  SLUICE_ASSIGN_OR_RETURN(int manager_port, free_port());
  // With emulated hosts, host 0's address: the other hosts reach it over their links.
  std::string control_host = hosts ? EmulatedHosts::address(0) : "127.0.0.1";
  std::string store_ep = fmt::format("tcp://{}:{}", control_host, store_port);
  plan.manager_ep = fmt::format("tcp://{}:{}", control_host, manager_port);
  wire_job(job, JobEndpoints{store_ep, store_ep, plan.manager_ep, plan.manager_ep},
           plan.dir.string());
  // The job's keys: made once per run folder (a resumed job keeps its own), 0600 in keys/ (0700).
  // Each role gets its own key file and the members file; the launcher acts as the operator.
  const fs::path keys_dir = plan.dir / "keys";
  SLUICE_TRY(make_job_security(job, keys_dir.string(), resume));
  if (job.auth == "curve") {
    SLUICE_ASSIGN_OR_RETURN(
        plan.launcher_security,
        core::load_security(role_security(job, keys_dir.string(), "operator"), "launcher"));
  }
  {
    std::ofstream f(plan.dir / "job.json");
    f << core::config::to_json(job).dump(2) << "\n";
  }
  plan.job = std::move(job);
  return plan;
}

// A role's process: `sluice ROLE --config FILE`, or a command role's `ARGV... --config FILE`
// (its program resolved). Either way its ready line, logs and restarts are the same.
ProcessSpec role_spec(const JobPlan& plan, const std::string& sluice_exe, const std::string& name,
                      const std::string& role, const fs::path& cfg, const std::string& ready,
                      std::uint32_t host = 0, const RoleCommand* command = nullptr,
                      const std::string& program = "") {
  ProcessSpec ps;
  ps.name = name;
  ps.role = role;
  if (plan.hosts && host > 0) ps.argv = plan.hosts->exec_prefix(host);
  if (command && command->enabled()) {
    ps.argv.push_back(program);
    ps.argv.insert(ps.argv.end(), command->argv.begin() + 1, command->argv.end());
  } else {
    ps.argv.push_back(sluice_exe);
    ps.argv.push_back(role);
  }
  ps.argv.push_back("--config");
  ps.argv.push_back(cfg.string());
  ps.env = plan.child_env;
  if (command) ps.env.insert(ps.env.end(), command->env.begin(), command->env.end());
  ps.log_path = (plan.dir / (name + ".log")).string();
  if (command && command->enabled()) ps.cwd = command->workdir;
  ps.ready = ready;
  ps.clean_exit_ends = role == "actor" || role == "rollout";
  return ps;
}

// A job whose rollouts serve the agent endpoint: a token for it, made here unless the job names
// a token file, written to the run folder's agent_token (created 0600), which the rollouts read;
// and the run folder for their URLs.
core::Status prepare_agent_endpoint(JobConfig& job, const fs::path& dir) {
  if (job.rollout.agent_listen.empty()) return {};
  const fs::path path = dir / "agent_token";
  SLUICE_TRY(make_agent_token(job, path, path.string()).status());
  if (job.rollout.agent_dir.empty()) job.rollout.agent_dir = dir.string();
  return {};
}

// Writes each role's file and starts the roles in order (store, relays, manager, rollouts,
// actor), each ready before the next.
core::Status start_roles(JobPlan& plan, Supervisor& sup, const std::string& sluice_exe,
                         Clock::time_point job_start) {
  JobConfig& job = plan.job;
  const fs::path& dir = plan.dir;
  auto spec = [&](auto&&... a) { return role_spec(plan, sluice_exe, a...); };
  const std::string keys_dir = local_keys_dir(job);
  SLUICE_TRY(write_role_file<kStoreSection>(dir / "weightstore.json", job, job.store));
  SLUICE_TRY(sup.start(spec("weightstore", "weightstore", dir / "weightstore.json", "endpoint")));
  for (std::uint32_t i = 0; i < job.relays; ++i) {
    relay::RelayConfig rc = relay_role_config(job, i, keys_dir);
    std::uint32_t host = plan.hosts ? relay_host(job, i) : 0;
    auto path = dir / fmt::format("relay-{}.json", i);
    SLUICE_TRY(write_role_file<kRelaySection>(path, job, rc));
    SLUICE_TRY(sup.start(spec(rc.relay_id, "relay", path, "relay", host)));
  }
  SLUICE_TRY(write_role_file<kManagerSection>(dir / "rollout-manager.json", job, job.manager));
  SLUICE_TRY(prepare_agent_endpoint(job, dir));
  SLUICE_TRY(sup.start(
      spec("rollout-manager", "rollout-manager", dir / "rollout-manager.json", "endpoint")));
  for (std::uint32_t i = 0; i < job.rollouts; ++i) {
    rollout::RolloutConfig rc = rollout_role_config(job, i, keys_dir);
    std::uint32_t host = plan.hosts ? rollout_host(job, i) : 0;
    auto path = dir / fmt::format("rollout-{}.json", i);
    SLUICE_TRY(write_role_file<kRolloutSection>(path, job, rc, &job.rollout_command));
    SLUICE_TRY(sup.start(spec(rc.rollout_id, "rollout", path, "rollout", host, &job.rollout_command,
                              plan.programs.rollout)));
  }
  // The actor's metric times count from the job's start.
  job.actor.start_offset_s = seconds(Clock::now() - job_start);
  SLUICE_TRY(
      write_role_file<kActorSection>(dir / "actor.json", job, job.actor, &job.actor_command));
  return sup.start(spec("actor", "actor", dir / "actor.json", "actor", 0, &job.actor_command,
                        plan.programs.actor));
}

// The manager's status fields ({} when there is no status).
json status_fields(const core::Result<rollout::ManagerStatus>& r) {
  return r.is_ok() ? r->fields : json::object();
}

// The supervise step: one turn every 100 ms of the event loop until the job ends: restarts and
// their reports, chaos, the live progress line and the version watch.
class JobWatch {
 public:
  JobWatch(const JobPlan& plan, Supervisor& sup, core::EventLoop& loop,
           std::unique_ptr<rollout::ManagerClient> status_client, JobResult& result)
      : job_(plan.job),
        dir_(plan.dir),
        sup_(sup),
        loop_(loop),
        status_client_(std::move(status_client)),
        result_(result),
        actor_metrics_(plan.dir / "metrics.jsonl"),
        chaos_(plan.job.chaos, sup),
        actor_proc_(sup.find("actor")) {}

  // Runs turns until the job ends; its outcome (ok: the actor finished, or duration_s passed).
  core::Status run(const bool& interrupted) {
    while (true) {
      loop_.run_until([&] { return interrupted; }, kLauncherTurn);
      if (interrupted) return core::cancelled("interrupted");
      if (auto outcome = turn(); outcome) return *outcome;
    }
  }

  // Blocking, for the end of the job only.
  json manager_status() { return status_fields(status_client_->status(kManagerStatusTimeout)); }
  VersionWatch& versions() { return watch_; }
  double elapsed() const { return seconds(Clock::now() - t0_); }

 private:
  std::optional<core::Status> turn() {
    double elapsed = this->elapsed();
    if (elapsed > job_.timeout_s) {
      return core::timeout_error(fmt::format("job did not finish within {} s", job_.timeout_s));
    }
    if (job_.duration_s > 0 && elapsed >= job_.duration_s) return stop_for_duration(elapsed);
    apply_chaos(elapsed);
    if (handle_exits(elapsed)) {
      return core::unavailable("a role the job cannot do without died (see above)");
    }
    if (actor_proc_->state == Supervisor::State::kExited) return actor_finished();
    watch_status(elapsed);
    return std::nullopt;
  }

  // A job measured over a fixed time: the actor stops where it is and writes its summary.
  core::Status stop_for_duration(double elapsed) {
    if (actor_proc_->state == Supervisor::State::kRunning) {
      actor_proc_->proc->signal(SIGTERM).ignore();
      auto code = actor_proc_->proc->wait(kActorStopWait);
      if (!code.is_ok()) actor_proc_->proc->signal(SIGKILL).ignore();
    }
    std::ifstream f(job_.actor.summary_path);
    result_.actor = json::parse(f, nullptr, false);
    if (result_.actor.is_discarded()) result_.actor = json::object();
    note(fmt::format("{:.1f}s: stopped after duration_s {}", elapsed, job_.duration_s));
    return {};
  }

  // The job's chaos settings: single kills, pauses and stops, and the random kill schedule.
  void apply_chaos(double elapsed) {
    // Chaos: the first rollout killed once (the older, single-kill setting).
    if (job_.kill_rollout_after_s > 0 && !chaos_killed_ && elapsed >= job_.kill_rollout_after_s) {
      if (auto* p = by_role("rollout", false)) {
        sup_.kill(*p, "kill_rollout_after_s").ignore();
        result_.events.push_back(fmt::format("{:.1f}s: chaos killed {}", elapsed, p->spec.name));
      }
      chaos_killed_ = true;
    }
    if (job_.pause_manager_after_s > 0 && manager_pause_ < 2 &&
        elapsed >=
            job_.pause_manager_after_s + (manager_pause_ == 1 ? job_.pause_manager_for_s : 0)) {
      if (auto* p = sup_.find("rollout-manager"); p && p->proc) {
        p->stopped = manager_pause_ == 0;
        p->proc->signal(manager_pause_ == 0 ? SIGSTOP : SIGCONT).ignore();
        result_.events.push_back(fmt::format("{:.1f}s: chaos {} {}", elapsed,
                                             manager_pause_ == 0 ? "paused" : "resumed",
                                             p->spec.name));
      }
      ++manager_pause_;
    }
    if (job_.stop_rollout_after_s > 0 && !chaos_stopped_ && elapsed >= job_.stop_rollout_after_s) {
      if (auto* p = by_role("rollout", true)) {
        p->stopped = true;
        p->proc->signal(SIGSTOP).ignore();
        result_.events.push_back(fmt::format("{:.1f}s: chaos stopped {}", elapsed, p->spec.name));
      }
      chaos_stopped_ = true;
    }
    // Chaos kills count from a published version (by default the first): the job proper, after
    // start-up and the actor's warm start.
    if (chaos_origin_ < 0 && watch_.latest() >= job_.chaos.after_version) chaos_origin_ = elapsed;
    if (auto killed = chaos_origin_ < 0 ? "" : chaos_.due(elapsed - chaos_origin_);
        !killed.empty()) {
      result_.events.push_back(fmt::format("{:.1f}s: chaos killed {}", elapsed, killed));
    }
  }

  // Children that died: restarted by the supervisor (with backoff, up to their limit). The
  // actor's normal exit (status 0) ends the job in turn(). True when one the job cannot do
  // without is not restarted again.
  bool handle_exits(double elapsed) {
    bool fatal = false;
    auto exited = sup_.poll();
    if (sup_.take_metrics_changed()) {
      write_prometheus_targets(dir_ / "prometheus_targets.json", sup_);
    }
    for (Supervisor::Proc* p : exited) {
      if (p == actor_proc_ && p->last_status == 0) continue;  // the job's end, handled in turn()
      if (p->spec.role == "rollout" && p->last_status == 0) continue;  // the job is done
      report_exit(*p, elapsed);
      if (p->state == Supervisor::State::kGaveUp && p->spec.role != "rollout") {
        note(fmt::format("{:.1f}s: {} is not restarted again ({} restarts)", elapsed, p->spec.name,
                         p->restarts));
        fatal = true;
      }
    }
    return fatal;
  }

  void report_exit(const Supervisor::Proc& p, double elapsed) {
    fs::path log_path = p.spec.log_path;
    std::string what = fmt::format(
        "{:.1f}s: {} exited (status {}){}; its log: {}", elapsed, p.spec.name, p.last_status,
        p.state == Supervisor::State::kBackoff
            ? fmt::format(", restart {} of {}", p.restarts, job_.restart.limit(p.spec.role))
            : "",
        log_path.string());
    // Deaths chaos caused are expected: recorded, not shouted.
    if (p.kills > 0 && p.last_status == 128 + SIGKILL) {
      result_.events.push_back(what);
      return;
    }
    note(what);
    // A crash leaves its reason (UCX's backtrace, an assertion) at the end of the log.
    if (p.last_status > 128 && p.last_status != 128 + SIGKILL) {
      for (const auto& line : crash_lines(log_path, 12))
        std::fprintf(stderr, "sluice run:   | %s\n", line.c_str());
    }
  }

  // The actor exited with status 0: the job's end, with its summary read.
  core::Status actor_finished() {
    bool has_summary =
        std::any_of(actor_proc_->output.begin(), actor_proc_->output.end(),
                    [](const std::string& l) { return l.rfind("summary ", 0) == 0; });
    if (!has_summary) {
      return core::internal_error(fmt::format("the actor exited without a summary; its log: {}",
                                              (dir_ / "actor.log").string()));
    }
    std::ifstream f(job_.actor.summary_path);
    result_.actor = json::parse(f, nullptr, false);
    if (result_.actor.is_discarded()) {
      return core::internal_error(
          fmt::format("the actor's summary {} is unreadable", job_.actor.summary_path));
    }
    return {};
  }

  // While the job runs the manager's status is asked for without waiting for the answer: a dead
  // manager's 3 s time-out would otherwise hold up the launcher, and with it every restart (a
  // killed manager came back 6 s after its death, a store 3 s).
  void ask_status() {
    if (status_asking_) return;
    status_asking_ = true;
    status_client_->status_async(kManagerStatusTimeout,
                                 [this](core::Result<rollout::ManagerStatus> r) {
                                   status_asking_ = false;
                                   status_reply_ = status_fields(r);
                                   status_fresh_ = true;
                                 });
  }

  // The version watch every second, and the progress line every progress_s.
  void watch_status(double elapsed) {
    bool progress_due = job_.progress_s > 0 && Clock::now() >= next_progress_;
    if (progress_due || Clock::now() >= next_watch_) {
      next_watch_ = Clock::now() + kVersionWatchPeriod;
      ask_status();
      if (progress_due) {
        progress_wanted_ = true;
        next_progress_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(job_.progress_s));
      }
    }
    if (!status_fresh_) return;
    status_fresh_ = false;
    watch_.observe(status_reply_, sup_);
    const bool print = progress_wanted_;
    progress_wanted_ = false;
    if (!status_reply_.empty() && print) print_progress(status_reply_, elapsed);
  }

  void print_progress(const json& s, double elapsed) {
    // The fleet's side of the metrics: rollout time stalled on weights, and occupancy.
    double wall = 0, stall = 0, occ = 0;
    for (const auto& ro : s.value("rollouts", json::array())) {
      const json& st = ro.value("stats", json::object());
      wall += st.value("wall_s", 0.0);
      stall += st.value("load_s", 0.0) + st.value("barrier_s", 0.0);
      occ += st.value("occupancy_s", 0.0);
    }
    if (wall > 0) {
      std::ofstream(dir_ / "metrics.jsonl", std::ios::app)
          << json{{"t", elapsed}, {"weight_stall_frac", stall / wall}, {"rollout_util", occ / wall}}
                 .dump()
          << "\n";
    }
    std::size_t alive = 0;
    for (const auto& r : s.value("rollouts", json::array()))
      alive += r.value("alive", false);
    std::string total = job_.manager.prompts
                            ? fmt::format("/{}", job_.manager.prompts * job_.manager.group_size)
                            : "";
    std::string restarts =
        sup_.total_restarts() > 0 ? fmt::format(", restarts {}", sup_.total_restarts()) : "";
    actor_metrics_.poll();
    std::fprintf(stderr,
                 "[%6.1fs] %s: version %llu, %s, weight-sync stall %.1f%%, trajectories "
                 "%llu%s, rollouts %zu alive, repack moves %llu%s\n",
                 elapsed, job_.manager.mode.c_str(),
                 static_cast<unsigned long long>(s.value("latest", 0ull)),
                 actor_metrics_.describe().c_str(), wall > 0 ? 100.0 * stall / wall : 0.0,
                 static_cast<unsigned long long>(s.value("finished", 0ull)), total.c_str(), alive,
                 static_cast<unsigned long long>(s.value("repack_moves", 0ull)), restarts.c_str());
  }

  Supervisor::Proc* by_role(const std::string& role, bool last) {
    Supervisor::Proc* found = nullptr;
    for (auto& p : sup_.procs()) {
      if (p->spec.role != role || p->state != Supervisor::State::kRunning) continue;
      found = p.get();
      if (!last) break;
    }
    return found;
  }

  void note(const std::string& what) {
    result_.events.push_back(what);
    std::fprintf(stderr, "sluice run: %s\n", what.c_str());
  }

  const JobConfig& job_;
  const fs::path dir_;
  Supervisor& sup_;
  core::EventLoop& loop_;
  std::unique_ptr<rollout::ManagerClient> status_client_;
  JobResult& result_;
  json status_reply_;
  bool status_asking_ = false, status_fresh_ = false, progress_wanted_ = false;
  const Clock::time_point t0_ = Clock::now();
  Clock::time_point next_progress_ = t0_, next_watch_ = t0_;
  VersionWatch watch_;
  MetricsTail actor_metrics_;
  bool chaos_killed_ = false, chaos_stopped_ = false;
  int manager_pause_ = 0;  // 0 not yet, 1 paused, 2 resumed
  ChaosSchedule chaos_;
  double chaos_origin_ = -1;  // job time at which chaos.after_version was published
  Supervisor::Proc* actor_proc_;
};

// The end of the job: the manager's final status, every role stopped, summary.json written.
core::Result<JobResult> collect_job(const JobPlan& plan, Supervisor& sup, JobWatch& watch,
                                    JobResult result, const core::Status& outcome) {
  result.manager = watch.manager_status();
  watch.versions().observe(result.manager, sup);
  sup.stop_all();
  result.restarts = sup.restarts_json();
  write_run_summary(plan.dir, plan.job, result, watch.versions().to_json(), outcome,
                    watch.elapsed());
  if (!outcome.is_ok()) {
    return outcome.with_context(fmt::format("job {} ({})", plan.job.name, plan.dir.string()));
  }
  return result;
}

}  // namespace

core::Result<JobResult> run_local_job(JobConfig job, const std::string& sluice_exe,
                                      const std::vector<std::string>& environment,
                                      std::shared_ptr<EmulatedHosts> hosts, bool resume) {
  SLUICE_ASSIGN_OR_RETURN(JobPlan plan,
                          plan_job(std::move(job), environment, std::move(hosts), resume));
  auto loop = core::EventLoop::create().value();
  bool interrupted = false;
  loop->handle_shutdown_signals();
  loop->on_shutdown([&](int) { interrupted = true; });

  JobResult result;
  auto job_start = Clock::now();
  result.dir = plan.dir.string();
  Supervisor sup(plan.job.restart, plan.dir / "events.jsonl", job_start);
  if (resume) sup.event("resumed", nullptr, json{{"run_dir", plan.dir.string()}});
  if (auto started = start_roles(plan, sup, sluice_exe, job_start); !started.is_ok()) {
    sup.stop_all();
    return started;
  }

  SLUICE_ASSIGN_OR_RETURN(auto status_client, rollout::ManagerClient::create(
                                                  *loop, plan.manager_ep, plan.launcher_security,
                                                  kManagerStatusTimeout));
  JobWatch watch(plan, sup, *loop, std::move(status_client), result);
  core::Status outcome = watch.run(interrupted);
  return collect_job(plan, sup, watch, std::move(result), outcome);
}

}  // namespace sluice::cli
