// The rollout manager's failure model, driven by hand over real ZeroMQ on loopback: a test plays
// the rollouts and the actor. A manager restarted on its state file continues the job (nothing
// lost, nothing counted twice); a rollout restarted under the same id gives its old work back; a
// restarted actor (a new epoch) is sent everything it has not acknowledged.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "rl/trajectory.hpp"
#include "rollout/engine.hpp"
#include "rollout/manager.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Harness {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<rollout::Manager> manager;
  std::unique_ptr<core::Client> client;

  explicit Harness(rollout::ManagerConfig cfg) {
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security.mode = "plain";
    auto m = rollout::Manager::create(*loop, cfg);
    REQUIRE_MESSAGE(m.is_ok(), m.status().to_string());
    manager = std::move(m).value();
    client = core::Client::create(*loop, manager->endpoint(), core::Security::plain()).value();
  }

  core::Result<core::Message> try_call(const std::string& type, json body) {
    return client->call(core::Message(type, std::move(body)), core::Millis(5000));
  }
  json call(const std::string& type, json body) {
    auto reply = try_call(type, std::move(body));
    REQUIRE_MESSAGE(reply.is_ok(), reply.status().to_string());
    return reply->body;
  }
  json status() { return call("mgr.status", json::object()); }

  void publish(std::uint64_t version, std::uint64_t consumed = 0) {
    call("mgr.published", json{{"version", version}, {"consumed", consumed}});
  }

  void wait_ms(int ms) {
    loop->run_until([] { return false; }, core::Millis(ms));
  }
};

// A rollout played by the test: what it runs, queues and finished since its last report.
struct FakeRollout {
  explicit FakeRollout(std::string name) : id(std::move(name)) {}
  std::string id;
  std::string incarnation = "0000000000000001";
  std::uint64_t version = 1;
  std::vector<std::string> active, queued;
  std::vector<rl::Trajectory> finished;
  std::map<std::string, rollout::SequenceState> assigned;  // every state it was given, by id

  json body() const {
    json a = json::array();
    for (const auto& t : active)
      a.push_back(json::array({t, 100}));
    json f = json::array();
    for (const auto& t : finished)
      f.push_back(t.to_json());
    return json{{"id", id},
                {"incarnation", incarnation},
                {"version", version},
                {"staged", version},
                {"loading", false},
                {"capacity", {{"max_sequences", 8}, {"max_kv_tokens", 65536}}},
                {"active", a},
                {"queued", queued},
                {"finished", f},
                {"exported", json::array()},
                {"returned", json::array()}};
  }

  // Reports; what is assigned is queued here. Returns the ids assigned.
  std::vector<std::string> report(Harness& h) {
    json r = h.call("mgr.report", body());
    finished.clear();
    std::vector<std::string> got;
    for (const auto& s : r.at("assign")) {
      auto st = rollout::SequenceState::from_json(s).value();
      got.push_back(st.trajectory_id);
      queued.push_back(st.trajectory_id);
      assigned[st.trajectory_id] = st;
    }
    return got;
  }

  // Starts every queued trajectory.
  void start_all() {
    active.insert(active.end(), queued.begin(), queued.end());
    queued.clear();
  }

  // Finishes `tid` (active or queued here).
  // `tokens` response tokens (3 by default; thousands make a trajectory of many KiB of JSON).
  void finish(const std::string& tid, std::size_t tokens = 3) {
    std::erase(active, tid);
    std::erase(queued, tid);
    rl::Trajectory t;
    t.id = tid;
    t.prompt_id = tid.substr(0, tid.find('/'));
    t.version = version;
    t.versions = {version};
    t.response_tokens.assign(tokens, 1234567);
    t.logprobs.assign(tokens, -0.123456789f);
    t.rollout = id;
    finished.push_back(t);
  }
};

// The actor played by the test: acknowledges what it receives, and counts what it receives
// again after acknowledging it (never allowed).
struct FakeActor {
  std::string epoch = "e1";
  std::set<std::string> have, acked;
  std::uint64_t after_ack = 0;
  std::uint64_t consumed = 0;  // trained on (opens the budget for new prompts)

