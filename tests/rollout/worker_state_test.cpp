// The rollout worker's decisions driven directly: synthetic time, no engine, no manager. The
// test plays the manager's side of the worker's recovery rows: a manager that restarts (reports
// unanswered for a while), a rollout whose heartbeats were lost (declared dead, it rejoins), and
// a weights pull that fails.
#include <doctest/doctest.h>

#include <chrono>

#include "rollout/worker_state.hpp"

using namespace sluice;
using rollout::WorkerState;
using std::chrono::milliseconds;
using Clock = core::Clock;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + milliseconds(ms);
}

rollout::RolloutConfig config() {
  rollout::RolloutConfig c;
  c.report_ms = 100;
  c.report_retry_ms = 400;
  c.manager_timeout_ms = 5000;
  c.max_held_finished = 4;
  REQUIRE(c.validate().is_ok());
  return c;
}

}  // namespace

TEST_SUITE("worker state") {
  TEST_CASE("a rollout whose manager restarts holds its work and reports it when it answers") {
    WorkerState s(config(), kT0);
    CHECK(s.report_due(kT0));
    CHECK_FALSE(s.report_answered(kT0));
    s.schedule_report(kT0);
    CHECK_FALSE(s.report_due(at(99)));
    CHECK(s.report_due(at(100)));

    // The manager dies: the first failure begins an outage, the next ones do not.
    bool first = false;
    CHECK(s.report_failed(at(100), &first).is_ok());
    CHECK(first);
    CHECK(s.manager_unreachable());
    s.schedule_report(at(100));
    CHECK_FALSE(s.report_due(at(499)));  // report_retry_ms apart while it is away
    CHECK(s.report_due(at(500)));
    CHECK(s.report_failed(at(1100), &first).is_ok());
    CHECK_FALSE(first);

    // Meanwhile it generates until it holds max_held_finished finished trajectories.
    CHECK(s.may_admit(3));
    CHECK_FALSE(s.may_admit(4));

    // The restarted manager answers: the outage ends, reports go back to report_ms.
    CHECK(s.report_answered(at(2100)));
    CHECK_FALSE(s.manager_unreachable());
    s.schedule_report(at(2100));
    CHECK(s.report_due(at(2200)));
    // Finished work with nothing else to do goes out at once.
    s.report_at_once(at(2150));
    CHECK(s.report_due(at(2150)));
  }

  TEST_CASE("an unanswered report's time-out and retry: set, derived, or the defaults") {
    rollout::RolloutConfig c;
    CHECK(c.effective_report_timeout_ms() == rollout::RolloutConfig::kDefaultReportTimeoutMs);
    CHECK(c.effective_report_retry_ms() == rollout::RolloutConfig::kDefaultReportRetryMs);
    c.derive_report_timing(2000);  // the manager's heartbeat time-out
    CHECK(c.report_timeout_ms == 500);
    CHECK(c.report_retry_ms == 250);
    c.report_timeout_ms = 300;  // set: kept
    c.report_retry_ms = 0;
    c.derive_report_timing(1000);
    CHECK(c.report_timeout_ms == 300);
    CHECK(c.report_retry_ms == 125);
    // The retry never comes sooner than the report period.
    c.report_ms = 200;
    c.report_retry_ms = 50;
    WorkerState s(c, kT0);
    CHECK(s.report_failed(kT0, nullptr).is_ok());
    s.schedule_report(kT0);
    CHECK_FALSE(s.report_due(at(199)));
    CHECK(s.report_due(at(200)));
  }

  TEST_CASE("a rollout whose manager stays silent past manager_timeout_ms ends") {
    WorkerState s(config(), kT0);
    CHECK(s.report_answered(at(1000)) == false);
    CHECK(s.report_failed(at(3000), nullptr).is_ok());
    CHECK(s.report_failed(at(6000), nullptr).is_ok());  // 5000 ms since the last answer
    auto st = s.report_failed(at(6001), nullptr);
    CHECK(st.code() == core::Code::kUnavailable);
    // An answer in time starts the count again.
    WorkerState t(config(), kT0);
    CHECK(t.report_failed(at(4000), nullptr).is_ok());
    CHECK(t.report_answered(at(4500)));
    CHECK(t.report_failed(at(9500), nullptr).is_ok());
  }

  TEST_CASE("a rollout declared dead drops its work and takes nothing else from the reply") {
    WorkerState s(config(), kT0);
    CHECK(s.manager_state() == "barrier");  // until the manager says otherwise
    rollout::ReportReply r;
    r.state = "run";
    r.latest = 4;
    r.abandon_before = 2;
    REQUIRE(s.take_reply(r));
    CHECK(s.manager_state() == "run");
    CHECK(s.latest() == 4);
    CHECK(s.abandon_before() == 2);
    CHECK_FALSE(s.done());

    // Its reports were lost long enough for the manager to declare it dead: rejoin.
    rollout::ReportReply dead;
    dead.rejoin = true;
    dead.done = true;  // never set with rejoin; ignored if it were
    dead.latest = 9;
    CHECK_FALSE(s.take_reply(dead));
    CHECK(s.latest() == 4);
    CHECK_FALSE(s.done());
    CHECK(s.manager_state() == "run");
  }

  TEST_CASE("work of versions the actor no longer trains is stopped") {
    const std::vector<rollout::ActiveSequence> active = {
        {"p1/0", 10, 3}, {"p2/0", 10, 5}, {"p3/0", 0, 0}};
    CHECK(WorkerState::stale(active, 5, 0).empty());
    CHECK(WorkerState::stale(active, 5, 4) == std::vector<std::string>{"p1/0"});
    // One that has generated nothing counts as the loaded version's.
    CHECK(WorkerState::stale(active, 5, 6) == std::vector<std::string>{"p1/0", "p2/0", "p3/0"});
    CHECK(WorkerState::stale(active, 7, 6) == std::vector<std::string>{"p1/0", "p2/0"});
  }

  TEST_CASE("a weights pull that fails is asked for again, and a load waits for it bounded") {
    WorkerState s(config(), kT0);
    CHECK_FALSE(s.should_pull(0, 0, false));  // no version named yet
    s.latest_named(3);
    s.latest_named(2);  // a maximum
    CHECK(s.latest() == 3);
    CHECK(s.should_pull(2, 2, false));
    CHECK_FALSE(s.should_pull(2, 2, true));  // one pull at a time
    // The pull fails: nothing staged; the next reply asks for it again.
    CHECK(s.should_pull(2, 2, false));
    // Staged (or loaded): nothing more to pull.
    CHECK_FALSE(s.should_pull(2, 3, false));
    CHECK_FALSE(s.should_pull(3, 0, false));
    // A load waits for its pull at most 30 s, then goes on without it.
    CHECK(s.load_waits(at(0), at(29999)));
    CHECK_FALSE(s.load_waits(at(0), at(30000)));
  }
}
