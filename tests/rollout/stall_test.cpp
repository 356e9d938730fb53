// The scheduler's stalls, reproduced in synthetic time with the real manager state, worker
// decisions and simulated engine (tests/rollout/fleet_harness.hpp), and checked as a user would:
// the job ends, every trajectory is consumed once, no live rollout is declared dead.
//
// What they found (each failed before its fix):
// - A partial state whose version no live rollout ran any more (its rollout was killed; the rest
//   had moved on) was handed, under tails that continue, to a rollout of a newer version, which
//   refused it (a migrated sequence ran only on its own version); it came back and went out
//   again without end, and the job never finished ("move_failures" and "resumed" in the tens of
//   thousands, nothing logged). The manager now tells the rollout that the state continues there,
//   and a state refused kMaxFailedMoves times restarts from its prompt, logged at warn.
// - A manager sent reports that their rollouts had given up on (queued while it was down, or
//   behind slow commits) served each of them. It now drops a request past its sender's deadline
//   unread (wire/messaging.cpp), and a client queues nothing for a server it is not connected to.
//   This one slowed the job without stalling it here.
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "tests/rollout/fleet_harness.hpp"

using sluice::test::FleetHarness;
using sluice::test::FleetOptions;

namespace {

std::string describe(const sluice::test::FleetResult& r) {
  return fmt::format(
      "done {} at {:.0f} ms, consumed {}, finished {}, acked {}, move failures {}, given up {}, "
      "resumed {}, dead {}, expired {}",
      r.done, r.end_ms, r.consumed, r.counts.finished, r.counts.acked, r.counts.move_failures,
      r.counts.moves_given_up, r.counts.resumed, r.declared_dead, r.expired);
}

}  // namespace

TEST_CASE("fleet: rollouts killed under continuous admission with continuing tails: the job ends") {
  // The kill schedule of the chaos reproduction: one rollout twice, then the manager.
  for (std::uint64_t seed : {1, 2, 3}) {
    FleetOptions o;
    o.prompts = 120;
    o.kills = {{800.0 + 50.0 * static_cast<double>(seed), 2}, {1700, 2}, {2600, 1}};
    o.manager_restarts = {3300};
    FleetHarness fleet(o);
    auto r = fleet.run();
    INFO(describe(r));
    CHECK(r.done);
    CHECK(r.consumed == o.prompts * o.group_size);
    // Nothing circles: a state refused again and again is given up.
    CHECK(r.counts.move_failures < 100);
  }
}

TEST_CASE("fleet: the orphaned tail of a killed rollout continues on a newer version") {
  // Long responses, a slow actor-free fleet: the killed rollout holds long tails whose version
  // nobody runs by the time the manager hands them out again.
  FleetOptions o;
  o.prompts = 60;
  o.kills = {{1200, 0}};
  FleetHarness fleet(o);
  auto r = fleet.run();
  INFO(describe(r));
  CHECK(r.done);
  CHECK(r.consumed == o.prompts * o.group_size);
  CHECK(r.counts.moves_given_up == 0);  // continued, not restarted
}

TEST_CASE("fleet: a restarted manager sent the reports queued while it was down does not stall") {
  // Each report costs the manager 100 ms (a slow commit): three rollouts' reports queue behind
  // each other, time out, and are sent again. Served anyway, the stale ones kept the manager busy
  // with work nobody waited for (49.9 s of synthetic time to the end); dropped unread past their
  // deadline, the manager serves only live reports (47.1 s). At 150 ms a report the manager is
  // this slow to reach is dropped so often that rollouts were declared dead (nothing was lost):
  // the deadline does not make an overloaded manager keep up.
  FleetOptions o;
  o.prompts = 120;
  o.queue_while_down = true;  // the transport delivers what was sent during the outage
  o.service_ms = 100;
  o.down_ms = 600;
  o.manager_restarts = {1500, 3000};
  o.drop_expired = false;
  auto served = FleetHarness(o).run();
  o.drop_expired = true;
  auto dropped = FleetHarness(o).run();
  CHECK(dropped.done);
  CHECK(dropped.consumed == o.prompts * o.group_size);
  CHECK(dropped.declared_dead == 0);
  CHECK(dropped.expired > 0);
  CHECK(dropped.end_ms < served.end_ms);
  MESSAGE("stale reports served: " << describe(served));
  MESSAGE("stale reports dropped: " << describe(dropped));
}

TEST_CASE("fleet: a manager stopped for twice the heartbeat time-out declares no rollout dead") {
  // The manager is stopped (SIGSTOP) mid-job for 3 s, twice its 1.5 s heartbeat time-out. The
  // reports the rollouts sent meanwhile waited on its connections until each sender's time-out
  // (375 ms) passed, and were dropped unread when it continued. It heard nothing from anyone for
  // 3 s, but the silence was its own: no rollout is declared dead, nothing is taken back and
  // handed out again, and every trajectory reaches the actor once.
  FleetOptions o;
  o.prompts = 120;
  o.manager_stalls = {{1500, 2.0 * static_cast<double>(o.heartbeat_timeout_ms)}};
  auto r = FleetHarness(o).run();
  INFO(describe(r));
  CHECK(r.done);
  CHECK(r.end_ms > 4500);  // the stall came mid-job
  CHECK(r.expired > 0);    // reports were dropped unread
  CHECK(r.declared_dead == 0);
  CHECK(r.counts.dead == 0);
  CHECK(r.counts.reclaimed == 0);
  CHECK(r.counts.stalls == 1);
  CHECK(r.counts.duplicates == 0);
  CHECK(r.consumed == o.prompts * o.group_size);
}