  // Collects; returns the ids received in this reply.
  std::vector<std::string> collect(Harness& h, const std::vector<std::string>& ack = {}) {
    for (const auto& a : ack)
      acked.insert(a);
    json r =
        h.call("mgr.collect", json{{"ack", ack},
                                   {"have", std::vector<std::string>(have.begin(), have.end())},
                                   {"consumed", consumed},
                                   {"max", 64},
                                   {"epoch", epoch}});
    std::vector<std::string> got;
    for (const auto& t : r.at("trajectories")) {
      std::string id = t.at("id").get<std::string>();
      if (acked.count(id)) ++after_ack;
      have.insert(id);
      got.push_back(id);
    }
    return got;
  }
};

std::set<std::string> all_ids(std::uint64_t prompts, std::uint32_t group) {
  std::set<std::string> out;
  for (std::uint64_t p = 0; p < prompts; ++p) {
    for (std::uint32_t k = 0; k < group; ++k)
      out.insert("p" + std::to_string(p) + "/" + std::to_string(k));
  }
  return out;
}

fs::path temp_state(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("sluice-mgr-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / (name + ".db");
  for (const char* ext : {"", "-wal", "-shm"})
    fs::remove(p.string() + ext);
  return p;
}

rollout::ManagerConfig small_config() {
  rollout::ManagerConfig c;
  c.mode = "sluice";
  c.prompts = 6;
  c.group_size = 2;
  c.batch_trajectories = 4;
  c.admission = "budget";  // what is released is counted below
  c.ahead_batches = 2;     // 8 trajectories (4 prompts) ahead of what the actor consumed
  c.repack = false;
  c.heartbeat_timeout_ms = 60000;
  c.recovery_grace_ms = 1000;
  c.resend_ms = 300;  // margins for a loaded machine: each step below takes milliseconds
  return c;
}

}  // namespace

