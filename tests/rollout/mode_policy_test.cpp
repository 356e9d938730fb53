// What each mode decides about a rollout behind the newest version (rollout/mode_policy.hpp).
#include <doctest/doctest.h>

#include <string>

#include "rollout/mode_policy.hpp"

using namespace sluice::rollout;

TEST_CASE("mode policy: names parse, anything else is refused") {
  CHECK(parse_mode("sync").value() == Mode::kSync);
  CHECK(parse_mode("one-step-off").value() == Mode::kOneStepOff);
  CHECK(parse_mode("stream").value() == Mode::kStream);
  CHECK(parse_mode("partial-rollout").value() == Mode::kPartialRollout);
  CHECK(parse_mode("sluice").value() == Mode::kSluice);
  auto bad = parse_mode("async");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().message().find("unknown mode 'async'") != std::string::npos);
}

TEST_CASE("mode policy: how far generation runs ahead of the actor") {
  CHECK(batches_ahead(Mode::kSync, 5) == 1);
  CHECK(batches_ahead(Mode::kOneStepOff, 5) == 2);
  CHECK(batches_ahead(Mode::kStream, 5) == 5);
  CHECK(batches_ahead(Mode::kPartialRollout, 5) == 5);
  CHECK(batches_ahead(Mode::kSluice, 5) == 5);
  CHECK_FALSE(collect_opens_budget(Mode::kSync));
  CHECK_FALSE(collect_opens_budget(Mode::kOneStepOff));
  CHECK(collect_opens_budget(Mode::kSluice));
  CHECK(repacks(Mode::kSluice));
  CHECK_FALSE(repacks(Mode::kPartialRollout));
}

TEST_CASE("mode policy: who takes new work") {
  const std::uint32_t lag = 1;
  for (Mode m :
       {Mode::kSync, Mode::kOneStepOff, Mode::kStream, Mode::kPartialRollout, Mode::kSluice}) {
    CHECK(takes_work(m, {3, 3, false}, 3, lag));  // on the newest version
  }
  // Sluice: one version behind while pulling the newest one keeps generating...
  CHECK(takes_work(Mode::kSluice, {2, 2, false}, 3, lag));
  // ...but drains once it holds it, or when further behind.
  CHECK_FALSE(takes_work(Mode::kSluice, {2, 3, false}, 3, lag));
  CHECK_FALSE(takes_work(Mode::kSluice, {1, 1, false}, 3, lag));
  CHECK_FALSE(takes_work(Mode::kSluice, {0, 0, false}, 3, lag));
  // The other modes: only on the newest.
  CHECK_FALSE(takes_work(Mode::kStream, {2, 2, false}, 3, lag));
}

TEST_CASE("mode policy: when a rollout behind the newest version loads it") {
  const std::uint32_t lag = 1;
  const RolloutVersions behind{2, 2, false};
  // Nothing to decide for a rollout on the newest version or already loading.
  for (Mode m : {Mode::kSync, Mode::kPartialRollout, Mode::kSluice}) {
    CHECK(decide_load(m, {3, 3, false}, 3, false, false, lag).load == 0);
    CHECK(decide_load(m, {2, 3, true}, 3, false, false, lag).load == 0);
  }
  // partial-rollout: at once, in-flight work continues on the new version.
  LoadDecision pr = decide_load(Mode::kPartialRollout, behind, 3, true, true, lag);
  CHECK(pr.load == 3);
  CHECK(pr.allow_active);
  // Global updates: only once nobody holds work of an older version; until then a drained one
  // waits at the barrier.
  for (Mode m : {Mode::kOneStepOff, Mode::kStream}) {
    CHECK(decide_load(m, behind, 3, true, false, lag).load == 3);
    LoadDecision wait = decide_load(m, behind, 3, false, true, lag);
    CHECK(wait.load == 0);
    CHECK(wait.barrier);
    CHECK_FALSE(decide_load(m, behind, 3, true, true, lag).barrier);
  }
  // sync: once drained.
  CHECK(decide_load(Mode::kSync, behind, 3, false, false, lag).load == 3);
  CHECK(decide_load(Mode::kSync, behind, 3, true, false, lag).load == 0);
  // sluice: once drained and holding the newest; drained while the newest is on its way, the
  // newer version it holds.
  CHECK(decide_load(Mode::kSluice, {2, 3, false}, 3, false, false, lag).load == 3);
  CHECK(decide_load(Mode::kSluice, {2, 3, false}, 3, true, false, lag).load == 0);
  CHECK(decide_load(Mode::kSluice, {1, 2, false}, 3, false, false, lag).load == 2);
  CHECK(decide_load(Mode::kSluice, {1, 1, false}, 3, false, false, lag).load == 0);
  for (Mode m :
       {Mode::kSync, Mode::kOneStepOff, Mode::kStream, Mode::kPartialRollout, Mode::kSluice}) {
    LoadDecision d = decide_load(m, {1, 2, false}, 3, false, false, lag);
    CHECK(d.load <= 3);  // never beyond the newest, never backwards
    CHECK((d.load == 0 || d.load > 1));
  }
}

TEST_CASE("mode policy: a draining sluice rollout hands back its queued work") {
  CHECK(hands_back_queued(Mode::kSluice, {2, 3, false}, 3, true));
  CHECK_FALSE(hands_back_queued(Mode::kSluice, {2, 3, false}, 3, false));  // nothing queued
  CHECK_FALSE(hands_back_queued(Mode::kSluice, {2, 2, false}, 3, true));   // still pulling
  CHECK_FALSE(hands_back_queued(Mode::kStream, {2, 3, false}, 3, true));
  CHECK(std::string(out_of_work_state(Mode::kSync)) == "barrier");
  CHECK(std::string(out_of_work_state(Mode::kOneStepOff)) == "barrier");
  CHECK(std::string(out_of_work_state(Mode::kSluice)) == "idle");
}
