// The manager's outbox to the actor on its own: synthetic time, no sockets. The test plays the
// actor and checks what a user would: nothing lost, each trajectory once per epoch, a new epoch
// re-sends only what is unacknowledged, and the database is told exactly what changed.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rollout/manager_outbox.hpp"
#include "rollout/protocol.hpp"

using namespace sluice;
using rollout::ActorOutbox;
using rollout::Clock;
using rollout::ManagerChanges;
using std::chrono::milliseconds;

namespace {

const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + milliseconds(ms);
}
const milliseconds kResend{3000};

rl::Trajectory traj(const std::string& id, std::size_t tokens = 4) {
  rl::Trajectory t;
  t.id = id;
  t.prompt_id = id.substr(0, id.find('/'));
  t.version = 1;
  t.versions = {1};
  t.prompt_tokens.assign(4, 3);
  t.response_tokens.assign(tokens, 7);
  t.logprobs.assign(tokens, -1.0f);
  t.reward = 1.0;
  return t;
}

std::vector<std::string> ids_of(const std::vector<rl::Trajectory>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts)
    out.push_back(t.id);
  return out;
}

std::string state_of(const ActorOutbox& o) {
  std::string s = o.epoch() + "|";
  o.describe(s);
  return s;
}

}  // namespace