TEST_SUITE("rollout.manager_restart") {
  TEST_CASE("a manager restarted on its state file continues the job: nothing lost or doubled") {
    rollout::ManagerConfig cfg = small_config();
    cfg.state_path = temp_state("restart").string();
    FakeRollout r0("r0");
    FakeActor actor;
    std::vector<std::string> a;  // the first 8 trajectories, in the order assigned
    std::map<std::string, rollout::SequenceState> first;
    {
      Harness h(cfg);
      h.publish(1);
      a = r0.report(h);
      REQUIRE(a.size() == 8);  // 4 prompts: the budget ahead of the actor
      first = r0.assigned;
      r0.active = {a[0], a[1], a[2], a[3], a[4], a[5]};
      r0.queued = {a[6], a[7]};
      CHECK(r0.report(h).empty());
      r0.finish(a[0]);
      r0.finish(a[1]);
      r0.finish(a[2]);
      r0.report(h);
      auto got = actor.collect(h);
      CHECK(std::set<std::string>(got.begin(), got.end()) ==
            std::set<std::string>{a[0], a[1], a[2]});
      CHECK(actor.collect(h, {a[0]}).empty());
      CHECK(h.status().at("acked").get<std::uint64_t>() == 1);
      CHECK(h.status().at("released_prompts").get<std::uint64_t>() == 4);
    }  // the manager is gone (its state is on disk; nothing was shut down cleanly)

    // r0 lost a[5] and a[7] (say they ran on a rollout that died with the manager).
    r0.active = {a[3], a[4]};
    r0.queued = {a[6]};
    Harness h(cfg);
    json st = h.status();
    CHECK(st.at("released_prompts").get<std::uint64_t>() == 4);
    CHECK(st.at("acked").get<std::uint64_t>() == 1);
    CHECK(st.at("recovering").get<bool>());
    CHECK(st.at("latest").get<std::uint64_t>() == 1);
    // Finished and unacknowledged: delivered again; acknowledged: not.
    auto again = actor.collect(h);
    CHECK(std::set<std::string>(again.begin(), again.end()) == std::set<std::string>{a[1], a[2]});
    CHECK(actor.after_ack == 0);
    actor.collect(h, {a[1], a[2]});

    // r0 reports its in-flight work (ids this manager has no record of) and re-reports a[2] as
    // finished (a copy): accepted, and a duplicate. r0 was the only rollout live before the
    // restart, so its report ends the recovery: the work nobody named comes back at once, not
    // after the grace period, rebuilt exactly as first assigned, and r0 takes it.
    r0.finish(a[2]);
    std::erase(r0.active, a[2]);
    auto back = r0.report(h);
    st = h.status();
    CHECK(st.at("duplicates").get<std::uint64_t>() == 1);
    CHECK(st.at("recovered").get<std::uint64_t>() == 3);
    CHECK_FALSE(st.at("recovering").get<bool>());
    CHECK(std::set<std::string>(back.begin(), back.end()) == std::set<std::string>{a[5], a[7]});
    for (const auto& id : back) {
      CHECK(r0.assigned[id].prompt_tokens == first[id].prompt_tokens);
      CHECK(r0.assigned[id].rng_state == first[id].rng_state);
      CHECK(r0.assigned[id].max_new_tokens == first[id].max_new_tokens);
    }
    CHECK(h.status().at("recovery_restarted").get<std::uint64_t>() == 2);
    FakeRollout r1("r1");
    r1.incarnation = "0000000000000002";

    // Everything runs to the end; new prompts continue from the cursor.
    std::set<std::string> released(a.begin(), a.end());
    for (int round = 0; round < 50 && !h.manager->done(); ++round) {
      for (FakeRollout* r : {&r0, &r1}) {
        r->start_all();
        for (const auto& id : std::vector<std::string>(r->active))
          r->finish(id);
        for (const auto& id : r->report(h)) {
          if (!std::count(back.begin(), back.end(), id)) {
            CHECK_MESSAGE(released.insert(id).second, id << " released twice");
          }
        }
      }
      auto got = actor.collect(h);
      actor.consumed = actor.acked.size() + got.size();
      actor.collect(h, got);
    }
    CHECK(h.manager->done());
    CHECK(actor.acked == all_ids(cfg.prompts, cfg.group_size));
    CHECK(released == all_ids(cfg.prompts, cfg.group_size));
    CHECK(actor.after_ack == 0);
    CHECK(h.status().at("acked").get<std::uint64_t>() == cfg.prompts * cfg.group_size);
  }

  TEST_CASE("a group doomed before a restart stays doomed: its members end as abandoned") {
    rollout::ManagerConfig cfg = small_config();
    cfg.state_path = temp_state("doomed").string();
    cfg.prompts = 1;
    cfg.group_size = 4;
    cfg.batch_trajectories = 4;
    cfg.abandon_stale = true;
    cfg.max_staleness = 1;
    FakeRollout r("r0");
    {
      Harness h(cfg);
      h.publish(1);
      REQUIRE(r.report(h).size() == 4);
      r.start_all();
      r.report(h);
      h.publish(2);
      h.publish(3);
      // p0/0 is stopped as too stale: the whole group is doomed.
      r.finish("p0/0");
      r.finished.back().abandoned = true;
      r.finished.back().version = 1;
      json reply = h.call("mgr.report", r.body());
      r.finished.clear();
      CHECK(reply.at("abandon").size() == 3);
    }
    // Restarted: the rollout still runs p0/1 and p0/2; p0/3 is gone.
    r.active = {"p0/1", "p0/2"};
    Harness h(cfg);
    json reply = h.call("mgr.report", r.body());
    CHECK(reply.at("abandon") == json::array({"p0/1", "p0/2"}));
    h.wait_ms(1300);
    h.status();  // the grace period ended: p0/3 ends as abandoned at once
    FakeActor actor;
    auto got = actor.collect(h);
    CHECK(std::set<std::string>(got.begin(), got.end()) == std::set<std::string>{"p0/0", "p0/3"});
  }

  TEST_CASE("a rollout restarted under the same id gives the old process's work back") {
    rollout::ManagerConfig cfg = small_config();
    Harness h(cfg);
    h.publish(1);
    FakeRollout old("r0");
    auto mine = old.report(h);
    REQUIRE(mine.size() == 8);
    old.start_all();
    old.report(h);
    // Same incarnation: nothing changes.
    CHECK(old.report(h).empty());

    FakeRollout fresh("r0");
    fresh.incarnation = "0000000000000002";
    auto got = fresh.report(h);
    CHECK(std::set<std::string>(got.begin(), got.end()) ==
          std::set<std::string>(mine.begin(), mine.end()));
    json st = h.status();
    CHECK(st.at("rollout_restarts").get<std::uint64_t>() == 1);
    CHECK(st.at("rollouts").size() == 1);
  }

  TEST_CASE("a new actor epoch is sent every unacknowledged trajectory again") {
    rollout::ManagerConfig cfg = small_config();
    Harness h(cfg);
    h.publish(1);
    FakeRollout r("r0");
    auto ids = r.report(h);
    REQUIRE(ids.size() >= 3);
    r.start_all();
    r.finish(ids[0]);
    r.finish(ids[1]);
    r.finish(ids[2]);
    r.report(h);
    FakeActor actor;
    CHECK(actor.collect(h).size() == 3);
    // Received (`have`): not re-sent to this epoch, however long it waits.
    h.wait_ms(500);
    CHECK(actor.collect(h, {ids[0]}).empty());
    // A restarted actor: everything unacknowledged again, acknowledged not.
    actor.epoch = "e2";
    actor.have.clear();
    auto again = actor.collect(h);
    CHECK(std::set<std::string>(again.begin(), again.end()) ==
          std::set<std::string>{ids[1], ids[2]});
    // The old protocol (no `have`, no `epoch`): re-sent after resend_ms until acknowledged.
    json old = h.call("mgr.collect", json{{"ack", {ids[1]}}, {"consumed", 0}, {"max", 16}});
    CHECK(old.at("trajectories").empty());
    h.wait_ms(500);
    old = h.call("mgr.collect", json{{"consumed", 0}, {"max", 16}});
    REQUIRE(old.at("trajectories").size() == 1);
    CHECK(old.at("trajectories")[0].at("id") == ids[2]);
    CHECK(h.status().at("acked").get<std::uint64_t>() == 2);
  }

  TEST_CASE("a restarted actor owed more than one message can carry gets it over several") {
    // Found by sluice chaos: every unacknowledged trajectory went into one collect reply, whose
    // header passed the messaging layer's 1 MiB limit; refused whole and sent again, the job
    // stalled. 8 trajectories of 3,000 tokens are about 1.4 MiB of JSON.
    rollout::ManagerConfig cfg = small_config();
    Harness h(cfg);
    h.publish(1);
    FakeRollout r("r0");
    std::vector<std::string> ids;
    for (int round = 0; round < 4 && ids.size() < 8; ++round) {
      auto got = r.report(h);
      r.start_all();
      for (const auto& id : got) {
        r.finish(id, 3000);
        ids.push_back(id);
      }
      r.report(h);  // at most 4 finished per report: each report stays under the limit itself
    }
    REQUIRE(ids.size() >= 8);
    FakeActor actor;
    actor.epoch = "e2";  // a new epoch: everything unacknowledged is owed at once
    std::set<std::string> got;
    for (int i = 0; i < 20 && got.size() < ids.size(); ++i) {
      auto reply = actor.collect(h);
      CHECK(reply.size() < ids.size());  // more than one reply
      got.insert(reply.begin(), reply.end());
    }
    CHECK(got == std::set<std::string>(ids.begin(), ids.end()));
    CHECK(actor.after_ack == 0);
  }

  TEST_CASE("malformed, wrong-typed and oversized requests get an error and change nothing") {
    rollout::ManagerConfig cfg = small_config();
    Harness h(cfg);
    h.publish(1);
    FakeRollout r("r0");
    auto ids = r.report(h);
    REQUIRE(ids.size() == 8);
    r.start_all();
    r.finish(ids[0]);
    r.report(h);
    const json good = r.body();
    const std::string before = h.manager->state_digest();
    // A control: the digest does see a change.
    {
      Harness other(cfg);
      std::string d0 = other.manager->state_digest();
      other.publish(1);
      CHECK(other.manager->state_digest() != d0);
    }

    std::vector<std::pair<std::string, json>> bad;
    auto with = [&](const char* key, json v) {
      json b = good;
      b[key] = std::move(v);
      return b;
    };
    auto without = [&](const char* key) {
      json b = good;
      b.erase(key);
      return b;
    };
    // A valid finished trajectory first, then a broken one: nothing of the report may apply.
    rl::Trajectory fine;
    fine.id = ids[1];
    fine.prompt_id = fine.id.substr(0, fine.id.find('/'));
    fine.version = 1;
    fine.versions = {1};
    json broken = fine.to_json();
    broken["logprobs"] = json::array({0.5});  // one log-prob for no response token
    json far = fine.to_json();
    far["version"] = std::uint64_t{1} << 40;  // absurdly far above the newest version (1)
    far["versions"] = json::array({std::uint64_t{1} << 40});
    bad.emplace_back("mgr.report", json::array());
    bad.emplace_back("mgr.report", without("id"));
    bad.emplace_back("mgr.report", with("id", 7));
    bad.emplace_back("mgr.report", with("id", std::string(300, 'x')));
    bad.emplace_back("mgr.report", with("version", "1"));
    bad.emplace_back("mgr.report", with("version", -1));
    bad.emplace_back("mgr.report", with("version", std::uint64_t{1} << 40));
    bad.emplace_back("mgr.report", with("capacity", "big"));
    bad.emplace_back("mgr.report", without("active"));
    bad.emplace_back("mgr.report", with("active", json::array({json::array({ids[1]})})));
    bad.emplace_back("mgr.report", with("active", json::array({json::array({"nope", 5})})));
    bad.emplace_back("mgr.report", with("active", json::array({json::array({"p99/0", 5})})));
    bad.emplace_back("mgr.report", with("active", json::array({json::array({"p0/7", 5})})));
    bad.emplace_back("mgr.report", with("queued", json::array({1, 2})));
    bad.emplace_back("mgr.report", with("queued", json(std::vector<std::string>(70000, ids[2]))));
    bad.emplace_back("mgr.report", with("finished", json::array({fine.to_json(), broken})));
    bad.emplace_back("mgr.report", with("finished", json::array({fine.to_json(), far})));
    bad.emplace_back("mgr.report", with("finished", "all of them"));
    bad.emplace_back("mgr.report", with("exported", json::array({json::object()})));
    bad.emplace_back("mgr.report", with("stats", json::array()));
    bad.emplace_back("mgr.report", with("incarnation", json::array()));
    bad.emplace_back("mgr.collect", json{{"ack", ids[0]}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0], 3})}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0]})}, {"have", "x"}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0]})}, {"epoch", 5}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0]})}, {"epoch", ""}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0]})}, {"max", -3}});
    bad.emplace_back("mgr.collect", json{{"ack", json::array({ids[0]})}, {"consumed", 1.5}});
    bad.emplace_back("mgr.collect",
                     json{{"ack", json::array({ids[0]})}, {"epoch", std::string(1000, 'e')}});
    bad.emplace_back("mgr.published", json{{"version", "2"}});
    bad.emplace_back("mgr.published", json{{"version", std::uint64_t{1} << 40}});
    bad.emplace_back("mgr.published", json::object());
    for (const auto& [type, body] : bad) {
      CAPTURE(type);
      CAPTURE(body.dump().substr(0, 200));
      auto reply = h.try_call(type, body);
      CHECK_FALSE(reply.is_ok());
      if (!reply.is_ok())
        CHECK_MESSAGE(reply.status().code() == core::Code::kProtocol, reply.status().to_string());
      CHECK(h.manager->state_digest() == before);
    }
    // The same report, well formed, is applied.
    json ok = with("finished", json::array({fine.to_json()}));
    h.call("mgr.report", ok);
    CHECK(h.manager->state_digest() != before);
  }
}
