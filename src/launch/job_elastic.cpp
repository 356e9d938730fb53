#include "launch/job_elastic.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "core/config.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "launch/executable.hpp"
#include "launch/job.hpp"
#include "launch/role_file.hpp"
#include "launch/supervisor.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"
#include "wire/messaging.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

namespace fs = std::filesystem;
namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

core::Result<FleetChange> parse_fleet_change(const std::string& spec) {
  FleetChange c;
  std::size_t eq = spec.find('=');
  c.role = spec.substr(0, eq);
  if (c.role != "rollout" && c.role != "relay") {
    return core::invalid_argument(
        fmt::format("'{}': the role must be rollout or relay (rollout=N, relay=N)", spec));
  }
  if (eq != std::string::npos) {
    const std::string n = spec.substr(eq + 1);
    if (n.empty() || n.size() > 4 ||
        !std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return core::invalid_argument(fmt::format("'{}': N must be a number from 1 to 1024", spec));
    }
    c.count = static_cast<std::uint32_t>(std::stoul(n));
    if (c.count == 0 || c.count > 1024) {
      return core::invalid_argument(fmt::format("'{}': N must be a number from 1 to 1024", spec));
    }
  }
  return c;
}

namespace {

// Taking the run's lock: this many tries, this long apart.
constexpr int kRunLockTries = 100;
constexpr Millis kRunLockRetry{100};
// How often the joiners' record asks the manager who has joined.
constexpr Millis kJoinStatusPeriod{200};
// How often a removal looks whether its victims have gone.
constexpr Millis kLeavePoll{100};

std::vector<std::string> read_cmdline(const fs::path& proc) {
  std::ifstream f(proc / "cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string a; std::getline(f, a, '\0');)
    argv.push_back(a);
  return argv;
}

// K of "ROLE-K.json", or -1.
long role_index(const std::string& file, const std::string& role) {
  const std::string head = role + "-", tail = ".json";
  if (file.size() <= head.size() + tail.size() || file.rfind(head, 0) != 0 ||
      file.compare(file.size() - tail.size(), tail.size(), tail) != 0) {
    return -1;
  }
  std::string k = file.substr(head.size(), file.size() - head.size() - tail.size());
  if (k.empty() || k.size() > 6 ||
      !std::all_of(k.begin(), k.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return -1;
  }
  return std::stol(k);
}

// Moves this thread into the emulated host 0 (the trainer's side, where the manager listens)
// before any socket is made: the ZeroMQ I/O thread stays in the namespace it started in.
core::Status enter_host0(const JobConfig& job) {
  std::string path = fmt::format("/run/netns/{}0", job.hosts.prefix);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return core::failed_precondition(
        fmt::format("the job's emulated hosts are not up ({}: {}); is the job still running?", path,
                    std::strerror(errno)));
  }
  int rc = ::setns(fd, CLONE_NEWNET);
  int err = errno;
  ::close(fd);
  if (rc != 0) return core::internal_error(fmt::format("setns {}: {}", path, std::strerror(err)));
  return {};
}

// The file lock that keeps two --add commands from claiming the same ids.
class RunLock {
 public:
  static core::Result<RunLock> take(const fs::path& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return core::internal_error(fmt::format("open {}: {}", path.string(), std::strerror(errno)));
    }
    for (int i = 0; i < kRunLockTries; ++i) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return RunLock(fd);
      std::this_thread::sleep_for(kRunLockRetry);
    }
    ::close(fd);
    return core::timeout_error(
        fmt::format("{} is held by another sluice run --add for 10 s", path.string()));
  }
  RunLock(RunLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  RunLock& operator=(RunLock&&) = delete;
  ~RunLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// The ids to start: the first `count` indices below the job's limit whose role file was never
// written (a fresh id: no process of the job ever had it, so the manager and store have nothing
// of it to mix up).
core::Result<std::vector<std::uint32_t>> fresh_indices(const JobConfig& job, const fs::path& dir,
                                                       const FleetChange& c) {
  const bool rollout = c.role == "rollout";
  const std::uint32_t limit =
      rollout ? std::max(job.rollouts, job.max_rollouts) : std::max(job.relays, job.max_relays);
  std::vector<std::uint32_t> out;
  for (std::uint32_t i = 0; i < limit && out.size() < c.count; ++i) {
    if (fs::exists(dir / fmt::format("{}-{}.json", c.role, i))) continue;
    if (job.auth == "curve") {
      auto key = role_security(job, local_keys_dir(job), fmt::format("{}-{}", c.role, i)).key_file;
      if (!fs::exists(key)) continue;
    }
    out.push_back(i);
  }
  if (out.size() < c.count) {
    return core::failed_precondition(fmt::format(
        "the job admits at most {} {}s and has {} fresh identities left, not {}: start it with "
        "a larger {} (the store and the manager admit only the job's members)",
        limit, c.role, out.size(), c.count, rollout ? "max_rollouts" : "max_relays"));
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::uint32_t, int>> running_roles(const std::string& run_dir,
                                                         const std::string& role) {
  std::vector<std::pair<std::uint32_t, int>> out;
  std::error_code ec;
  const fs::path want = fs::weakly_canonical(fs::absolute(run_dir, ec), ec);
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    // The sluice process itself, not a wrapper that runs it in an emulated host.
    std::error_code ec2;
    fs::path exe = fs::read_symlink(e.path() / "exe", ec2);
    if (ec2 || exe.filename().string().rfind("sluice", 0) != 0) continue;
    auto argv = read_cmdline(e.path());
    for (std::size_t i = 1; i + 1 < argv.size(); ++i) {
      if (argv[i] != "--config" || argv[i - 1] != role) continue;
      fs::path cfg = argv[i + 1];
      if (cfg.is_relative()) cfg = fs::read_symlink(e.path() / "cwd", ec2) / cfg;
      cfg = fs::weakly_canonical(cfg, ec2);
      long k = role_index(cfg.filename().string(), role);
      if (k >= 0 && cfg.parent_path() == want) {
        out.emplace_back(static_cast<std::uint32_t>(k), std::stoi(name));
      }
      break;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Claims `change.count` fresh ids of the role and writes their role files, under the run
// folder's lock.
core::Result<std::vector<std::uint32_t>> claim_joiners(const JobConfig& job, const fs::path& dir,
                                                       const FleetChange& change) {
  SLUICE_ASSIGN_OR_RETURN(auto lock, RunLock::take(dir / "elastic.lock"));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::uint32_t> indices, fresh_indices(job, dir, change));
  const std::string keys_dir = local_keys_dir(job);
  for (std::uint32_t i : indices) {
    fs::path path = dir / fmt::format("{}-{}.json", change.role, i);
    if (change.role == "rollout") {
      rollout::RolloutConfig rc = rollout_role_config(job, i, keys_dir);
      rc.local_wait_first = false;  // a joiner's first weights come from every holder at once
      SLUICE_TRY(write_role_file<kRolloutSection>(path, job, rc));
    } else {
      SLUICE_TRY(write_role_file<kRelaySection>(path, job, relay_role_config(job, i, keys_dir)));
    }
  }
  return indices;
}

std::vector<ProcessSpec> joiner_specs(const JobConfig& job, const fs::path& dir,
                                      const FleetChange& change,
                                      const std::vector<std::uint32_t>& indices,
                                      const std::string& script, const std::string& sluice_exe,
                                      const std::vector<std::string>& env) {
  std::vector<ProcessSpec> specs;
  for (std::uint32_t i : indices) {
    ProcessSpec ps;
    ps.name = fmt::format("{}-{}", change.role, i);
    ps.role = change.role;
    std::uint32_t host = change.role == "rollout" ? rollout_host(job, i) : relay_host(job, i);
    if (host > 0) ps.argv = {script, "exec", "--prefix", job.hosts.prefix, std::to_string(host)};
    ps.argv.insert(ps.argv.end(),
                   {sluice_exe, change.role, "--config", (dir / (ps.name + ".json")).string()});
    ps.env = env;
    ps.log_path = (dir / (ps.name + ".log")).string();
    ps.ready = change.role;
    ps.clean_exit_ends = change.role == "rollout";
    specs.push_back(std::move(ps));
  }
  return specs;
}

// The joiners' progress, from the manager's status: one joins.jsonl line each, once it has
// finished its first trajectory. Asked without waiting for the answer, at most every 200 ms.
class JoinLog {
 public:
  JoinLog(core::EventLoop& loop, const JobConfig& job, const fs::path& dir,
          const FleetChange& change, const std::vector<std::uint32_t>& indices)
      : dir_(dir) {
    if (change.role == "rollout") {
      auto sec = core::load_security(role_security(job, local_keys_dir(job), "operator"),
                                     "sluice run --add");
      if (sec.is_ok()) {
        auto c =
            rollout::ManagerClient::create(loop, job.manager.listen, *sec, kManagerStatusTimeout);
        if (c.is_ok()) status_client_ = std::move(c).value();
      }
      if (!status_client_) {
        log::warn("sluice run --add: no status from the manager; no joins.jsonl");
      }
    }
    for (std::uint32_t i : indices)
      mine_.insert(fmt::format("{}-{}", change.role, i));
  }

  void ask() {
    if (!status_client_ || asking_ || Clock::now() < next_ask_ ||
        recorded_.size() == mine_.size()) {
      return;
    }
    asking_ = true;
    next_ask_ = Clock::now() + kJoinStatusPeriod;
    status_client_->status_async(kManagerStatusTimeout,
                                 [this](core::Result<rollout::ManagerStatus> r) {
                                   asking_ = false;
                                   if (r.is_ok()) record(r->fields);
                                 });
  }

 private:
  void record(const json& status) {
    std::ofstream out(dir_ / "joins.jsonl", std::ios::app);
    for (const auto& ro : status.value("rollouts", json::array())) {
      std::string id = ro.value("id", std::string());
      const json stats = ro.value("stats", json::object());
      if (!mine_.count(id) || recorded_.count(id)) continue;
      if (stats.value("first_trajectory_s", -1.0) < 0) continue;
      recorded_.insert(id);
      out << json{{"name", id},
                  {"added_unix", start_unix_},
                  {"created_unix", stats.value("created_unix", 0.0)},
                  {"first_weights_s", stats.value("first_weights_s", -1.0)},
                  {"first_read_s", stats.value("first_read_s", -1.0)},
                  {"first_trajectory_s", stats.value("first_trajectory_s", -1.0)},
                  {"pulled_bytes", stats.value("pulled_bytes", 0ull)},
                  {"pulled_same_host_bytes", stats.value("pulled_same_host_bytes", 0ull)}}
                 .dump()
          << "\n";
    }
  }

  const fs::path dir_;
  std::unique_ptr<rollout::ManagerClient> status_client_;
  std::set<std::string> mine_, recorded_;
  const double start_unix_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  bool asking_ = false;
  Clock::time_point next_ask_ = Clock::now();
};

// Supervises the joiners until they are done, gave up, or the job ended; 1 when one gave up.
int supervise_joiners(core::EventLoop& loop, Supervisor& sup, const fs::path& dir,
                      const bool& interrupted, JoinLog& joins) {
  int code = 0;
  while (true) {
    loop.run_until([&] { return interrupted; }, kLauncherTurn);
    if (interrupted) break;
    for (Supervisor::Proc* p : sup.poll()) {
      if (p->last_status == 0 && p->state == Supervisor::State::kExited) continue;
      std::fprintf(stderr, "sluice run --add: %s exited (status %d)%s; its log: %s\n",
                   p->spec.name.c_str(), p->last_status,
                   p->state == Supervisor::State::kBackoff ? ", restarting" : "",
                   p->spec.log_path.c_str());
    }
    bool any_up = false, gave_up = false;
    for (const auto& p : sup.procs()) {
      any_up = any_up ||
               (p->state != Supervisor::State::kExited && p->state != Supervisor::State::kGaveUp);
      gave_up = gave_up || p->state == Supervisor::State::kGaveUp;
    }
    if (gave_up) code = 1;
    if (!any_up) break;
    if (fs::exists(dir / "summary.json")) break;  // the job ended: what is left goes too
    joins.ask();
  }
  return code;
}

}  // namespace

int run_add(const std::string& spec, const std::string& run_dir,
            const std::vector<std::string>& overrides, const std::string& sluice_exe,
            const std::vector<std::string>& environment) {
  auto fail = [](int code, const core::Status& s) {
    std::fprintf(stderr, "sluice run --add: %s\n", s.to_string().c_str());
    return code;
  };
  auto change = parse_fleet_change(spec);
  if (!change.is_ok()) return fail(2, change.status());
  const fs::path dir(run_dir);
  if (!fs::exists(dir / "job.json")) {
    return fail(
        2, core::not_found(fmt::format(
               "{} is not a run folder: it has no job.json (sluice run writes one)", run_dir)));
  }
  if (fs::exists(dir / "summary.json")) {
    return fail(1, core::failed_precondition(
                       fmt::format("the job of {} has ended (it has a summary.json)", run_dir)));
  }
  auto loaded = core::config::load<JobConfig>((dir / "job.json").string(), overrides);
  if (!loaded.is_ok()) return fail(2, loaded.status());
  JobConfig job = std::move(loaded).value();
  job.out_dir = run_dir;
  if (change->role == "rollout" && job.rollout_command.enabled()) {
    return fail(2, core::invalid_argument(
                       "--add rollout starts built-in rollouts; this job's rollouts are a "
                       "rollout_command"));
  }
  std::string script;
  if (job.hosts.count > 0) {
    script = find_emuhosts(environment);
    if (script.empty()) return fail(1, core::not_found("cannot find scripts/emuhosts.sh"));
    if (auto s = enter_host0(job); !s.is_ok()) return fail(1, s);
  }
  auto indices = claim_joiners(job, dir, *change);
  if (!indices.is_ok()) return fail(1, indices.status());

  auto loop = core::EventLoop::create().value();
  bool interrupted = false;
  loop->handle_shutdown_signals();
  loop->on_shutdown([&](int) { interrupted = true; });
  const auto start = Clock::now();
  Supervisor sup(job.restart, dir / fmt::format("events-add-{}.jsonl", ::getpid()), start);
  const std::vector<std::string> env = job_role_environment(job, environment);
  // All at once: a wave of joiners, each reading its first version as it comes up.
  if (auto s =
          sup.start_together(joiner_specs(job, dir, *change, *indices, script, sluice_exe, env));
      !s.is_ok()) {
    sup.stop_all();
    return fail(1, s);
  }
  for (const auto& p : sup.procs())
    std::fprintf(stderr, "sluice run --add: %s joined %s\n", p->spec.name.c_str(), run_dir.c_str());
  JoinLog joins(*loop, job, dir, *change, *indices);
  const int code = supervise_joiners(*loop, sup, dir, interrupted, joins);
  sup.stop_all();
  std::fprintf(stderr, "sluice run --add: %zu %s(s) done\n", indices->size(), change->role.c_str());
  return code;
}

int run_remove(const std::string& spec, const std::string& run_dir, double wait_s) {
  auto change = parse_fleet_change(spec);
  if (!change.is_ok()) {
    std::fprintf(stderr, "sluice run --remove: %s\n", change.status().to_string().c_str());
    return 2;
  }
  if (change->role != "rollout") {
    // A relay that exits is restarted by its supervisor (the chain needs it back); a relay leaves
    // when its --add command is stopped.
    std::fprintf(stderr,
                 "sluice run --remove: only rollouts are removed this way; stop the sluice run "
                 "--add that started a relay to remove it\n");
    return 2;
  }
  if (!fs::exists(fs::path(run_dir) / "job.json")) {
    std::fprintf(stderr, "sluice run --remove: %s is not a run folder (no job.json)\n",
                 run_dir.c_str());
    return 2;
  }
  auto running = running_roles(run_dir, change->role);
  if (running.size() < change->count) {
    std::fprintf(stderr, "sluice run --remove: %s has %zu running %ss, fewer than %u\n",
                 run_dir.c_str(), running.size(), change->role.c_str(), change->count);
    return 1;
  }
  // The newest ids go first.
  std::vector<std::pair<std::uint32_t, int>> victims(running.end() - change->count, running.end());
  for (const auto& [k, pid] : victims) {
    if (::kill(pid, SIGTERM) != 0) {
      std::fprintf(stderr, "sluice run --remove: SIGTERM to %s-%u (pid %d): %s\n",
                   change->role.c_str(), k, pid, std::strerror(errno));
    }
  }
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(wait_s));
  std::size_t left = victims.size();
  while (Clock::now() < deadline) {
    auto now_running = running_roles(run_dir, change->role);
    left = 0;
    for (const auto& v : victims)
      left += std::count(now_running.begin(), now_running.end(), v);
    if (left == 0) break;
    std::this_thread::sleep_for(kLeavePoll);
  }
  for (const auto& [k, pid] : victims)
    std::fprintf(stderr, "sluice run --remove: %s-%u (pid %d) asked to leave\n",
                 change->role.c_str(), k, pid);
  if (left > 0) {
    std::fprintf(stderr, "sluice run --remove: %zu still running after %.0f s\n", left, wait_s);
    return 1;
  }
  return 0;
}

}  // namespace sluice::cli
