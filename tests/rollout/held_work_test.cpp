// The work a rollout holds for its manager, driven directly: no manager, no sockets; a simulated
// engine where work is admitted. The test plays the worker's side: reports answered or not, the
// manager taking queued work back, and a rollout that leaves.
#include <doctest/doctest.h>

#include <string>

#include "rollout/held_work.hpp"
#include "rollout/sim_engine.hpp"

using namespace sluice;
using namespace sluice::rollout;

namespace {

// `call_token` >= 0: an episode (set before its tokens are sampled, which then carry a mask).
SequenceState seq(const std::string& id, std::size_t generated = 0, std::int32_t call_token = -1) {
  SequenceState s;
  s.trajectory_id = id;
  s.call_token = call_token;
  s.prompt_id = id.substr(0, id.find('/'));
  s.prompt_tokens = {1, 2, 3};
  s.max_new_tokens = 64;
  for (std::size_t i = 0; i < generated; ++i)
    record_sample(s, 4, -0.5f, 1);
  return s;
}

std::unique_ptr<SimEngine> engine(std::uint32_t max_sequences) {
  SimEngineConfig c;
  c.max_sequences = max_sequences;
  c.time_scale = 0;
  auto e = SimEngine::create(c);
  REQUIRE(e.is_ok());
  return std::move(e).value();
}

}  // namespace

