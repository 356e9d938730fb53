#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"

using namespace sluice;
using namespace sluice::actor;

namespace {

rl::Trajectory traj(const std::string& prompt, int sample, std::uint64_t version) {
  rl::Trajectory t;
  t.prompt_id = prompt;
  t.id = prompt + "/" + std::to_string(sample);
  t.version = version;
  t.versions = {version};
  t.response_tokens = {1, 2};
  t.logprobs = {-0.5f, -0.25f};
  return t;
}

std::vector<std::string> ids(const std::vector<Sample>& s) {
  std::vector<std::string> out;
  for (const auto& x : s)
    out.push_back(x.trajectory.id);
  return out;
}

}  // namespace

TEST_SUITE("actor.experience_buffer") {
  TEST_CASE("a trajectory is accepted once, also after it was consumed") {
    ExperienceBuffer b(BufferOptions{});
    REQUIRE(b.add(traj("p", 0, 1)).is_ok());
    auto dup = b.add(traj("p", 0, 1));
    CHECK(dup.code() == core::Code::kAlreadyExists);
    CHECK(dup.message().find("p/0") != std::string::npos);
    CHECK(b.held() == 1);
    CHECK(b.take(10, 1).size() == 1);
    CHECK(b.add(traj("p", 0, 1)).code() == core::Code::kAlreadyExists);  // late duplicate
    CHECK(b.counts().accepted == 1);
    CHECK(b.counts().duplicates == 2);
    CHECK(b.counts().consumed == 1);
    CHECK(b.held() == 0);

    // The seen set survives a restart through a checkpoint.
    ExperienceBuffer restarted(BufferOptions{});
    restarted.restore_seen(b.seen());
    CHECK(restarted.add(traj("p", 0, 1)).code() == core::Code::kAlreadyExists);
    CHECK(restarted.add(traj("p", 1, 1)).is_ok());
    CHECK(restarted.counts().duplicates == 1);
  }

  TEST_CASE("groups are released only when complete") {
    BufferOptions o;
    o.group_size = 3;
    ExperienceBuffer b(o);
    REQUIRE(b.add(traj("p1", 0, 1)).is_ok());
    REQUIRE(b.add(traj("p2", 0, 1)).is_ok());
    REQUIRE(b.add(traj("p1", 1, 1)).is_ok());
    CHECK(b.ready() == 0);
    CHECK(b.held() == 3);
    CHECK(b.take(10, 1).empty());
    REQUIRE(b.add(traj("p1", 2, 1)).is_ok());
    CHECK(b.ready() == 3);
    CHECK(b.take(2, 1).empty());  // fewer than a whole group asked for
    auto got = b.take(10, 1);
    CHECK(ids(got) == std::vector<std::string>{"p1/0", "p1/1", "p1/2"});
    CHECK(b.held() == 1);
    CHECK(b.ready() == 0);
    // A fourth sample of a released prompt starts a new group.
    REQUIRE(b.add(traj("p1", 3, 1)).is_ok());
    CHECK(b.ready() == 0);
    CHECK(b.held() == 2);
  }

  TEST_CASE("take hands out whole groups, oldest first") {
    BufferOptions o;
    o.group_size = 2;
    ExperienceBuffer b(o);
    for (const char* p : {"c", "a", "b"})
      REQUIRE(b.add(traj(p, 0, 1)).is_ok());
    for (const char* p : {"b", "c", "a"})  // b completes first, then c, then a
      REQUIRE(b.add(traj(p, 1, 1)).is_ok());
    CHECK(b.ready() == 6);
    CHECK(ids(b.take(5, 1)) == std::vector<std::string>{"b/0", "b/1", "c/0", "c/1"});
    CHECK(ids(b.take(5, 1)) == std::vector<std::string>{"a/0", "a/1"});
  }

  TEST_CASE("ungrouped trajectories come out in arrival order") {
    ExperienceBuffer b(BufferOptions{});
    std::vector<std::string> want;
    for (int i = 0; i < 20; ++i) {
      std::string p = "q" + std::to_string((i * 7) % 20);
      REQUIRE(b.add(traj(p, 0, 1)).is_ok());
      want.push_back(p + "/0");
    }
    auto first = ids(b.take(8, 1));
    auto rest = ids(b.take(100, 1));
    first.insert(first.end(), rest.begin(), rest.end());
    CHECK(first == want);
  }

  TEST_CASE("stale trajectories are dropped and counted under policy drop") {
    BufferOptions o;
    o.max_staleness = 2;
    ExperienceBuffer b(o);
    for (std::uint64_t v = 1; v <= 6; ++v)
      REQUIRE(b.add(traj("v" + std::to_string(v), 0, v)).is_ok());
    auto mixed = traj("mixed", 0, 3);  // partial rollout: its oldest version counts
    mixed.versions = {3, 5};
    REQUIRE(b.add(mixed).is_ok());
    auto got = b.take(100, 6);
    CHECK(ids(got) == std::vector<std::string>{"v4/0", "v5/0", "v6/0"});
    for (const auto& s : got) {
      CHECK(s.staleness <= 2);
      CHECK(s.weight == 1.0);
    }
    CHECK(got[0].staleness == 2);
    CHECK(b.counts().dropped_stale == 4);
    CHECK(b.counts().consumed == 3);
    CHECK(b.held() == 0);
  }

  TEST_CASE("a group is as stale as its stalest member") {
    BufferOptions o;
    o.group_size = 2;
    o.max_staleness = 2;
    ExperienceBuffer b(o);
    REQUIRE(b.add(traj("p", 0, 5)).is_ok());
    REQUIRE(b.add(traj("p", 1, 1)).is_ok());
    REQUIRE(b.add(traj("q", 0, 5)).is_ok());
    REQUIRE(b.add(traj("q", 1, 4)).is_ok());
    CHECK(ids(b.take(10, 6)) == std::vector<std::string>{"q/0", "q/1"});
    CHECK(b.counts().dropped_stale == 2);
  }

  TEST_CASE("policy downweight hands stale trajectories out with stale_weight") {
    BufferOptions o;
    o.max_staleness = 1;
    o.policy = StalenessPolicy::kDownweight;
    o.stale_weight = 0.25;
    ExperienceBuffer b(o);
    REQUIRE(b.add(traj("old", 0, 1)).is_ok());
    REQUIRE(b.add(traj("new", 0, 4)).is_ok());
    auto got = b.take(10, 4);
    REQUIRE(got.size() == 2);
    CHECK(got[0].trajectory.id == "old/0");
    CHECK(got[0].weight == 0.25);
    CHECK(got[0].staleness == 3);
    CHECK(got[1].weight == 1.0);
    CHECK(got[1].staleness == 0);
    CHECK(b.counts().downweighted == 1);
    CHECK(b.counts().dropped_stale == 0);
    CHECK(b.counts().consumed == 2);
  }

  TEST_CASE("an abandoned trajectory completes its group, which is dropped under either policy") {
    for (auto policy : {StalenessPolicy::kDrop, StalenessPolicy::kDownweight}) {
      CAPTURE(static_cast<int>(policy));
      BufferOptions o;
      o.group_size = 2;
      o.max_staleness = 4;
      o.policy = policy;
      ExperienceBuffer b(o);
      // Fresh versions: only the abandoned member makes the group go.
      REQUIRE(b.add(traj("cut", 0, 5)).is_ok());
      rl::Trajectory cut = traj("cut", 1, 5);
      cut.abandoned = true;
      REQUIRE(b.add(cut).is_ok());
      REQUIRE(b.add(traj("whole", 0, 5)).is_ok());
      REQUIRE(b.add(traj("whole", 1, 5)).is_ok());
      CHECK(b.held() == 4);
      auto got = b.take(10, 5);
      CHECK(ids(got) == std::vector<std::string>{"whole/0", "whole/1"});
      CHECK(b.counts().abandoned == 1);
      CHECK(b.counts().dropped_stale == 2);
      CHECK(b.held() == 0);
      // Exactly once still: the abandoned id is remembered.
      CHECK(b.add(cut).code() == core::Code::kAlreadyExists);
    }
  }

  TEST_CASE("dropped ids are reported once, a checkpoint's counts leave out what is held") {
    BufferOptions o;
    o.group_size = 2;
    o.max_staleness = 1;
    ExperienceBuffer b(o);
    REQUIRE(b.add(traj("old", 0, 1)).is_ok());
    REQUIRE(b.add(traj("old", 1, 1)).is_ok());
    REQUIRE(b.add(traj("new", 0, 5)).is_ok());
    REQUIRE(b.add(traj("new", 1, 5)).is_ok());
    auto abandoned = traj("half", 0, 5);
    abandoned.abandoned = true;
    REQUIRE(b.add(abandoned).is_ok());  // held: its group is not complete
    CHECK(b.take(0, 5).empty());        // "old" is 4 versions stale: dropped
    CHECK(b.drain_dropped_ids() == std::vector<std::string>{"old/0", "old/1"});
    CHECK(b.drain_dropped_ids().empty());
    // Held: new/0, new/1 (ready) and half/0 (partial); a restarted actor receives them again.
    BufferCounts c = b.counts_without_held();
    CHECK(c.accepted == 2);
    CHECK(c.abandoned == 0);
    CHECK(c.dropped_stale == 2);
    ExperienceBuffer r(o);
    r.restore_counts(c);
    IdSet old;
    old.insert("old/0");
    old.insert("old/1");
    r.restore_seen(old);
    CHECK(r.add(traj("old", 0, 1)).code() == core::Code::kAlreadyExists);
    REQUIRE(r.add(traj("new", 0, 5)).is_ok());
    CHECK(r.counts().accepted == 3);
    CHECK(r.counts().duplicates == 1);
  }

  TEST_CASE("random arrivals: take never exceeds the staleness bound under drop") {
    std::mt19937_64 rng(99);
    BufferOptions o;
    o.group_size = 4;
    o.max_staleness = 3;
    ExperienceBuffer b(o);
    std::uint64_t actor = 0;
    std::uint64_t added = 0;
    std::uint64_t taken = 0;
    for (int round = 0; round < 500; ++round) {
      for (int k = 0; k < 6; ++k) {
        const std::uint64_t lag = rng() % 6;
        const std::uint64_t v = actor > lag ? actor - lag : 0;
        const auto prompt = "r" + std::to_string(round) + "p" + std::to_string(rng() % 3);
        if (b.add(traj(prompt, k, v)).is_ok()) ++added;
      }
      if (rng() % 3 == 0) ++actor;
      auto got = b.take(rng() % 12, actor);
      taken += got.size();
      CHECK(got.size() % 4 == 0);
      for (const auto& s : got) {
        CHECK(actor - s.trajectory.version <= 3);
        CHECK(s.staleness <= 3);
      }
    }
    CHECK(added == b.counts().accepted);
    CHECK(taken == b.counts().consumed);
    CHECK(b.counts().dropped_stale > 0);
    // Every accepted trajectory is held, consumed or dropped.
    CHECK(b.held() + b.counts().consumed + b.counts().dropped_stale == b.counts().accepted);
  }
}
