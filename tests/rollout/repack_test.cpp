#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rollout/repack.hpp"

using namespace sluice::rollout;

namespace {

// A ramp-down rollout (no queue, occupancy not rising) holding sequences of the given KV sizes.
RolloutView rollout(const std::string& id, std::uint64_t version, std::uint32_t max_sequences,
                    std::uint64_t max_kv, const std::vector<std::uint64_t>& kvs) {
  RolloutView r;
  r.id = id;
  r.version = version;
  r.capacity = {max_sequences, max_kv};
  for (std::size_t i = 0; i < kvs.size(); ++i)
    r.sequences.push_back({id + "-s" + std::to_string(i), kvs[i]});
  r.previous_active = static_cast<std::uint32_t>(kvs.size());
  return r;
}

std::map<std::string, std::string> destinations(const RepackPlan& p) {
  std::map<std::string, std::string> m;
  for (const auto& mv : p.moves)
    m[mv.trajectory_id] = mv.to;
  return m;
}

bool is_ramp_down(const RolloutView& r, const RepackPolicy& policy) {
  return r.alive && r.queued == 0 && r.capacity.max_sequences > 0 &&
         static_cast<double>(r.sequences.size()) <=
             policy.ramp_down_occupancy * r.capacity.max_sequences &&
         r.sequences.size() <= r.previous_active;
}

// Checks every invariant of a plan against its fleet and applies it; returns the fleet after.
std::vector<RolloutView> check_and_apply(const std::vector<RolloutView>& fleet,
                                         const RepackPolicy& policy, const RepackPlan& plan) {
  std::map<std::string, RolloutView> by_id;
  for (const auto& r : fleet)
    by_id[r.id] = r;
  std::set<std::string> moved_ids;
  std::set<std::string> sources;
  std::set<std::string> dests;
  for (const auto& mv : plan.moves) {
    REQUIRE(by_id.count(mv.from) == 1);
    REQUIRE(by_id.count(mv.to) == 1);
    CHECK(mv.from != mv.to);
    CHECK(by_id[mv.from].version == by_id[mv.to].version);  // never to another version
    CHECK(is_ramp_down(by_id[mv.from], policy));
    CHECK(is_ramp_down(by_id[mv.to], policy));
    CHECK(moved_ids.insert(mv.trajectory_id).second);  // moved once
    sources.insert(mv.from);
    dests.insert(mv.to);
  }
  for (const auto& s : sources)
    CHECK(dests.count(s) == 0);  // never both
  CHECK(std::set<std::string>(plan.freed.begin(), plan.freed.end()) == sources);
  CHECK(plan.freed.size() == sources.size());

  std::map<std::string, std::string> where;  // sequence -> rollout, after the plan
  for (const auto& r : fleet) {
    for (const auto& s : r.sequences) {
      REQUIRE(where.count(s.trajectory_id) == 0);
      where[s.trajectory_id] = r.id;
    }
  }
  const std::size_t total = where.size();
  std::map<std::string, RolloutView> after = by_id;
  for (const auto& mv : plan.moves) {
    REQUIRE(where.count(mv.trajectory_id) == 1);
    CHECK(where[mv.trajectory_id] == mv.from);  // it was really there
    auto& src = after[mv.from].sequences;
    auto it = std::find_if(src.begin(), src.end(), [&](const SequenceView& s) {
      return s.trajectory_id == mv.trajectory_id;
    });
    REQUIRE(it != src.end());
    after[mv.to].sequences.push_back(*it);
    src.erase(it);
  }
  std::set<std::string> all_after;
  std::size_t count_after = 0;
  for (const auto& [id, r] : after) {
    for (const auto& s : r.sequences) {
      all_after.insert(s.trajectory_id);
      ++count_after;
    }
    if (sources.count(id) != 0) CHECK(r.sequences.empty());  // all or nothing
    if (dests.count(id) != 0) {
      std::uint64_t kv = 0;
      for (const auto& s : r.sequences)
        kv += s.kv_tokens;
      const double budget =
          std::floor(static_cast<double>(r.capacity.max_kv_tokens) * (1.0 - policy.kv_headroom));
      CHECK(static_cast<double>(kv) <= budget);
      CHECK(r.sequences.size() <= r.capacity.max_sequences);
    }
  }
  CHECK(count_after == total);  // nothing lost or duplicated
  CHECK(all_after.size() == total);
  std::vector<RolloutView> out;
  for (auto& [id, r] : after)
    out.push_back(r);
  return out;
}

}  // namespace

