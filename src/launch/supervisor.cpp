#include "launch/supervisor.hpp"

#include <signal.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "core/log.hpp"

namespace sluice::cli {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {
// Stopping a role: its wait after SIGTERM, then after SIGKILL.
constexpr Millis kTermWait{3000};
constexpr Millis kKillWait{2000};
}  // namespace

core::Status RestartConfig::validate() const {
  if (backoff_max_ms < backoff_ms) {
    return core::invalid_argument("restart.backoff_max_ms must be at least restart.backoff_ms");
  }
  if (ready_timeout_ms < 1000) {
    return core::invalid_argument("restart.ready_timeout_ms must be at least 1000");
  }
  return {};
}

std::uint32_t RestartConfig::limit(const std::string& role) const {
  if (!enabled) return 0;
  if (role == "weightstore") return weightstore;
  if (role == "relay") return relay;
  if (role == "rollout-manager") return rollout_manager;
  if (role == "rollout") return rollout;
  if (role == "actor") return actor;
  return 0;
}

Supervisor::Supervisor(RestartConfig config, std::filesystem::path events_path,
                       Clock::time_point job_start)
    : cfg_(std::move(config)), events_(events_path, std::ios::app), job_start_(job_start) {}

Supervisor::~Supervisor() {
  stop_all();
}

double Supervisor::now_s() const {
  return std::chrono::duration<double>(Clock::now() - job_start_).count();
}

void Supervisor::event(const std::string& what, const Proc* p, json fields) {
  json e{{"t", now_s()}, {"event", what}};
  if (p) {
    e["name"] = p->spec.name;
    e["role"] = p->spec.role;
    e["restarts"] = p->restarts;
  }
  if (fields.is_object()) e.update(fields);
  events_ << e.dump() << std::endl;
}

core::Status Supervisor::spawn(Proc& p) {
  core::Subprocess::Options o;
  o.argv = p.spec.argv;
  o.extra_env = p.spec.env;
  o.stderr_path = p.spec.log_path;
  o.cwd = p.spec.cwd;
  SLUICE_ASSIGN_OR_RETURN(p.proc, core::Subprocess::spawn(o));
  p.state = State::kStarting;
  p.stopped = false;
  p.dying = false;
  p.started_at = Clock::now();
  p.output.clear();
  if (!p.metrics_url.empty()) metrics_changed_ = true;
  p.metrics_url.clear();
  p.deadline = Clock::now() + Millis(cfg_.ready_timeout_ms);
  return {};
}

core::Status Supervisor::start(ProcessSpec spec) {
  std::vector<ProcessSpec> one;
  one.push_back(std::move(spec));
  return start_together(std::move(one));
}

core::Status Supervisor::start_together(std::vector<ProcessSpec> specs) {
  std::vector<std::unique_ptr<Proc>> started;
  for (auto& spec : specs) {
    auto owned = std::make_unique<Proc>();
    owned->spec = std::move(spec);
    if (core::Status s = spawn(*owned); !s.is_ok()) {
      for (auto& p : started)
        p->proc->signal(SIGKILL).ignore();
      return s;
    }
    started.push_back(std::move(owned));
  }
  // Every process is running before the first ready line is read: their start-ups overlap.
  for (std::size_t i = 0; i < started.size(); ++i) {
    if (core::Status s = await_ready(std::move(started[i])); !s.is_ok()) {
      for (std::size_t j = i + 1; j < started.size(); ++j)
        started[j]->proc->signal(SIGKILL).ignore();
      return s;
    }
  }
  return {};
}

core::Status Supervisor::await_ready(std::unique_ptr<Proc> owned) {
  Proc& p = *owned;
  auto line = p.proc->read_line(Millis(cfg_.ready_timeout_ms));
  if (!line.is_ok() || line->rfind(p.spec.ready, 0) != 0) {
    p.proc->signal(SIGKILL).ignore();
    return core::unavailable(fmt::format("{} did not come up ({}); see {}", p.spec.name,
                                         line.is_ok() ? *line : line.status().to_string(),
                                         p.spec.log_path));
  }
  p.state = State::kRunning;
  event("started", &p);
  procs_.push_back(std::move(owned));
  return {};
}

Supervisor::Proc* Supervisor::find(const std::string& name) {
  for (auto& p : procs_) {
    if (p->spec.name == name) return p.get();
  }
  return nullptr;
}

core::Status Supervisor::kill(Proc& p, const std::string& why) {
  if ((p.state != State::kRunning && p.state != State::kStarting) || p.dying) {
    return core::failed_precondition(p.spec.name + " is not running");
  }
  SLUICE_TRY(p.proc->signal(SIGKILL));
  p.dying = true;
  ++p.kills;
  event("killed", &p, json{{"why", why}});
  return {};
}

std::vector<Supervisor::Proc*> Supervisor::poll() {
  std::vector<Proc*> exited;
  for (auto& owned : procs_) {
    Proc& p = *owned;
    if (p.state == State::kBackoff && Clock::now() >= p.deadline) {
      if (auto s = spawn(p); !s.is_ok()) {
        log::warn("sluice run: restarting {}: {}", p.spec.name, s.to_string());
        p.deadline = Clock::now() + Millis(cfg_.backoff_max_ms);
      } else {
        event("restarting", &p);
      }
      continue;
    }
    if (p.state != State::kStarting && p.state != State::kRunning) continue;
    for (auto& line : p.proc->drain_lines()) {
      if (p.state == State::kStarting && line.rfind(p.spec.ready, 0) == 0) {
        p.state = State::kRunning;
        event("ready", &p);
        continue;
      }
      if (line.rfind("metrics http://", 0) == 0) {
        p.metrics_url = line.substr(8);
        metrics_changed_ = true;
        continue;
      }
      // Kept for the caller (the actor's summary line); bounded.
      if (p.output.size() >= 256) p.output.erase(p.output.begin());
      p.output.push_back(std::move(line));
    }
    bool late = p.state == State::kStarting && Clock::now() > p.deadline;
    if (late) {
      log::warn("sluice run: {} not ready after {} ms; killing it", p.spec.name,
                cfg_.ready_timeout_ms);
      p.proc->signal(SIGKILL).ignore();
    }
    if (p.proc->running()) continue;
    auto code = p.proc->wait(Millis(0));
    // What it wrote last (the actor's summary) before it closed its output.
    for (auto& line : p.proc->drain_lines())
      p.output.push_back(std::move(line));
    p.last_status = code.is_ok() ? *code : -1;
    exited.push_back(&p);
    if (p.spec.clean_exit_ends && p.last_status == 0) {
      p.state = State::kExited;
      event("exited", &p, json{{"status", 0}});
      continue;
    }
    std::uint32_t limit = cfg_.limit(p.spec.role);
    if (p.restarts >= limit) {
      p.state = State::kGaveUp;
      event("gave_up", &p, json{{"status", p.last_status}, {"limit", limit}});
      continue;
    }
    // Backoff: 200 ms, 400 ms, ... up to the cap, so a role that dies at once does not spin;
    // one that ran a good while before it died comes back at once again.
    if (Clock::now() - p.started_at > Millis(2 * cfg_.backoff_max_ms)) p.streak = 0;
    std::uint64_t delay = cfg_.backoff_ms;
    for (std::uint32_t i = 0; i < p.streak && delay < cfg_.backoff_max_ms; ++i)
      delay *= 2;
    ++p.streak;
    delay = std::min(delay, cfg_.backoff_max_ms);
    ++p.restarts;
    p.state = State::kBackoff;
    p.deadline = Clock::now() + Millis(delay);
    event("died", &p, json{{"status", p.last_status}, {"restart_in_ms", delay}});
  }
  return exited;
}

void Supervisor::stop_all() {
  // The weight store goes last: holders that leave withdraw their copies through it first.
  for (bool store : {false, true}) {
    for (auto& p : procs_) {
      if ((p->spec.role == "weightstore") != store || !p->proc) continue;
      if (p->stopped) p->proc->signal(SIGCONT).ignore();
      if (p->proc->running()) p->proc->signal(SIGTERM).ignore();
    }
    for (auto& p : procs_) {
      if ((p->spec.role == "weightstore") != store || !p->proc) continue;
      if (!p->proc->wait(kTermWait).is_ok()) {
        p->proc->signal(SIGKILL).ignore();
        p->proc->wait(kKillWait).ignore();
      }
      p->proc->drain_lines();
    }
  }
}

json Supervisor::restarts_json() const {
  json j = json::object();
  for (const auto& p : procs_) {
    if (p->restarts == 0 && p->kills == 0) continue;
    j[p->spec.name] = json{{"role", p->spec.role}, {"restarts", p->restarts}, {"kills", p->kills}};
  }
  return j;
}

std::uint64_t Supervisor::total_restarts() const {
  std::uint64_t n = 0;
  for (const auto& p : procs_)
    n += p->restarts;
  return n;
}

}  // namespace sluice::cli
