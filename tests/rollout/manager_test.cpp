// The rollout manager driven by hand: a test plays the rollouts, sending the reports a worker
// sends, and checks what the manager answers (loads, new work, repack exports).
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "rl/trajectory.hpp"
#include "rollout/manager.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using nlohmann::json;

namespace {

struct Harness {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<rollout::Manager> manager;
  std::unique_ptr<core::Client> client;

  explicit Harness(rollout::ManagerConfig cfg) {
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    manager = rollout::Manager::create(*loop, cfg).value();
    client = core::Client::create(*loop, manager->endpoint(), core::Security::plain()).value();
  }

  json call(const std::string& type, json body) {
    auto reply = client->call(core::Message(type, std::move(body)), core::Millis(5000));
    REQUIRE_MESSAGE(reply.is_ok(), reply.status().to_string());
    return reply->body;
  }

  void publish(std::uint64_t version) {
    call("mgr.published", json{{"version", version}, {"consumed", 0}});
  }

  // A worker's report: what it runs (active trajectory ids, each with 100 KV tokens), what it
  // hands back unstarted, and the versions it runs and holds.
  json report(const std::string& id, std::uint64_t version, std::uint64_t staged,
              const std::vector<std::string>& active, const json& returned = json::array()) {
    json a = json::array();
    for (const auto& t : active)
      a.push_back(json::array({t, 100}));
    return call("mgr.report", json{{"id", id},
                                   {"version", version},
                                   {"staged", staged},
                                   {"loading", false},
                                   {"capacity", {{"max_sequences", 8}, {"max_kv_tokens", 65536}}},
                                   {"active", a},
                                   {"queued", json::array()},
                                   {"finished", json::array()},
                                   {"exported", json::array()},
                                   {"returned", returned}});
  }

  // Reports `id` on `version` with nothing, takes the work it is given, and keeps `keep` of it
  // running (the rest handed back): the ids it runs.
  std::vector<std::string> start(const std::string& id, std::uint64_t version, std::size_t keep) {
    json r = report(id, version, version, {});
    REQUIRE(r.at("assign").size() >= keep);
    std::vector<std::string> running;
    json back = json::array();
    for (const auto& s : r.at("assign")) {
      if (running.size() < keep) {
        running.push_back(s.at("trajectory_id").get<std::string>());
      } else {
        back.push_back(s);
      }
    }
    report(id, version, version, running, back);
    return running;
  }

  void wait_ms(int ms) {
    loop->run_until([] { return false; }, core::Millis(ms));
  }
};

rollout::ManagerConfig sluice_config() {
  rollout::ManagerConfig c;
  c.mode = "sluice";
  c.prompts = 64;
  c.group_size = 4;
  c.batch_trajectories = 32;
  c.ahead_batches = 4;
  c.max_assign_lag = 1;
  c.tail = "drain";  // these cases check draining and repack (continue is checked in
                     // manager_state_test.cpp)
  c.repack_interval_ms = 20;
  c.heartbeat_timeout_ms = 60000;
  return c;
}

}  // namespace

