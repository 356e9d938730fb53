// The actor trainer's decisions driven directly: synthetic time, no store, no manager, no policy.
// The test plays the store's and the manager's side of the actor's recovery rows: a store that
// is away while a version is published, a version taken by a killed incarnation, a manager that
// is away (and one that stays away), an actor restarted from its checkpoint or without one, and
// when checkpoints are written.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "actor/checkpoint.hpp"
#include "actor/consumed.hpp"
#include "actor/trainer_state.hpp"

using namespace sluice;
using actor::TrainerState;
using std::chrono::milliseconds;
using Clock = core::Clock;
using Retry = TrainerState::PublishRetry;
using Step = TrainerState::Step;
using Ids = std::vector<std::string>;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + milliseconds(ms);
}

// With checkpoints (the folder is never touched here): one every 3 steps, none by time, an idle
// flush after 1 s.
actor::TrainerConfig config() {
  actor::TrainerConfig c;
  c.manager = "tcp://manager:1";
  c.batch_trajectories = 4;
  c.group_size = 2;
  c.collect_ms = 10;
  c.manager_timeout_ms = 5000;
  c.store_timeout_ms = 3000;
  c.checkpoint_dir = "ckpt";
  c.checkpoint_every_steps = 3;
  c.checkpoint_every_s = 0;
  c.checkpoint_idle_s = 1;
  REQUIRE(c.validate().is_ok());
  return c;
}

// A ledger as a checkpoint holding `ids` (all trained on) restores it.
actor::Consumed restored_ledger(const actor::TrainerConfig& cfg, const Ids& ids) {
  actor::Consumed before(TrainerState::consumed_options(cfg));
  for (const auto& id : ids)
    before.consume(id, true);
  before.synced();
  actor::CheckpointState cs;
  before.save(cs);
  actor::Consumed after(TrainerState::consumed_options(cfg));
  REQUIRE(after.restore(cs).is_ok());
  return after;
}

}  // namespace

