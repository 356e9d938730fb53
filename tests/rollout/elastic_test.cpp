// Elastic fleets, without processes: a rollout that leaves hands its work back and the manager
// gives it to the others once; a reader restricted to listed holders reads each chunk from the
// first of them that has it (the "trainer's copy only" switch of sluice bench elastic).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "rollout/manager_state.hpp"
#include "weightstore/reader.hpp"

using namespace sluice;
using rollout::Clock;
using rollout::ManagerState;
using rollout::SequenceState;
using rollout::TrajState;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + std::chrono::milliseconds(ms);
}

rollout::ReportRequest report_of(const std::string& id, std::uint64_t version) {
  rollout::ReportRequest q;
  q.id = id;
  q.incarnation = "00000000000000" + id;
  q.version = version;
  q.staged = version;
  q.capacity = rollout::Capacity{4, 65536};
  return q;
}

}  // namespace

TEST_CASE("elastic: a leaving rollout's work goes to the others, nothing lost, nothing twice") {
  rollout::ManagerConfig cfg;
  cfg.mode = "sluice";
  cfg.prompts = 2;
  cfg.group_size = 2;
  cfg.batch_trajectories = 4;
  cfg.heartbeat_timeout_ms = 1000;
  cfg.prefetch = 0;
  cfg.repack = false;
  REQUIRE(cfg.validate().is_ok());
  auto made = ManagerState::create(cfg, nullptr, kT0);
  REQUIRE(made.is_ok());
  ManagerState& m = **made;
  m.published({1, 0});

  // "a" takes the whole job (2 prompts x 2) and generates a little of three of them.
  auto reply = m.report(report_of("aa", 1), at(0));
  REQUIRE(reply.assign.size() == 4);
  std::vector<SequenceState> work = reply.assign;
  std::set<std::string> all;
  for (auto& s : work) {
    all.insert(s.trajectory_id);
    if (&s == &work.back()) continue;  // this one never started
    s.generated = {5, 6};
    s.logprobs = {-1.0f, -1.0f};
    s.versions = {1};
  }

  // It leaves: in-flight states as exported, the unstarted one returned.
  rollout::ReportRequest leave = report_of("aa", 1);
  leave.leaving = true;
  for (const auto& s : work)
    (s.generated.empty() ? leave.returned : leave.exported).push_back(s);
  REQUIRE(m.check_report(leave).is_ok());
  auto left = m.report(leave, at(50));
  CHECK(left.assign.empty());
  CHECK(left.import.empty());
  CHECK(m.counts().left == 1);
  for (const auto& id : all) {
    auto w = m.where(id);
    REQUIRE(w.has_value());
    CHECK(w->state == TrajState::kPending);
    CHECK(w->rollout.empty());
  }

  // "b" joins on the same version and gets every one of them, the generated tokens kept.
  auto got = m.report(report_of("bb", 1), at(100));
  std::map<std::string, SequenceState> received;
  for (const auto* list : {&got.assign, &got.import})
    for (const auto& s : *list)
      CHECK(received.emplace(s.trajectory_id, s).second);
  REQUIRE(received.size() == 4);
  for (const auto& s : work)
    CHECK(received.at(s.trajectory_id).generated == s.generated);

  // Long after "a" went quiet nothing is reclaimed twice: it is no longer a member.
  m.check_heartbeats(at(5000));
  CHECK(m.counts().dead == 1);  // b, silent since 100 ms; its work goes back once
  auto again = m.report(report_of("cc", 1), at(5100));
  std::set<std::string> second;
  for (const auto* list : {&again.assign, &again.import})
    for (const auto& s : *list)
      CHECK(second.insert(s.trajectory_id).second);
  CHECK(second == all);
}

TEST_CASE("elastic: a plan narrowed to listed holders reads each chunk from the first listed") {
  weightstore::ReadPlan plan;
  plan.holders = {{"relay-3", "", "", 0}, {"actor-0", "", "", 3}, {"relay-0", "", "", 3}};
  plan.chunks.resize(3);
  plan.chunks[0].holders = {0, 1, 2};  // the actor has it: the actor, alone
  plan.chunks[1].holders = {0, 2};     // handed off: the master relay
  plan.chunks[2].holders = {2, 1};     // the list's order wins over the plan's
  weightstore::ReadPlan narrowed = plan;
  REQUIRE(weightstore::keep_listed_source(narrowed, {"actor-0", "relay-0"}));
  CHECK(narrowed.chunks[0].holders == std::vector<std::uint32_t>{1});
  CHECK(narrowed.chunks[1].holders == std::vector<std::uint32_t>{2});
  CHECK(narrowed.chunks[2].holders == std::vector<std::uint32_t>{1});

  // A chunk none of them holds: declined, the plan unchanged.
  weightstore::ReadPlan partial = plan;
  partial.chunks[1].holders = {0};
  weightstore::ReadPlan copy = partial;
  CHECK_FALSE(weightstore::keep_listed_source(partial, {"actor-0", "relay-0"}));
  CHECK(partial.chunks[1].holders == copy.chunks[1].holders);
  CHECK(partial.chunks[0].holders == copy.chunks[0].holders);
  // No list: nothing to narrow to.
  CHECK_FALSE(weightstore::keep_listed_source(partial, {}));
}