TEST_CASE("manager outbox: a trajectory is held until acknowledged, and recorded for the db") {
  ActorOutbox o(kResend);
  ManagerChanges changes;
  for (const char* id : {"p0/0", "p0/1", "p1/0"})
    o.hold(traj(id), &changes);
  REQUIRE(changes.unacked.size() == 3);
  // What the database keeps is the trajectory itself: it parses back to what was held.
  for (const auto& [id, text] : changes.unacked) {
    auto back = rl::Trajectory::from_json(nlohmann::json::parse(text));
    REQUIRE(back.is_ok());
    CHECK(back->id == id);
    CHECK(back->response_tokens == traj(id).response_tokens);
  }
  o.see_epoch("e1");
  CHECK(ids_of(o.take(16, at(0))) == std::vector<std::string>{"p0/0", "p0/1", "p1/0"});
  // Sent, not acknowledged: still held, however long the actor takes.
  CHECK(o.held() == 3);
  o.mark_have({"p0/0", "p0/1", "p1/0"});
  CHECK(o.take(16, at(60'000)).empty());
  CHECK(o.held() == 3);

  CHECK(o.acknowledge({"p0/1", "p1/0"}, &changes) == 2);
  CHECK(changes.acked == std::vector<std::string>{"p0/1", "p1/0"});
  CHECK(o.held() == 1);
  CHECK_FALSE(o.empty());
  CHECK(o.acknowledge({"p0/0"}, &changes) == 1);
  CHECK(o.empty());
  // Unchanged by acknowledging: what was held went to the db once.
  CHECK(changes.unacked.size() == 3);
}

TEST_CASE("manager outbox: one loaded from the database is sent but not recorded again") {
  ActorOutbox o(kResend);
  o.hold(traj("p3/1"), nullptr);
  CHECK(o.held() == 1);
  CHECK(ids_of(o.take(16, at(0))) == std::vector<std::string>{"p3/1"});
  ManagerChanges changes;
  CHECK(o.acknowledge({"p3/1"}, &changes) == 1);
  CHECK(changes.acked == std::vector<std::string>{"p3/1"});
  CHECK(changes.unacked.empty());
}

TEST_CASE("manager outbox: each trajectory is delivered once per epoch, in order") {
  ActorOutbox o(kResend);
  std::vector<std::string> held;
  for (int i = 0; i < 7; ++i) {
    held.push_back("p" + std::to_string(i) + "/0");
    o.hold(traj(held.back()), nullptr);
  }
  o.see_epoch("e1");
  std::vector<std::string> got;
  for (int call = 0; call < 10; ++call) {
    auto batch = ids_of(o.take(2, at(call)));
    CHECK(batch.size() <= 2);
    o.mark_have(batch);
    got.insert(got.end(), batch.begin(), batch.end());
  }
  CHECK(got == held);
  // The actor has them all: no re-send, however long it waits to acknowledge.
  CHECK(o.take(16, at(600'000)).empty());
  CHECK(o.all_received());
  // A repeated collect of the same epoch is no new epoch.
  o.see_epoch("e1");
  CHECK(o.take(16, at(600'001)).empty());
}

TEST_CASE("manager outbox: a reply the actor did not receive is sent again after resend_after") {
  ActorOutbox o(kResend);
  for (const char* id : {"p0/0", "p0/1", "p0/2"})
    o.hold(traj(id), nullptr);
  o.see_epoch("e1");
  CHECK(o.take(16, at(0)).size() == 3);
  o.mark_have({"p0/1"});
  // Not yet: the reply may still be on its way.
  CHECK(o.take(16, at(kResend.count())).empty());
  // Past it: the two the actor does not have go again, once per resend period.
  CHECK(ids_of(o.take(16, at(kResend.count() + 1))) == std::vector<std::string>{"p0/0", "p0/2"});
  CHECK(o.take(16, at(kResend.count() + 2)).empty());
  CHECK_FALSE(o.all_received());
  o.mark_have({"p0/0", "p0/2"});
  CHECK(o.take(16, at(10 * kResend.count())).empty());
  CHECK(o.all_received());
}

TEST_CASE("manager outbox: a new epoch re-sends only the unacknowledged, each once") {
  ActorOutbox o(kResend);
  for (const char* id : {"p0/0", "p0/1", "p1/0", "p1/1", "p2/0"})
    o.hold(traj(id), nullptr);
  o.see_epoch("e1");
  // Three sent to the first epoch, two still queued; one of the three acknowledged.
  auto first = ids_of(o.take(3, at(0)));
  CHECK(first == std::vector<std::string>{"p0/0", "p0/1", "p1/0"});
  o.mark_have(first);
  CHECK(o.acknowledge({"p0/1"}, nullptr) == 1);
  CHECK(o.all_received() == false);  // two were never sent

  // The actor restarted: it lost what it had not acknowledged.
  o.see_epoch("e2");
  CHECK(o.epoch() == "e2");
  std::vector<std::string> again = ids_of(o.take(16, at(1)));
  std::sort(again.begin(), again.end());
  CHECK(again == std::vector<std::string>{"p0/0", "p1/0", "p1/1", "p2/0"});
  // The marks of the old epoch do not count for the new one: unmarked, they go again in time.
  CHECK(o.take(16, at(1 + kResend.count() + 1)).size() == 4);
  o.mark_have(again);
  CHECK(o.all_received());
  CHECK(o.held() == 4);
}

TEST_CASE("manager outbox: acknowledging an id not held is harmless") {
  ActorOutbox o(kResend);
  o.hold(traj("p0/0"), nullptr);
  o.hold(traj("p0/1"), nullptr);
  o.see_epoch("e1");
  CHECK(o.take(1, at(0)).size() == 1);
  CHECK(o.acknowledge({"p0/0"}, nullptr) == 1);
  const std::string before = state_of(o);
  ManagerChanges changes;
  // Acknowledged already, never held, malformed: nothing changes, nothing goes to the db.
  CHECK(o.acknowledge({"p0/0", "p9/9", "", "not an id"}, &changes) == 0);
  CHECK(changes.acked.empty());
  CHECK(state_of(o) == before);
  o.mark_have({"p9/9"});
  CHECK(state_of(o) == before);
  // The one left is still delivered.
  CHECK(ids_of(o.take(16, at(1))) == std::vector<std::string>{"p0/1"});
}

TEST_CASE("manager outbox: one reply is bounded in bytes, and the rest follow") {
  ActorOutbox o(kResend);
  // Each a little over a third of a message (20 bytes a token and a log-probability): two fit in
  // one reply, three do not.
  const std::size_t tokens = rollout::kTrajectoryBytesPerMessage / 3 / 40;
  std::vector<std::string> held;
  for (int i = 0; i < 5; ++i) {
    held.push_back("p" + std::to_string(i) + "/0");
    o.hold(traj(held.back(), tokens), nullptr);
  }
  o.see_epoch("e1");
  std::vector<std::string> got;
  int replies = 0;
  while (got.size() < held.size() && replies < 10) {
    auto batch = o.take(16, at(replies));
    REQUIRE_FALSE(batch.empty());
    CHECK(batch.size() <= 2);
    std::size_t bytes = 0;
    for (const auto& t : batch)
      bytes += rollout::approx_json_bytes(t);
    CHECK(bytes <= rollout::kTrajectoryBytesPerMessage);
    auto ids = ids_of(batch);
    got.insert(got.end(), ids.begin(), ids.end());
    ++replies;
  }
  CHECK(got == held);
  CHECK(replies == 3);
  // One bigger than a message still goes, alone.
  o.hold(traj("p9/0", 2 * rollout::kTrajectoryBytesPerMessage / 20), nullptr);
  CHECK(ids_of(o.take(16, at(100))) == std::vector<std::string>{"p9/0"});
}

TEST_CASE("manager outbox: all received only once everything held was sent and had") {
  ActorOutbox o(kResend);
  CHECK(o.all_received());  // nothing held
  o.hold(traj("p0/0"), nullptr);
  CHECK_FALSE(o.all_received());  // queued
  o.see_epoch("e1");
  auto sent = ids_of(o.take(16, at(0)));
  CHECK_FALSE(o.all_received());  // sent, not had
  o.mark_have(sent);
  CHECK(o.all_received());
  o.see_epoch("e2");
  CHECK_FALSE(o.all_received());  // a new actor has nothing
}
