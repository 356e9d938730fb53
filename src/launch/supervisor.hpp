// The launcher's supervision of a job's role processes (`sluice run`, `sluice chaos`): starts each
// role, waits (bounded) for its ready line, drains its standard output every turn so that no
// child ever blocks on a full pipe, notices a child that died (kill -9, a crash, a non-zero
// exit) and starts it again with the same arguments after a backoff that doubles with each
// restart, up to a per-role limit. Every event goes to events.jsonl in the run folder, one JSON
// object a line ({"t", "event", "name", "role", ...}); `t` counts from the job's start.
//
// A restarted role comes back by itself: the store rebuilds from its holders' re-registrations,
// the manager from its database, the actor from its newest checkpoint, a relay or a rollout by
// rejoining (docs/architecture.md, "Recovery").
//
// Thread safety: one thread. Nothing here blocks for longer than a start's ready wait, which only
// start() makes (at the job's start); restarts wait for their ready line in poll().
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/status.hpp"

namespace sluice::cli {

// Restarts allowed per process of each role before the job gives up, and the backoff.
struct RestartConfig {
  bool enabled = true;
  std::uint32_t weightstore = 20;
  std::uint32_t relay = 20;
  std::uint32_t rollout_manager = 20;
  std::uint32_t rollout = 20;
  std::uint32_t actor = 20;
  std::uint64_t backoff_ms = 200;          // first restart's delay; doubles with each restart
  std::uint64_t backoff_max_ms = 5000;     // cap on the delay
  std::uint64_t ready_timeout_ms = 60000;  // a (re)started role must print its ready line by then

  template <typename V>
  void describe(V& v) {
    v("enabled", enabled,
      "restart a role that died (false: a dead store, manager or actor ends "
      "the job, as before)");
    v("weightstore", weightstore, "restarts allowed for the weight store");
    v("relay", relay, "restarts allowed per relay");
    v("rollout_manager", rollout_manager, "restarts allowed for the rollout manager");
    v("rollout", rollout, "restarts allowed per rollout");
    v("actor", actor, "restarts allowed for the actor");
    v("backoff_ms", backoff_ms,
      "delay before a restart, doubled with each death soon after a start (reset once a role "
      "ran 2 x backoff_max_ms)");
    v("backoff_max_ms", backoff_max_ms, "largest delay before a restart");
    v("ready_timeout_ms", ready_timeout_ms, "a (re)started role must be ready within this");
  }
  core::Status validate() const;
  std::uint32_t limit(const std::string& role) const;
};

struct ProcessSpec {
  std::string name;  // rollout-3
  std::string role;  // rollout
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V" added to the launcher's environment
  std::string log_path;          // its stderr (appended, across restarts)
  std::string cwd;               // its working directory (empty: the launcher's)
  std::string ready;             // the first stdout line starts with this once it is ready
  bool clean_exit_ends = false;  // status 0 means done (actor, rollout), not a death to restart
};

class Supervisor {
 public:
  enum class State { kStarting, kRunning, kBackoff, kExited, kGaveUp };
  struct Proc {
    ProcessSpec spec;
    std::unique_ptr<core::Subprocess> proc;
    State state = State::kStarting;
    std::uint32_t restarts = 0;
    std::uint32_t kills = 0;   // by chaos
    std::uint32_t streak = 0;  // deaths in a row, each soon after its start (sets the backoff)
    bool dying = false;        // killed, its exit not yet seen
    core::Clock::time_point started_at;
    int last_status = 0;
    core::Clock::time_point deadline;  // kStarting: ready by then; kBackoff: start then
    std::vector<std::string> output;   // stdout lines after the ready line (the actor's summary)
    bool stopped = false;              // SIGSTOPped (chaos)
    std::string metrics_url;           // from its "metrics <url>" line ("" until then)
  };

  Supervisor(RestartConfig config, std::filesystem::path events_path,
             core::Clock::time_point job_start);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // True once after any role announced a new /metrics address (a restart picks a new port).
  bool take_metrics_changed() {
    bool c = metrics_changed_;
    metrics_changed_ = false;
    return c;
  }

  // Starts a role and waits for its ready line (at the job's start, in order).
  core::Status start(ProcessSpec spec);
  // Starts several at once and then waits for each one's ready line (joiners of a running job:
  // they come up together, as one wave). On an error the ones not yet ready are killed.
  core::Status start_together(std::vector<ProcessSpec> specs);

  // One turn: drains every child's output, notices exits and restarts what is due. Returns the
  // processes that exited this turn (with their last_status set). One whose spec says a clean
  // exit ends it and that exited with status 0 is left down (kExited); any other is restarted
  // unless its limit is spent (kGaveUp: the job cannot go on) or restarts are disabled.
  std::vector<Proc*> poll();

  // SIGKILLs a running process (chaos); it is restarted like any other death.
  core::Status kill(Proc& p, const std::string& why);
  // Writes an event line (t, event, plus `fields`).
  void event(const std::string& what, const Proc* p, nlohmann::json fields = {});

  std::vector<std::unique_ptr<Proc>>& procs() { return procs_; }
  const std::vector<std::unique_ptr<Proc>>& procs() const { return procs_; }
  Proc* find(const std::string& name);
  // Stops everything: SIGTERM, then SIGKILL after a grace; the store last.
  void stop_all();
  // Restarts per process, kills per process, as JSON objects keyed by name.
  nlohmann::json restarts_json() const;
  std::uint64_t total_restarts() const;

 private:
  core::Status spawn(Proc& p);
  core::Status await_ready(std::unique_ptr<Proc> owned);
  double now_s() const;

  RestartConfig cfg_;
  std::ofstream events_;
  core::Clock::time_point job_start_;
  std::vector<std::unique_ptr<Proc>> procs_;
  bool metrics_changed_ = false;
};

}  // namespace sluice::cli