TEST_SUITE("held work") {
  TEST_CASE("a report carries what is held, and only an answered one forgets it") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    held.queue(seq("p1/0"));
    held.finish(seq("p2/0", 3), 1.0);
    held.add_exported(seq("p3/0", 2));
    held.add_refused(seq("p4/0", 2));

    ReportRequest req;
    const std::size_t sent = held.add_to(req);
    CHECK(sent == 1);
    CHECK(req.queued == std::vector<std::string>{"p1/0"});
    REQUIRE(req.finished.size() == 1);
    CHECK(req.finished[0].id == "p2/0");
    CHECK(req.finished[0].reward == 1.0);
    CHECK(req.exported.size() == 1);
    CHECK(req.refused.size() == 1);

    // Unanswered: all of it goes again with the next report.
    ReportRequest again;
    CHECK(held.add_to(again) == 1);
    CHECK(again.exported.size() == 1);

    // Finished meanwhile: not carried by the answered report, so still held after it.
    held.finish(seq("p5/0", 1), 0.0);
    held.answered(sent);
    CHECK(held.finished() == 1);
    ReportRequest next;
    CHECK(held.add_to(next) == 1);
    CHECK(next.finished[0].id == "p5/0");
    CHECK(next.exported.empty());
    CHECK(next.refused.empty());
    CHECK(next.queued == std::vector<std::string>{"p1/0"});  // the queue is not the report's
  }

  TEST_CASE("after an outage a report carries what fits in one message, the rest the next") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    for (int i = 0; i < 40; ++i)
      held.finish(seq("p" + std::to_string(i) + "/0", 1000), 1.0);
    std::size_t reported = 0;
    for (int round = 0; held.finished() > 0; ++round) {
      REQUIRE(round < 40);
      ReportRequest req;
      const std::size_t sent = held.add_to(req);
      CHECK(sent < 40);
      CHECK(req.finished.size() == sent);
      CHECK(req.finished[0].id == "p" + std::to_string(reported) + "/0");  // in order
      reported += sent;
      held.answered(sent);
    }
    CHECK(reported == 40);
  }

  TEST_CASE("queued work is admitted while it fits, handed back, or abandoned") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    auto e = engine(2);
    for (int i = 0; i < 4; ++i)
      held.queue(seq("p" + std::to_string(i) + "/0"));

    // Under an agent, unstarted work waits for the agent to claim it.
    held.admit_queued(*e, /*agent_claims=*/true);
    CHECK(e->active() == 0);
    std::optional<SequenceState> claimed = held.take_unstarted();
    REQUIRE(claimed);
    CHECK(claimed->trajectory_id == "p0/0");

    held.admit_queued(*e, /*agent_claims=*/false);
    CHECK(e->active() == 2);
    CHECK_FALSE(held.queue_empty());

    CHECK(held.abandon_queued("p3/0"));
    CHECK_FALSE(held.abandon_queued("p3/0"));
    CHECK(held.queue_empty());
    CHECK(stats.abandoned == 1);

    held.queue(seq("p9/0"));
    held.unqueue();
    CHECK(held.queue_empty());
    ReportRequest req;
    CHECK(held.add_to(req) == 1);
    REQUIRE(req.finished.size() == 1);
    CHECK(req.finished[0].abandoned);
    REQUIRE(req.returned.size() == 1);
    CHECK(req.returned[0].trajectory_id == "p9/0");
  }

  TEST_CASE("an episode's next turn keeps its KV cache only on the version that made it") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    auto e = engine(4);
    SequenceState s = seq("p1/0", 2, /*call_token=*/9);
    s.kv = KvState{};
    s.kv->version = 7;  // the engine runs version 0
    held.queue_next_turn(std::move(s));
    held.admit_queued(*e, /*agent_claims=*/true);  // an episode is not the agent's to claim
    CHECK(e->active() == 1);
    CHECK(stats.env_kv_kept == 0);
    CHECK(stats.env_reprefills == 1);
    CHECK(stats.env_reprefill_tokens == 5);

    // On the same version it is kept; an engine that refuses the cache admits the episode
    // without it (the simulated engine holds no caches).
    SequenceState same = seq("p2/0", 2, /*call_token=*/9);
    same.kv = KvState{};
    same.kv->version = e->version();
    held.queue_next_turn(std::move(same));
    held.admit_queued(*e, /*agent_claims=*/true);
    CHECK(e->active() == 2);
    CHECK(stats.env_kv_kept == 1);
    CHECK(held.queue_empty());
  }

  TEST_CASE("leaving hands everything back: in flight as exported, unstarted as returned") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    held.queue(seq("p1/0"));
    held.finish(seq("p2/0", 1), 1.0);
    SequenceState moved = seq("p3/0", 2);
    moved.kv_ref = KvRef{};
    held.add_exported(std::move(moved));

    std::vector<SequenceState> running = {seq("p4/0"), seq("p5/0", 3)};
    std::vector<SequenceState> waiting = {seq("p6/0", 2)};
    ReportRequest req;
    held.hand_back(req, std::move(running), std::move(waiting));
    CHECK(held.queue_empty());
    CHECK(req.finished.size() == 1);
    REQUIRE(req.exported.size() == 3);
    CHECK(req.exported[0].trajectory_id == "p3/0");
    CHECK_FALSE(req.exported[0].kv_ref);  // its buffer goes with this process
    CHECK(req.exported[1].trajectory_id == "p5/0");
    CHECK(req.exported[2].trajectory_id == "p6/0");
    REQUIRE(req.returned.size() == 2);
    CHECK(req.returned[0].trajectory_id == "p1/0");
    CHECK(req.returned[1].trajectory_id == "p4/0");

    // Unanswered, the finished trajectories stay held; answered, nothing does.
    CHECK(held.finished() == 1);
    held.handed_back();
    ReportRequest after;
    CHECK(held.add_to(after) == 0);
    CHECK(after.finished.empty());
    CHECK(after.exported.empty());
    CHECK(after.returned.empty());
  }

  TEST_CASE("work no agent takes in time goes back to the manager, counted") {
    WorkerStats stats;
    WorkerMetrics metrics;
    HeldWork held("r0", stats, metrics);
    const core::Millis deadline{1000};
    const auto t0 = core::Clock::now();
    held.queue(seq("p1/0"));
    held.queue(seq("p2/0", 3, 2));  // an episode already (its agent has it): it stays
    CHECK(held.return_unclaimed(t0, deadline) == 0);
    held.queue(seq("p3/0"));  // queued later: its time starts later
    CHECK(held.return_unclaimed(t0 + core::Millis(600), deadline) == 0);
    // An agent takes p1: it is no longer waited for.
    std::optional<SequenceState> taken = held.take_unstarted();
    REQUIRE(taken);
    CHECK(taken->trajectory_id == "p1/0");
    CHECK(held.return_unclaimed(t0 + core::Millis(1200), deadline) == 0);
    // p3 has waited past the deadline (first seen at 600).
    CHECK(held.return_unclaimed(t0 + core::Millis(1601), deadline) == 1);
    held.queue(seq("p4/0"));
    CHECK(held.return_unclaimed(t0 + core::Millis(1700), deadline) == 0);
    CHECK(held.return_unclaimed(t0 + core::Millis(2701), deadline) == 1);
    CHECK(stats.agent_unclaimed == 2);
    ReportRequest req;
    held.add_to(req);
    REQUIRE(req.returned.size() == 2);
    CHECK(req.returned[0].trajectory_id == "p3/0");
    CHECK(req.returned[1].trajectory_id == "p4/0");
    CHECK(req.queued == std::vector<std::string>{"p2/0"});
  }
}
