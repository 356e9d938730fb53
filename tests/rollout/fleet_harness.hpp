// A whole fleet under synthetic time, for the scheduler's failure tests: the real ManagerState
// (with its database, so it can be restarted), rollouts that are the real WorkerState around the
// real SimEngine and handle replies as rollout/worker.cpp does, an actor that collects,
// acknowledges and publishes, and a transport between them with its failure modes modelled:
// the manager serves one report at a time at a cost each, a report waits for its reply up to
// its time-out, and reports sent while the manager is down either reach it when it is back (a
// socket that queues for a peer not connected) or are dropped.
//
// Nothing here sleeps: the clock is a number of milliseconds that run() advances.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rollout/manager_state.hpp"
#include "rollout/sim_engine.hpp"
#include "rollout/worker.hpp"
#include "rollout/worker_state.hpp"

namespace sluice::test {

struct FleetOptions {
  std::string admission = "continuous";
  std::string tail = "continue";
  std::uint32_t rollouts = 3;
  std::uint64_t prompts = 60;
  std::uint32_t group_size = 4;
  std::uint32_t batch = 16;
  std::uint32_t max_sequences = 6;
  std::uint64_t heartbeat_timeout_ms = 1500;
  std::uint64_t report_ms = 20;
  std::uint64_t report_timeout_ms = 375;
  std::uint64_t report_retry_ms = 190;
  bool repack = true;
  // The manager's time to serve one report (its decoding, state change and commit).
  double service_ms = 0.5;
  // A report sent while the manager is down reaches the restarted manager (the transport queued
  // it), as opposed to being dropped unsent.
  bool queue_while_down = false;
  // The manager drops, unread, a report that reaches it past its sender's deadline (its time-out).
  bool drop_expired = true;
  // Faults: rollouts killed (by index, at a time; restarted as a new process restart_ms later)
  // and manager restarts (at a time; back down_ms later on its database).
  struct Kill {
    double at_ms;
    std::uint32_t rollout;
  };
  std::vector<Kill> kills;
  std::vector<double> manager_restarts;
  // The manager process stopped (SIGSTOP) at a time for a while, then continued: meanwhile it
  // runs no timer and serves nothing, and the reports sent to it wait on its connections.
  struct Stall {
    double at_ms;
    double for_ms;
  };
  std::vector<Stall> manager_stalls;
  double restart_ms = 100;
  double down_ms = 200;
  double end_ms = 120000;  // give up (the job stalled) after this much synthetic time
};

struct FleetResult {
  bool done = false;
  double end_ms = 0;           // when the manager said done (or when run() gave up)
  std::uint64_t consumed = 0;  // trajectories the actor took, each counted once
  std::uint64_t expired = 0;   // reports the manager dropped past their deadline
  std::uint64_t declared_dead = 0;
  rollout::ManagerCounts counts;  // of the last manager incarnation
};

class FleetHarness {
 public:
  explicit FleetHarness(FleetOptions o);
  ~FleetHarness();
  FleetResult run();

 private:
  struct Rollout;
  struct Report;
  void start_manager();
  bool manager_stopped() const;
  void step_manager();
  void step_actor();
  void step_rollout(Rollout& r);
  void send_report(Rollout& r);
  void apply_reply(Rollout& r, rollout::ReportReply reply);
  rollout::Clock::time_point tp() const;

  FleetOptions o_;
  std::filesystem::path dir_;
  double now_ = 0;
  std::unique_ptr<rollout::ManagerState> mgr_;
  double manager_back_at_ = -1;  // >= 0 while the manager is down
  double manager_busy_until_ = 0;
  std::deque<std::unique_ptr<Report>> inbox_;
  std::vector<std::unique_ptr<Rollout>> rollouts_;
  double next_tick_ = 0, next_repack_ = 0, next_collect_ = 0;
  // The actor: received, trained (consumed), acknowledged; publishes a version per batch.
  std::vector<std::string> to_ack_;
  std::set<std::string> seen_;
  std::uint64_t consumed_ = 0, trained_since_publish_ = 0, version_ = 1;
  std::uint64_t expired_ = 0;
  std::uint64_t dead_ = 0;
};

}  // namespace sluice::test