TEST_SUITE("trainer state") {
  TEST_CASE("a trainer whose store is away publishes the same version again until store_timeout") {
    TrainerState s(config(), kT0);
    CHECK(s.publish_begin(at(0)) == 1);
    // The store restarts: every try within store_timeout_ms is the same version.
    CHECK(s.publish_failed(at(500), core::Code::kUnavailable, false) == Retry::kSameVersion);
    CHECK(s.version() == 1);
    CHECK(s.publish_failed(at(2999), core::Code::kTimeout, false) == Retry::kSameVersion);
    CHECK(s.version() == 1);
    // Still away store_timeout_ms after the first try: the actor fails.
    CHECK(s.publish_failed(at(3000), core::Code::kUnavailable, false) == Retry::kFail);
    CHECK(s.version() == 1);

    // The next publish has its own store_timeout_ms, counted from its own first try.
    CHECK(s.publish_begin(at(10000)) == 2);
    CHECK(s.publish_failed(at(12999), core::Code::kTimeout, false) == Retry::kSameVersion);
    // The manifest of the try that timed out did reach the store: the retry finds the version
    // taken and moves on.
    CHECK(s.publish_failed(at(13000), core::Code::kAlreadyExists, false) == Retry::kNextVersion);
    CHECK(s.version() == 3);

    // Asked to stop, it does not wait for the store.
    CHECK(s.publish_begin(at(20000)) == 4);
    CHECK(s.publish_failed(at(20001), core::Code::kUnavailable, true) == Retry::kFail);
    // Anything else is not the store being away: it fails at once, the version kept.
    CHECK(s.publish_begin(at(30000)) == 5);
    CHECK(s.publish_failed(at(30001), core::Code::kInvalidArgument, false) == Retry::kFail);
    CHECK(s.version() == 5);
  }

  TEST_CASE("a trainer skips versions a killed incarnation took, kPublishSkips at most") {
    TrainerState s(config(), kT0);
    s.start_above(6);  // the store holds 6; a killed actor put 7.. and died before committing
    REQUIRE(s.publish_begin(at(0)) == 7);
    for (int i = 0; i < actor::kPublishSkips; ++i) {
      const core::Code code =
          i % 2 == 0 ? core::Code::kAlreadyExists : core::Code::kFailedPrecondition;
      CHECK(s.publish_failed(at(i), code, false) == Retry::kNextVersion);
      CHECK(s.version() == 8 + static_cast<std::uint64_t>(i));
      // The store away in between is a retry of the same version, not a skip.
      CHECK(s.publish_failed(at(i), core::Code::kUnavailable, false) == Retry::kSameVersion);
    }
    // One more taken version: the actor fails rather than climbing without bound.
    CHECK(s.publish_failed(at(100), core::Code::kAlreadyExists, false) == Retry::kFail);
    CHECK(s.version() == 7 + static_cast<std::uint64_t>(actor::kPublishSkips));
    // A new publish may skip again.
    CHECK(s.publish_begin(at(200)) == 8 + static_cast<std::uint64_t>(actor::kPublishSkips));
    CHECK(s.publish_failed(at(201), core::Code::kAlreadyExists, false) == Retry::kNextVersion);
  }

  TEST_CASE("a trainer whose manager is away keeps its acknowledgements, then sends them once") {
    TrainerState s(config(), kT0);
    s.collect_reply(at(0), false, true);
    s.received("p0/0", false);
    s.received("p0/1", false);
    // With checkpoints an id is acknowledged only once a checkpoint holds it.
    CHECK(s.have() == Ids{"p0/0", "p0/1"});
    CHECK(s.ack().empty());
    s.consume("p0/0", true);
    s.consume("p0/1", true);
    s.trained(at(100));
    REQUIRE(s.checkpoint_due(at(100), true));
    s.checkpoint_written(at(150));
    CHECK(s.ack() == Ids{"p0/0", "p0/1"});

    // The manager dies: calls fail; what they carried is kept for the next one.
    CHECK(s.collect_failed(at(1000), core::timeout_error("no reply")).is_ok());
    CHECK(s.collect_failed(at(5000), core::timeout_error("no reply")).is_ok());  // 5000 ms silent
    CHECK(s.ack() == Ids{"p0/0", "p0/1"});
    CHECK(s.have() == Ids{"p0/0", "p0/1"});
    CHECK(s.final_ack_due(0));

    // The restarted manager answers: delivered, so not sent again.
    s.call_answered();
    s.collect_reply(at(5000), false, false);
    CHECK(s.ack().empty());
    CHECK(s.have().empty());
    CHECK_FALSE(s.final_ack_due(0));
    // Its silence is counted from its last answer.
    CHECK(s.collect_failed(at(10000), core::timeout_error("no reply")).is_ok());
    const core::Status st = s.collect_failed(at(10001), core::timeout_error("no reply"));
    CHECK(st.code() == core::Code::kUnavailable);
    CHECK(st.message().find("manager tcp://manager:1 silent for 5000 ms") != std::string::npos);
  }

  TEST_CASE("a trainer whose manager stays silent past manager_timeout_ms fails") {
    TrainerState s(config(), kT0);
    // Never answered: silent since the start.
    CHECK(s.collect_failed(at(5000), core::unavailable("down")).is_ok());
    CHECK(s.collect_failed(at(5001), core::unavailable("down")).code() == core::Code::kUnavailable);
    // A call that reached the manager but got an error reply delivered its lists; only a reply
    // counts as hearing from it.
    TrainerState t(config(), kT0);
    t.received("p0/0", false);
    t.call_answered();
    CHECK(t.have().empty());
    CHECK(t.collect_failed(at(5001), core::protocol_error("bad reply")).code() ==
          core::Code::kUnavailable);
  }

  TEST_CASE("a trainer without checkpoints acknowledges on receipt") {
    actor::TrainerConfig cfg = config();
    cfg.checkpoint_dir.clear();
    TrainerState s(cfg, kT0);
    s.received("p0/0", false);
    CHECK(s.ack() == Ids{"p0/0"});
    CHECK(s.have() == Ids{"p0/0"});
    // And never writes a checkpoint, not even at the end.
    s.consume("p0/0", true);
    s.trained(at(10));
    CHECK_FALSE(s.checkpoint_due(at(10), true));
    CHECK_FALSE(s.idle_flush_due(at(100000)));
  }

  TEST_CASE("a restarted trainer publishes above the store's latest and acks durable ids again") {
    const actor::TrainerConfig cfg = config();
    // From a checkpoint at version 5; the killed incarnation had published up to 8 since.
    TrainerState s(cfg, kT0);
    s.resume(7, 5, 8, restored_ledger(cfg, {"p0/0", "p0/1"}));
    CHECK(s.steps() == 7);
    CHECK(s.publish_begin(at(0)) == 9);
    // The store lost nothing newer than the checkpoint: above the checkpoint's version.
    TrainerState newer(cfg, kT0);
    newer.resume(7, 12, 8, restored_ledger(cfg, {}));
    CHECK(newer.publish_begin(at(0)) == 13);

    // The manager, in a new epoch, re-sends what it never heard acknowledged.
    s.received("p0/0", true);  // the buffer refused it: consumed before the kill, durable
    s.received("p1/0", false);
    CHECK(s.ack() == Ids{"p0/0"});
    CHECK(s.have() == Ids{"p0/0", "p1/0"});
    // A duplicate that is not durable (still in the buffer) is not acknowledged.
    s.received("p1/0", true);
    CHECK(s.ack() == Ids{"p0/0"});

    // No checkpoint, but the store has versions of an actor killed before its first checkpoint.
    TrainerState fresh(cfg, kT0);
    fresh.start_above(6);
    CHECK(fresh.publish_begin(at(0)) == 7);
    // The job's first actor: the store has none.
    TrainerState first(cfg, kT0);
    first.start_above(0);
    CHECK(first.publish_begin(at(0)) == 1);
  }

  TEST_CASE("a trainer checkpoints by steps, by time, when idle, and at the end") {
    SUBCASE("every checkpoint_every_steps steps") {
      TrainerState s(config(), kT0);
      s.trained(at(1));
      s.trained(at(2));
      CHECK_FALSE(s.checkpoint_due(at(2), false));
      s.trained(at(3));
      CHECK(s.checkpoint_due(at(3), false));
      s.checkpoint_written(at(3));
      CHECK_FALSE(s.checkpoint_due(at(4), false));
      s.trained(at(5));
      CHECK_FALSE(s.checkpoint_due(at(5), false));
    }
    SUBCASE("every checkpoint_every_s seconds") {
      actor::TrainerConfig cfg = config();
      cfg.checkpoint_every_steps = 0;
      cfg.checkpoint_every_s = 10;
      TrainerState s(cfg, kT0);
      s.trained(at(1000));
      CHECK_FALSE(s.checkpoint_due(at(9999), false));
      CHECK(s.checkpoint_due(at(10000), false));
      s.checkpoint_written(at(10000));
      s.trained(at(12000));
      CHECK_FALSE(s.checkpoint_due(at(19999), false));
      CHECK(s.checkpoint_due(at(20000), false));
    }
    SUBCASE("idle checkpoint_idle_s with consumed work not yet synced") {
      TrainerState s(config(), kT0);
      s.collect_reply(at(500), false, true);  // an arrival is progress
      s.consume("p0/0", false);               // dropped as stale: consumed, not trained
      CHECK_FALSE(s.idle_flush_due(at(1499)));
      CHECK(s.idle_flush_due(at(1500)));
      // The flush is a forced checkpoint; once written nothing is left to flush.
      CHECK(s.checkpoint_due(at(1500), s.idle_flush_due(at(1500))));
      s.checkpoint_written(at(1500));
      CHECK(s.ack() == Ids{"p0/0"});
      CHECK_FALSE(s.idle_flush_due(at(100000)));
      // A step is progress too.
      s.consume("p0/1", true);
      s.trained(at(200000));
      CHECK_FALSE(s.idle_flush_due(at(200999)));
      CHECK(s.idle_flush_due(at(201000)));
    }
    SUBCASE("no idle flush with checkpoint_idle_s 0") {
      actor::TrainerConfig cfg = config();
      cfg.checkpoint_idle_s = 0;
      TrainerState s(cfg, kT0);
      s.consume("p0/0", true);
      CHECK_FALSE(s.idle_flush_due(at(100000)));
    }
    SUBCASE("forced at the end, and nothing written when nothing changed") {
      TrainerState s(config(), kT0);
      CHECK(s.checkpoint_due(at(0), true));  // none yet
      s.checkpoint_written(at(0));
      CHECK_FALSE(s.checkpoint_due(at(1), true));
      // A new version is a change; so are consumed ids.
      s.publish_begin(at(2));
      CHECK(s.checkpoint_due(at(2), true));
      CHECK_FALSE(s.checkpoint_due(at(2), false));
      s.checkpoint_written(at(2));
      s.consume("p0/0", true);
      CHECK(s.checkpoint_due(at(3), true));
      s.checkpoint_written(at(3));
      CHECK_FALSE(s.checkpoint_due(at(4), true));
      // A resumed trainer has its checkpoint: nothing changed, nothing written.
      TrainerState r(config(), kT0);
      r.resume(4, 3, 0, restored_ledger(config(), {"p0/0"}));
      CHECK_FALSE(r.checkpoint_due(at(0), true));
    }
  }

  TEST_CASE(
      "a trainer trains a full batch, waits for more, and finishes when the manager is done") {
    actor::TrainerConfig cfg = config();
    cfg.steps = 2;
    TrainerState s(cfg, kT0);
    CHECK(s.next_step(4, 0) == Step::kTrain);
    CHECK(s.next_step(3, 5) == Step::kWait);
    CHECK(s.next_step(0, 0) == Step::kWait);  // the manager has not said done
    CHECK(s.collect_wait() == milliseconds(10));
    s.collect_reply(at(0), true, false);
    CHECK(s.manager_done());
    CHECK(s.next_step(3, 0) == Step::kFinish);  // the partial batch is trained on the way out
    CHECK(s.next_step(3, 2) == Step::kWait);    // the buffer still holds some
    CHECK(s.next_step(4, 0) == Step::kTrain);
    // The job's steps.
    s.trained(at(1));
    CHECK_FALSE(s.steps_done());
    s.trained(at(2));
    CHECK(s.steps_done());
  }

  TEST_CASE("a trainer tries its last acknowledgement kFinalAckTries times at most") {
    TrainerState s(config(), kT0);
    CHECK_FALSE(s.final_ack_due(0));  // nothing to send
    s.received("p0/0", false);
    for (int i = 0; i < actor::kFinalAckTries; ++i)
      CHECK(s.final_ack_due(i));
    CHECK_FALSE(s.final_ack_due(actor::kFinalAckTries));
  }
}
