// The manager's durable state: what is committed is what a reopened database holds; and the
// cost of one report's commit, printed (not asserted: timing belongs to benchmarks).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "rl/trajectory.hpp"
#include "rollout/manager_db.hpp"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

fs::path fresh_db(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("sluice-mgrdb-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / (name + ".db");
  for (const char* ext : {"", "-wal", "-shm"})
    fs::remove(p.string() + ext);
  return p;
}

// A finished trajectory as a report carries it: `tokens` response tokens with log-probs.
std::string trajectory_json(const std::string& id, std::size_t tokens) {
  rl::Trajectory t;
  t.id = id;
  t.prompt_id = id.substr(0, id.find('/'));
  t.version = 3;
  t.versions = {3};
  t.prompt_tokens.assign(64, 7);
  t.response_tokens.assign(tokens, 11);
  t.logprobs.assign(tokens, -0.25f);
  return t.to_json().dump();
}

}  // namespace

TEST_SUITE("rollout.manager_db") {
  TEST_CASE(
      "what is committed is what a reopened database holds, and acked trajectories are gone") {
    fs::path path = fresh_db("roundtrip");
    {
      auto db = rollout::ManagerDb::open(path.string()).value();
      rollout::ManagerChanges c;
      c.counters = {5, 2, 3, 0};
      c.counters_changed = true;
      c.finished = {"p0/0", "p0/1", "p1/0"};
      for (const auto& id : c.finished)
        c.unacked.emplace_back(id, trajectory_json(id, 4));
      c.doomed = {"p1"};
      REQUIRE(db->commit(c).is_ok());
      rollout::ManagerChanges ack;
      ack.counters = {5, 2, 3, 1};
      ack.counters_changed = true;
      ack.acked = {"p0/1", "p0/1"};  // repeated: harmless
      REQUIRE(db->commit(ack).is_ok());
    }
    auto db = rollout::ManagerDb::open(path.string()).value();
    auto s = db->load().value();
    CHECK(s.counters == rollout::ManagerCounters{5, 2, 3, 1});
    // An acknowledged trajectory is done: it leaves `finished` and `unacked` for `done`.
    CHECK(s.finished == std::vector<std::string>{"p0/0", "p1/0"});
    CHECK(s.done == std::vector<std::string>{"p0/1"});
    REQUIRE(s.unacked.size() == 2);
    CHECK(s.unacked[0].first == "p0/0");
    CHECK(s.unacked[1].first == "p1/0");
    CHECK(rl::Trajectory::from_json(nlohmann::json::parse(s.unacked[1].second)).is_ok());
    CHECK(s.doomed == std::vector<std::string>{"p1"});
  }

  TEST_CASE(
      "done ids below the floor and doomed prompts below it are deleted: the file stays small") {
    fs::path path = fresh_db("floor");
    {
      auto db = rollout::ManagerDb::open(path.string()).value();
      rollout::ManagerChanges c;
      c.counters = {30, 2, 0, 0};
      c.counters_changed = true;
      c.finished = {"p0/0", "p0/1", "p2/0", "p12/1"};
      c.doomed = {"p2", "p12"};
      REQUIRE(db->commit(c).is_ok());
      rollout::ManagerChanges ack;
      ack.counters = {30, 2, 4, 4, 4, 1};  // done floor 1: every member of p0 is done
      ack.counters_changed = true;
      ack.acked = {"p0/0", "p0/1", "p2/0", "p12/1"};
      REQUIRE(db->commit(ack).is_ok());
      rollout::ManagerChanges up;
      up.counters = {30, 2, 4, 4, 4, 3};  // the floor passes p2 ("p12" sorts below "p2" as text)
      up.counters_changed = true;
      REQUIRE(db->commit(up).is_ok());
    }
    auto s = rollout::ManagerDb::open(path.string()).value()->load().value();
    CHECK(s.counters.done_floor == 3);
    CHECK(s.counters.finished == 4);
    CHECK(s.finished.empty());
    CHECK(s.done == std::vector<std::string>{"p12/1"});
    CHECK(s.doomed == std::vector<std::string>{"p12"});
  }

  TEST_CASE("a rollout's joins and departures in one commit count in the order they happened") {
    fs::path path = fresh_db("rollouts");
    {
      auto db = rollout::ManagerDb::open(path.string()).value();
      rollout::ManagerChanges c;
      c.rollout_joined("r0");
      c.rollout_joined("r1");
      REQUIRE(db->commit(c).is_ok());
      rollout::ManagerChanges again;
      again.rollout_gone("r0");    // declared dead
      again.rollout_joined("r0");  // and back, before the commit: live
      again.rollout_joined("r2");
      again.rollout_gone("r2");  // joined and left: gone
      REQUIRE(db->commit(again).is_ok());
    }
    auto s = rollout::ManagerDb::open(path.string()).value()->load().value();
    CHECK(s.rollouts == std::vector<std::string>{"r0", "r1"});
  }

  TEST_CASE("an unopenable path is a clear error") {
    auto db = rollout::ManagerDb::open("/nonexistent-dir/sub/manager.db");
    REQUIRE_FALSE(db.is_ok());
    CHECK(db.status().message().find("manager db") != std::string::npos);
  }

  // Figures: printed as "manager db commit: ...". One report's commit holds N finished
  // trajectories (JSON of 64 prompt + 512 response tokens with log-probs, about 6 KB each), into a
  // database that already holds `held` finished ids. The JSON is made before the clock starts
  // (the manager makes it once per trajectory in any case).
  TEST_CASE("commit cost per report, by finished trajectories per report (printed)") {
    fs::path path = fresh_db("bench");
    auto db = rollout::ManagerDb::open(path.string()).value();
    const std::string traj = trajectory_json("p0/0", 512);
    std::printf("manager db commit: trajectory JSON %zu bytes\n", traj.size());
    std::uint64_t next = 0;
    for (std::uint64_t held : {0, 100000}) {
      if (held > 0) {  // grow the finished set (acknowledged: no JSON kept)
        rollout::ManagerChanges c;
        while (next < held)
          c.finished.push_back("p" + std::to_string(next++) + "/1");
        REQUIRE(db->commit(c).is_ok());
      }
      for (std::size_t n : {0, 1, 8, 64}) {
        constexpr int kReports = 40;
        std::vector<rollout::ManagerChanges> reports(kReports);
        for (auto& c : reports) {
          c.counters = {next, 1, next, 0};
          c.counters_changed = true;
          for (std::size_t i = 0; i < n; ++i) {
            std::string id = "p" + std::to_string(next++) + "/0";
            c.finished.push_back(id);
            c.unacked.emplace_back(id, traj);
          }
        }
        auto t0 = std::chrono::steady_clock::now();
        for (const auto& c : reports)
          REQUIRE(db->commit(c).is_ok());
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count() /
                    kReports;
        std::printf(
            "manager db commit: %zu finished per report, %llu ids held: %.0f us per commit (%.0f "
            "us per trajectory)\n",
            n, static_cast<unsigned long long>(held), us, n ? us / static_cast<double>(n) : us);
      }
    }
  }
}