TEST_SUITE("rollout.manager") {
  TEST_CASE(
      "sluice: a drained rollout loads the newer version it holds when that is close enough") {
    Harness h(sluice_config());
    h.publish(1);
    h.start("r0", 1, 0);
    h.publish(2);
    h.publish(3);
    // Runs 1, holds 2 (3 is still on its way): 2 is within max_assign_lag of 3, so it loads 2
    // rather than idle until 3 arrives.
    json r = h.report("r0", 1, 2, {});
    CHECK(r.at("load").get<std::uint64_t>() == 2);
    // On 2 while 3 is pulled, it is given work.
    r = h.report("r0", 2, 2, {});
    CHECK(r.at("load").get<std::uint64_t>() == 0);
    CHECK(r.at("assign").size() > 0);

    // Holding only a version two behind the newest, it waits for the newest instead.
    h.start("r1", 1, 0);
    h.publish(4);
    r = h.report("r1", 1, 2, {});
    CHECK(r.at("load").get<std::uint64_t>() == 0);
    CHECK(r.at("assign").empty());
    // Once it holds the newest, it loads that.
    r = h.report("r1", 1, 4, {});
    CHECK(r.at("load").get<std::uint64_t>() == 4);
  }

  TEST_CASE(
      "abandon_stale: a trajectory too stale to train ends its whole group, each member once") {
    for (std::string mode : {"sluice", "partial-rollout"}) {
      CAPTURE(mode);
      rollout::ManagerConfig c = sluice_config();
      c.mode = mode;
      c.abandon_stale = true;
      c.max_staleness = 1;
      c.prompts = 1;  // one group of 4: p0/0 .. p0/3
      Harness h(c);
      h.publish(1);
      auto running = h.start("a", 1, 2);  // two run here; two go back to the pool
      REQUIRE(running.size() == 2);
      h.publish(2);
      json r = h.report("a", 1, 1, running);
      CHECK(r.at("abandon_before").get<std::uint64_t>() == 1);  // version 1 is still trainable
      CHECK(r.at("abandon").empty());
      h.publish(3);
      r = h.report("a", 1, 1, running);
      CHECK(r.at("abandon_before").get<std::uint64_t>() == 2);

      // The rollout stops the first one (first generated by version 1) and sends it abandoned,
      // as a worker does; the manager ends the rest of the group: the two in the pool at once,
      // the other running one by telling the rollout.
      rl::Trajectory cut;
      cut.id = running[0];
      cut.prompt_id = "p0";
      cut.version = 1;
      cut.versions = {1};
      cut.abandoned = true;
      json body{{"id", "a"},
                {"version", 1},
                {"staged", 1},
                {"loading", false},
                {"capacity", {{"max_sequences", 8}, {"max_kv_tokens", 65536}}},
                {"active", json::array({json::array({running[1], 100})})},
                {"queued", json::array()},
                {"finished", json::array({cut.to_json()})},
                {"exported", json::array()}};
      r = h.call("mgr.report", body);
      CHECK(r.at("abandon") == json::array({running[1]}));

      cut.id = running[1];
      body["active"] = json::array();
      body["finished"] = json::array({cut.to_json()});
      r = h.call("mgr.report", body);
      CHECK(r.at("abandon").empty());
      CHECK(r.at("assign").empty());  // nothing of the group is handed out again

      json got = h.call("mgr.collect", json{{"max", 16}});
      std::multiset<std::string> ids;
      for (const auto& t : got.at("trajectories")) {
        ids.insert(t.at("id").get<std::string>());
        CHECK(t.at("abandoned").get<bool>());
      }
      CHECK(ids == std::multiset<std::string>{"p0/0", "p0/1", "p0/2", "p0/3"});
      auto status = h.call("mgr.status", json::object());
      CHECK(status.at("abandoned").get<std::uint64_t>() == 4);
      CHECK(status.at("duplicates").get<std::uint64_t>() == 0);
    }
  }

  TEST_CASE(
      "free slots count as draining while work waits, and as the job's end once none is left") {
    rollout::ManagerConfig c = sluice_config();
    c.prompts = 1;  // p0/0 .. p0/3
    Harness h(c);
    h.publish(1);
    auto running = h.start("a", 1, 2);  // two run on a; two wait in the pool
    auto free_slots = [&] { return h.call("mgr.status", json::object()).at("free_slot_s"); };
    h.publish(2);
    // a holds version 2 and drains version 1: given nothing while two trajectories wait.
    json r = h.report("a", 1, 2, running);
    CHECK(r.at("assign").empty());
    // Until that report the manager may believe a holds all four (start()'s second reply can hand
    // the two back to a, and only this report shows a never took them), so nothing waited and a
    // sample that fell there counted as the job's end. From here on work waits.
    const double end0 = free_slots().at("end").get<double>();
    h.wait_ms(300);
    h.report("a", 1, 2, running);
    json f = free_slots();
    CHECK(f.at("draining").get<double>() > 6 * 0.2);  // 6 free slots for about 0.3 s
    CHECK(f.at("end").get<double>() == end0);
    // b, on version 2, takes the two that waited: nothing is left in the job, so a's free slots
    // from now on are the job's end, not a cost of draining.
    REQUIRE(h.report("b", 2, 2, {}).at("assign").size() == 2);
    double draining = f.at("draining").get<double>();
    h.wait_ms(300);
    h.report("a", 1, 2, running);
    f = free_slots();
    CHECK(f.at("end").get<double>() > 6 * 0.2);
    CHECK(f.at("draining").get<double>() < draining + 6 * 0.15);
  }

  TEST_CASE("sluice: rollouts too far behind to be given work are repacked, within their version") {
    Harness h(sluice_config());
    h.publish(1);
    auto a = h.start("a", 1, 2);
    auto b = h.start("b", 1, 2);
    REQUIRE(a.size() == 2);
    REQUIRE(b.size() == 2);
    h.publish(2);
    h.publish(3);
    // Both still pull the newest version (they hold 2 of 3) and run two trajectories of version 1
    // each: more than max_assign_lag behind, they are given no work and drain. Repack empties one
    // onto the other.
    std::vector<std::string> exported;
    std::string from;
    for (int round = 0; round < 20 && exported.empty(); ++round) {
      for (const auto& [id, running] : {std::pair{"a", a}, std::pair{"b", b}}) {
        json r = h.report(id, 1, 2, running);
        CHECK(r.at("assign").empty());
        for (const auto& t : r.at("export")) {
          exported.push_back(t.get<std::string>());
          from = id;
        }
      }
      h.wait_ms(30);
    }
    REQUIRE(exported.size() == 2);
    CHECK(exported == (from == "a" ? a : b));
  }
}