TEST_SUITE("rollout.repack") {
  TEST_CASE("two half-empty rollouts of one version are consolidated onto one") {
    RepackPolicy policy;
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 1000, {100, 50}),
                                      rollout("b", 1, 8, 1000, {100, 100, 100})};
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.freed == std::vector<std::string>{"a"});
    CHECK(destinations(plan) == std::map<std::string, std::string>{{"a-s0", "b"}, {"a-s1", "b"}});
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("a sequence never moves to a rollout of another version") {
    RepackPolicy policy;
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 1000, {100}),
                                      rollout("b", 2, 8, 1000, {100, 100})};
    CHECK(plan_repack(fleet, policy).moves.empty());
    fleet.push_back(rollout("c", 2, 8, 1000, {100, 100, 100}));
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.freed == std::vector<std::string>{"b"});
    for (const auto& mv : plan.moves)
      CHECK(mv.to == "c");
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("a source is emptied completely or not at all") {
    RepackPolicy policy;
    policy.kv_headroom = 0.0;
    // b has room for two of a's three sequences, a cannot take b's 750 tokens back.
    std::vector<RolloutView> fleet = {rollout("a", 1, 16, 1000, {100, 100, 100}),
                                      rollout("b", 1, 16, 1000, {150, 150, 150, 150, 150})};
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.moves.empty());
    CHECK(plan.freed.empty());
    fleet[1].sequences.pop_back();  // now b has room for all three
    plan = plan_repack(fleet, policy);
    CHECK(plan.moves.size() == 3);
    CHECK(plan.freed == std::vector<std::string>{"a"});
  }

  TEST_CASE("best fit: a sequence goes to the destination with the least room that fits") {
    RepackPolicy policy;
    policy.kv_headroom = 0.0;
    std::vector<RolloutView> fleet = {
        rollout("src", 1, 8, 1000, {100}), rollout("roomy", 1, 8, 1000, {250, 250}),  // 500 free
        rollout("snug", 1, 8, 1000, {425, 425}),   // 150 free: the best fit
        rollout("tight", 1, 8, 1000, {475, 475}),  // 50 free: too little
    };
    auto plan = plan_repack(fleet, policy);
    REQUIRE(plan.moves.size() == 1);
    CHECK(plan.moves[0].trajectory_id == "src-s0");
    CHECK(plan.moves[0].from == "src");
    CHECK(plan.moves[0].to == "snug");
    CHECK(plan.freed == std::vector<std::string>{"src"});
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("destinations keep their KV headroom") {
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 1000, {150}),
                                      rollout("b", 1, 8, 1000, {400, 400})};
    RepackPolicy policy;
    policy.kv_headroom = 0.1;  // b may hold 900: 800 + 150 does not fit
    CHECK(plan_repack(fleet, policy).moves.empty());
    policy.kv_headroom = 0.0;  // 950 <= 1000 fits
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.freed == std::vector<std::string>{"a"});
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("destinations keep within their decode batch bound") {
    RepackPolicy policy;
    policy.ramp_down_occupancy = 1.0;
    // d has one free slot for s's two sequences; s (4 slots, 2 used) cannot take d's three.
    std::vector<RolloutView> fleet = {rollout("s", 1, 4, 1000, {10, 10}),
                                      rollout("d", 1, 4, 1000, {10, 10, 10})};
    CHECK(plan_repack(fleet, policy).moves.empty());
    fleet[1].capacity.max_sequences = 5;
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.freed == std::vector<std::string>{"s"});
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("nothing moves unless at least two rollouts of a version are in ramp-down") {
    RepackPolicy policy;
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 1000, {100}),
                                      rollout("b", 1, 8, 1000, {100, 100})};
    REQUIRE_FALSE(plan_repack(fleet, policy).moves.empty());  // both in ramp-down: it moves

    SUBCASE("one rollout alone") {
      fleet.pop_back();
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
    SUBCASE("queued work") {
      fleet[1].queued = 1;
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
    SUBCASE("rising occupancy") {
      fleet[1].previous_active = 1;
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
    SUBCASE("occupancy above the threshold") {
      fleet[1].capacity.max_sequences = 3;  // 2 of 3 > 0.5
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
    SUBCASE("a dead rollout") {
      fleet[1].alive = false;
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
    SUBCASE("an empty rollout is no destination") {
      fleet[1].sequences.clear();
      CHECK(plan_repack(fleet, policy).moves.empty());
    }
  }

  TEST_CASE("the plan does not depend on the order of the fleet") {
    RepackPolicy policy;
    std::vector<RolloutView> fleet = {rollout("r1", 1, 8, 2000, {300, 200}),
                                      rollout("r2", 1, 8, 2000, {100}),
                                      rollout("r3", 1, 8, 2000, {500, 500, 100}),
                                      rollout("r4", 1, 8, 2000, {50, 50}),
                                      rollout("r5", 2, 8, 2000, {10}),
                                      rollout("r6", 2, 8, 2000, {10, 10})};
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.moves.size() >= 3);
    std::mt19937 rng(5);
    for (int i = 0; i < 20; ++i) {
      auto shuffled = fleet;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      auto again = plan_repack(shuffled, policy);
      REQUIRE(again.moves.size() == plan.moves.size());
      for (std::size_t k = 0; k < plan.moves.size(); ++k) {
        CHECK(again.moves[k].trajectory_id == plan.moves[k].trajectory_id);
        CHECK(again.moves[k].to == plan.moves[k].to);
      }
      CHECK(again.freed == plan.freed);
    }
  }

  TEST_CASE("a move that costs more than it gains is not made") {
    // Two one-sequence rollouts of 1000 KV tokens each; re-prefilling 1000 tokens at 1 ms a
    // token (1000 ms) costs more than freeing either tail gains (64 steps x 2.05 ms).
    RepackPolicy policy;
    policy.cost.prefill_ms_per_token = 1.0;
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 4000, {1000}),
                                      rollout("b", 1, 8, 4000, {1000})};
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.moves.empty());
    CHECK(plan.freed.empty());
    CHECK(plan.declined == 2);  // each would fit on the other

    // The old rule, cost not weighed, makes it.
    policy.cost.weigh_cost = false;
    CHECK(plan_repack(fleet, policy).freed == std::vector<std::string>{"a"});
  }

  TEST_CASE("a long tail is not moved onto a rollout about to finish: the short ones join it") {
    RepackPolicy policy;
    // a: one sequence 2000 tokens in (expected to run on for long); b: three fresh ones.
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 8000, {2032}),
                                      rollout("b", 1, 8, 8000, {40, 40, 40})};
    fleet[0].sequences[0].generated = 2000;
    for (auto& sq : fleet[1].sequences)
      sq.generated = 8;
    const double tail = expected_remaining(policy.cost, 2000);
    CHECK(tail > expected_remaining(policy.cost, 8));
    auto plan = plan_repack(fleet, policy);
    // Moving a's tail to b holds b on this version for the whole tail: no gain. b's short
    // sequences joining a free b at little cost.
    CHECK(plan.freed == std::vector<std::string>{"b"});
    CHECK(destinations(plan) ==
          std::map<std::string, std::string>{{"b-s0", "a"}, {"b-s1", "a"}, {"b-s2", "a"}});
    CHECK(plan.declined == 1);
    CHECK(plan.gain_ms > plan.cost_ms);
    check_and_apply(fleet, policy, plan);
  }

  TEST_CASE("a move that pays is made, by KV transfer when that is cheaper than re-prefill") {
    RepackPolicy policy;
    policy.cost.prefill_ms_per_token = 1.0;  // dear re-prefill, as in the first case
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 4000, {1000}),
                                      rollout("b", 1, 8, 4000, {1000})};
    // 1000 tokens x 16 KiB over 25 GB/s: 0.66 ms, far below the gain.
    policy.cost.kv_bytes_per_token = 16384;
    policy.cost.kv_link_gbps = 25;
    bool kv = false;
    CHECK(move_ms(policy.cost, 1000, &kv) < 1.0);
    CHECK(kv);
    auto plan = plan_repack(fleet, policy);
    CHECK(plan.freed == std::vector<std::string>{"a"});
    REQUIRE(plan.moves.size() == 1);
    CHECK(plan.moves[0].with_kv);
    CHECK(plan.gain_ms > plan.cost_ms);
    check_and_apply(fleet, policy, plan);

    // Cheap re-prefill wins over a slow link.
    policy.cost.prefill_ms_per_token = 0.005;
    policy.cost.kv_link_gbps = 0.001;
    plan = plan_repack(fleet, policy);
    REQUIRE(plan.moves.size() == 1);
    CHECK_FALSE(plan.moves[0].with_kv);
  }

  TEST_CASE("a source with nothing to go to once emptied is not emptied") {
    RepackPolicy policy;
    std::vector<RolloutView> fleet = {rollout("a", 1, 8, 1000, {100, 50}),
                                      rollout("b", 1, 8, 1000, {100, 100, 100})};
    for (auto& r : fleet)
      r.freed_has_work = false;  // the job's last version, every prompt out: nothing to free for
    CHECK(plan_repack(fleet, policy).moves.empty());
    fleet[0].freed_has_work = true;
    CHECK(plan_repack(fleet, policy).freed == std::vector<std::string>{"a"});
  }

  TEST_CASE("the cost model's figures are checked") {
    RepackCost c;
    CHECK(c.validate().is_ok());
    c.t1_ms = -1;
    CHECK_FALSE(c.validate().is_ok());
    c = RepackCost{};
    c.min_gain = std::nan("");
    CHECK_FALSE(c.validate().is_ok());
  }

  TEST_CASE("random fleets: plans keep every invariant and lose or duplicate nothing") {
    std::mt19937_64 rng(20240611);
    auto uni = [&](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    };
    int plans_with_moves = 0;
    for (int trial = 0; trial < 5000; ++trial) {
      RepackPolicy policy;
      policy.ramp_down_occupancy = std::vector<double>{0.25, 0.5, 0.75, 1.0}[uni(0, 3)];
      policy.kv_headroom = std::vector<double>{0.0, 0.1, 0.3}[uni(0, 2)];
      // Half the trials weigh cost, with prefill from free to dear.
      policy.cost.weigh_cost = uni(0, 1) == 0;
      policy.cost.prefill_ms_per_token = std::vector<double>{0.0, 0.005, 0.5}[uni(0, 2)];
      std::vector<RolloutView> fleet;
      const auto n = uni(0, 9);
      for (std::uint64_t i = 0; i < n; ++i) {
        const auto max_seq = static_cast<std::uint32_t>(uni(1, 12));
        const auto max_kv = uni(200, 4000);
        std::vector<std::uint64_t> kvs(uni(0, max_seq));
        for (auto& kv : kvs)
          kv = uni(1, max_kv / 3);
        auto r = rollout("r" + std::to_string(i), uni(1, 2), max_seq, max_kv, kvs);
        for (auto& sq : r.sequences)
          sq.generated = uni(0, sq.kv_tokens);
        r.freed_has_work = uni(0, 4) != 0;
        // Occupancy falling, flat or (one time in three) rising since the previous report.
        const auto prev = static_cast<std::int64_t>(kvs.size() + uni(0, 2)) - 1;
        r.previous_active = static_cast<std::uint32_t>(std::max<std::int64_t>(0, prev));
        r.queued = uni(0, 5) == 0 ? 1 : 0;
        r.alive = uni(0, 10) != 0;
        fleet.push_back(r);
      }
      auto plan = plan_repack(fleet, policy);
      if (!plan.moves.empty()) ++plans_with_moves;
      check_and_apply(fleet, policy, plan);
      CHECK(plan_repack(fleet, policy).moves.size() == plan.moves.size());  // deterministic
      if (policy.cost.weigh_cost && !plan.moves.empty()) {
        CHECK(plan.gain_ms > policy.cost.min_gain * plan.cost_ms);  // every source paid
        for (const auto& r : fleet) {
          if (!r.freed_has_work) CHECK(std::count(plan.freed.begin(), plan.freed.end(), r.id) == 0);
        }
      }
    }
    CHECK(plans_with_moves > 500);  // the property test exercises real plans
  }
}
