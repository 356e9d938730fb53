// The rollout manager's state machine driven directly: synthetic time, no sockets, no sleeps. The
// test plays the rollouts and the actor and checks what a user would: nothing lost, nothing
// twice, versions monotonic, work moved only between rollouts of one version.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rollout/manager_db.hpp"
#include "rollout/manager_state.hpp"

using namespace sluice;
using rollout::Clock;
using rollout::ManagerState;
using rollout::SequenceState;
using rollout::TrajState;
using std::chrono::milliseconds;

namespace {

// Synthetic time: an arbitrary origin, moved by hand.
const Clock::time_point kT0 = Clock::time_point{} + std::chrono::hours(1);
Clock::time_point at(int ms) {
  return kT0 + milliseconds(ms);
}

std::unique_ptr<ManagerState> make_state(rollout::ManagerConfig cfg) {
  REQUIRE(cfg.validate().is_ok());
  auto s = ManagerState::create(std::move(cfg), nullptr, kT0);
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  return std::move(s).value();
}

// A rollout played by the test. Everything it is handed runs at once (the test's engine has
// room); `step` generates a token for each sequence on the version it has loaded.
struct FakeRollout {
  explicit FakeRollout(std::string name, std::uint64_t v = 1) : id(std::move(name)), version(v) {}
  std::string id;
  std::uint64_t version = 1;
  std::uint64_t staged = 0;
  rollout::Capacity capacity{4, 65536};
  std::map<std::string, SequenceState> running;
  std::vector<rl::Trajectory> finished;
  std::vector<SequenceState> exported, partial;
  std::vector<std::string> received;  // every trajectory id handed to it, in order

  rollout::ReportReply report(ManagerState& m, Clock::time_point now) {
    rollout::ReportRequest q;
    q.id = id;
    q.incarnation = "0000000000000001";
    q.version = version;
    q.staged = std::max(staged, version);
    q.capacity = capacity;
    for (const auto& [tid, s] : running)
      q.active.push_back({tid, s.kv_tokens()});
    q.finished = std::exchange(finished, {});
    q.exported = std::exchange(exported, {});
    q.partial = std::exchange(partial, {});
    REQUIRE(m.decode_limits().max_version >= version);
    core::Status valid = m.check_report(q);
    REQUIRE_MESSAGE(valid.is_ok(), valid.to_string());
    rollout::ReportReply reply = m.report(std::move(q), now);
    for (const auto* list : {&reply.assign, &reply.import}) {
      for (const auto& s : *list) {
        received.push_back(s.trajectory_id);
        running[s.trajectory_id] = s;
      }
    }
    for (const auto& tid : reply.export_ids) {
      auto it = running.find(tid);
      REQUIRE(it != running.end());
      exported.push_back(it->second);
      running.erase(it);
    }
    if (reply.rejoin) running.clear();
    return reply;
  }
  void step() {
    for (auto& [tid, s] : running) {
      s.generated.push_back(7);
      s.logprobs.push_back(-1.0f);
      if (s.versions.empty() || s.versions.back() != version) s.versions.push_back(version);
    }
  }
  void stream(const std::string& tid) { partial.push_back(running.at(tid)); }
  void finish(const std::string& tid) {
    finished.push_back(rollout::to_trajectory(running.at(tid), 1.0, id));
    running.erase(tid);
  }
  void finish_all() {
    while (!running.empty())
      finish(running.begin()->first);
  }
};

rollout::ManagerConfig small_job() {
  rollout::ManagerConfig cfg;
  cfg.mode = "sluice";
  cfg.prompts = 2;
  cfg.group_size = 2;
  cfg.batch_trajectories = 4;
  cfg.heartbeat_timeout_ms = 1000;
  cfg.prefetch = 0;
  cfg.repack = false;
  return cfg;
}

std::vector<std::string> ids_of(const std::vector<rl::Trajectory>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts)
    out.push_back(t.id);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("manager state: a silent rollout's work goes to another rollout exactly once") {
  auto m = make_state(small_job());
  m->published({1, 0});
  FakeRollout a("a"), b("b");
  a.report(*m, at(0));
  REQUIRE(a.running.size() == 4);  // the whole job: 2 prompts x 2
  a.step();
  a.step();
  const std::string streamed = a.running.begin()->first;
  a.stream(streamed);  // one trajectory's progress reaches the partial-response pool
  a.report(*m, at(100));
  CHECK(m->where(streamed)->state == TrajState::kActive);

  // b joins with nothing to take; a falls silent.
  CHECK(b.report(*m, at(900)).assign.empty());
  m->check_heartbeats(at(1050));  // a silent 950 ms: alive
  CHECK(m->counts().dead == 0);
  b.report(*m, at(1150));
  m->check_heartbeats(at(1150));  // a silent 1050 ms: dead
  CHECK(m->counts().dead == 1);
  for (const auto& tid : a.received)
    CHECK(m->where(tid)->state == TrajState::kPending);

  // b takes all of it: the streamed trajectory resumes where it was, the rest restart.
  rollout::ReportReply r = b.report(*m, at(1200));
  REQUIRE(r.import.size() == 1);
  CHECK(r.import[0].trajectory_id == streamed);
  CHECK(r.import[0].generated.size() == 2);
  CHECK(r.assign.size() == 3);
  for (const auto& s : r.assign)
    CHECK(s.generated.empty());

  // Time goes on, b heartbeats: nothing is handed out again.
  for (int t = 1300; t <= 3000; t += 100) {
    b.step();
    b.report(*m, at(t));
    m->check_heartbeats(at(t));
  }
  std::vector<std::string> got = b.received;
  std::sort(got.begin(), got.end());
  std::vector<std::string> want = a.received;
  std::sort(want.begin(), want.end());
  CHECK(got == want);  // each once
  CHECK(m->counts().dead == 1);
  for (const auto& tid : want) {
    CHECK(m->where(tid)->state == TrajState::kActive);
    CHECK(m->where(tid)->rollout == "b");
  }

  // a comes back: told to rejoin, given nothing.
  FakeRollout late("a");
  late.running = a.running;
  rollout::ReportReply back = late.report(*m, at(3050));
  CHECK(back.rejoin);
  CHECK(back.assign.empty());
  CHECK(back.import.empty());

  // b finishes; a copy the old a finished as well counts once.
  b.finish_all();
  b.report(*m, at(3100));
  late.running = {{streamed, a.running.at(streamed)}};
  late.finish(streamed);
  late.report(*m, at(3150));
  CHECK(m->counts().finished == 4);
  CHECK(m->counts().duplicates == 1);
  rollout::CollectRequest c;
  c.epoch = "e1";
  CHECK(ids_of(m->collect(c, at(3200)).trajectories) == want);
}

TEST_CASE("manager state: a finished trajectory is held until the actor acknowledges it") {
  rollout::ManagerConfig cfg = small_job();
  cfg.resend_ms = 3000;
  auto m = make_state(cfg);
  m->published({1, 0});
  FakeRollout a("a");
  a.report(*m, at(0));
  a.step();
  a.finish_all();
  a.report(*m, at(100));
  REQUIRE(m->counts().finished == 4);
  const std::vector<std::string> all = {"p0/0", "p0/1", "p1/0", "p1/1"};

  rollout::CollectRequest c;
  c.epoch = "e1";
  c.have = std::vector<std::string>{};
  CHECK(ids_of(m->collect(c, at(200)).trajectories) == all);
  CHECK_FALSE(m->done());
  // Sent, not confirmed: not sent again before resend_ms, then sent again (a lost reply).
  CHECK(m->collect(c, at(1000)).trajectories.empty());
  CHECK(ids_of(m->collect(c, at(3300)).trajectories) == all);
  // Received (`have`), not acknowledged: kept, not re-sent however long it takes.
  c.have = all;
  m->collect(c, at(3400));
  c.have = std::vector<std::string>{};
  CHECK(m->collect(c, at(60000)).trajectories.empty());
  CHECK_FALSE(m->done());
  // The actor restarts before its checkpoint (a new epoch): everything unacknowledged again.
  c.epoch = "e2";
  CHECK(ids_of(m->collect(c, at(60100)).trajectories) == all);
  // Acknowledged (durable at the actor): forgotten, and the job is done. Twice is harmless.
  c.ack = {"p0/0", "p0/1"};
  m->collect(c, at(60200));
  CHECK(m->counts().acked == 2);
  CHECK_FALSE(m->done());
  c.ack = all;
  CHECK(m->collect(c, at(60300)).trajectories.empty());
  CHECK(m->counts().acked == 4);
  CHECK(m->done());
  const std::string d = m->digest();
  m->collect(c, at(60400));
  CHECK(m->counts().acked == 4);
  CHECK(m->digest() == d);
}

TEST_CASE("manager state: repack moves trajectories only between rollouts of one version") {
  rollout::ManagerConfig cfg;
  cfg.mode = "sluice";
  cfg.tail = "drain";  // the tails wait for repack rather than continue on the newest version
  cfg.prompts = 16;
  cfg.group_size = 1;
  cfg.batch_trajectories = 8;
  cfg.ahead_batches = 2;
  cfg.prefetch = 0;
  cfg.repack = true;
  cfg.ramp_down_occupancy = 0.75;
  cfg.heartbeat_timeout_ms = 1000;
  // Every prompt is out by the time it plans: a freed rollout would have nothing to do, so the
  // cost model would move nothing (rollout/repack.hpp). This case is about versions: every move
  // that fits is made.
  cfg.repack_cost.weigh_cost = false;
  auto m = make_state(cfg);

  // a and b generate on version 1, c and d on version 2.
  FakeRollout a("a", 1), b("b", 1), c("c", 2), d("d", 2);
  m->published({1, 0});
  a.report(*m, at(0));
  b.report(*m, at(0));
  m->published({2, 0});
  c.report(*m, at(10));
  d.report(*m, at(10));
  for (auto* r : {&a, &b, &c, &d})
    REQUIRE(r->running.size() == 4);
  // Version 3 arrives: everyone holds it and drains what it runs (no new work).
  m->published({3, 0});
  int t = 20;
  for (auto* r : {&a, &b, &c, &d}) {
    r->staged = 3;
    r->step();
    CHECK(r->report(*m, at(t)).assign.empty());
  }
  // Their long tails: three of four finish on each.
  for (auto* r : {&a, &b, &c, &d}) {
    while (r->running.size() > 1)
      r->finish(r->running.begin()->first);
    r->report(*m, at(t += 10));
  }
  const std::uint64_t finished_before = m->counts().finished;
  CHECK(finished_before == 12);

  m->plan_repack();
  CHECK(m->counts().repack_moves == 2);  // one per version
  CHECK(m->counts().cross_version == 0);

  // The sources export, the destinations import; each landing rollout has the version that
  // generated what lands on it.
  std::map<std::string, std::string> landed;  // trajectory -> rollout
  for (int round = 0; round < 3; ++round) {
    for (auto* r : {&a, &b, &c, &d}) {
      rollout::ReportReply reply = r->report(*m, at(t += 10));
      for (const auto& s : reply.import) {
        landed[s.trajectory_id] = r->id;
        REQUIRE_FALSE(s.versions.empty());
        CHECK(s.versions.back() == r->version);
        CHECK(s.generated.size() == 1);  // it continues where it was
      }
    }
  }
  CHECK(landed.size() == 2);
  std::set<std::string> emptied;
  for (auto* r : {&a, &b, &c, &d}) {
    if (r->running.empty()) emptied.insert(r->id);
  }
  CHECK(emptied.size() == 2);
  CHECK((emptied.count("a") + emptied.count("b")) == 1);
  CHECK((emptied.count("c") + emptied.count("d")) == 1);

  // Everything finishes once, on the version it started on.
  for (auto* r : {&a, &b, &c, &d}) {
    for (const auto& [tid, s] : r->running) {
      CHECK(s.versions.size() == 1);
      CHECK(s.versions.front() == r->version);
    }
    r->finish_all();
    r->report(*m, at(t += 10));
  }
  CHECK(m->counts().finished == 16);
  CHECK(m->counts().duplicates == 0);
  CHECK(m->counts().mixed == 0);
  CHECK(m->counts().move_failures == 0);
}

namespace {

// Two or three rollouts of one version whose tails repack moves gather (the kv reference cases).
rollout::ManagerConfig kv_move_job() {
  rollout::ManagerConfig cfg;
  cfg.mode = "sluice";
  cfg.tail = "drain";
  cfg.prompts = 8;
  cfg.group_size = 1;
  cfg.batch_trajectories = 4;
  cfg.ahead_batches = 2;
  cfg.prefetch = 0;
  cfg.repack = true;
  cfg.ramp_down_occupancy = 0.75;
  cfg.heartbeat_timeout_ms = 1000;
  cfg.repack_cost.weigh_cost = false;
  return cfg;
}

// A KV reference as rollout `source` exports it (the manager never reads the bytes).
rollout::KvRef kv_ref_from(const std::string& source) {
  rollout::KvRef ref;
  ref.version = 1;
  ref.layers = 1;
  ref.width = 2;
  ref.positions = 1;
  ref.bytes = ref.shape_bytes();
  ref.region = "region";
  ref.source = source;
  return ref;
}

}  // namespace

// A repack move with a KV reference: the manager binds the reference to the move's destination,
// and drops one that names another source than its exporter (a member forging a reference to
// someone else's cache), so the destination re-prefills instead of reading it.
TEST_CASE("manager state: a kv reference is honoured only as issued, for its destination") {
  for (bool forged : {false, true}) {
    CAPTURE(forged);
    auto m = make_state(kv_move_job());
    FakeRollout a("a", 1), b("b", 1);
    m->published({1, 0});
    a.report(*m, at(0));
    b.report(*m, at(0));
    REQUIRE(a.running.size() == 4);
    REQUIRE(b.running.size() == 4);
    m->published({2, 0});
    int t = 10;
    for (auto* r : {&a, &b}) {
      r->staged = 2;
      r->step();
      r->report(*m, at(t));
    }
    for (auto* r : {&a, &b}) {
      while (r->running.size() > 1)
        r->finish(r->running.begin()->first);
      r->report(*m, at(t += 10));
    }
    m->plan_repack();
    REQUIRE(m->counts().repack_moves == 1);

    std::string source;
    std::vector<SequenceState> imported;
    for (int round = 0; round < 3; ++round) {
      for (auto* r : {&a, &b}) {
        rollout::ReportReply reply = r->report(*m, at(t += 10));
        for (const auto& st : reply.import)
          imported.push_back(st);
        for (auto& st : r->exported) {
          source = r->id;
          st.kv_ref = kv_ref_from(forged ? std::string("c") : r->id);
          st.kv_ref->destination = r->id;  // whatever the exporter writes here is overwritten
        }
      }
    }
    REQUIRE(imported.size() == 1);
    const std::string destination = source == "a" ? "b" : "a";
    if (forged) {
      CHECK_FALSE(imported[0].kv_ref.has_value());
      CHECK(m->counts().kv_refs_dropped == 1);
    } else {
      REQUIRE(imported[0].kv_ref.has_value());
      CHECK(imported[0].kv_ref->source == source);
      CHECK(imported[0].kv_ref->destination == destination);
      CHECK(m->counts().kv_refs_dropped == 0);
    }
  }
}

// A move whose destination changed version meanwhile: the exported state resumes elsewhere
// without its KV reference.
TEST_CASE("manager state: a failed move's state resumes without its kv reference") {
  auto m = make_state(kv_move_job());
  FakeRollout a("a", 1), b("b", 1), c("c", 1);
  c.capacity.max_sequences = 0;  // c holds version 1 but takes nothing until the move fails
  m->published({1, 0});
  a.report(*m, at(0));
  b.report(*m, at(0));
  c.report(*m, at(0));
  m->published({2, 0});
  int t = 10;
  for (auto* r : {&a, &b}) {
    r->staged = 2;
    r->step();
    r->report(*m, at(t));
    while (r->running.size() > 1)
      r->finish(r->running.begin()->first);
    r->report(*m, at(t += 10));
  }
  m->plan_repack();
  REQUIRE(m->counts().repack_moves == 1);
  // The source learns of its move; its destination goes silent before the state arrives.
  FakeRollout* src = nullptr;
  for (int round = 0; round < 2 && src == nullptr; ++round) {
    for (auto* r : {&a, &b}) {
      r->report(*m, at(t += 10));
      if (!r->exported.empty()) {
        src = r;
        break;
      }
    }
  }
  REQUIRE(src != nullptr);
  // Its destination moves on to a newer version before the state arrives.
  FakeRollout* dst = src == &a ? &b : &a;
  m->published({3, 0});
  dst->version = 3;
  dst->staged = 3;
  dst->report(*m, at(t += 10));
  for (auto& st : src->exported) {
    st.kv_ref = kv_ref_from(src->id);
  }
  src->report(*m, at(t += 10));
  CHECK(m->counts().move_failures >= 1);
  CHECK(m->counts().kv_refs_dropped >= 1);
  // Wherever it resumes, it comes without a reference.
  c.capacity.max_sequences = 8;
  bool resumed = false;
  for (int round = 0; round < 3; ++round) {
    for (auto* r : {src, &c}) {
      rollout::ReportReply reply = r->report(*m, at(t += 10));
      for (const auto& st : reply.import) {
        resumed = true;
        CHECK_FALSE(st.kv_ref.has_value());
      }
    }
  }
  CHECK(resumed);
}

TEST_CASE("manager state: a refused report changes nothing") {
  auto m = make_state(small_job());
  m->published({1, 0});
  FakeRollout a("a");
  a.report(*m, at(0));
  const std::string before = m->digest();
  rollout::ReportRequest q;
  q.id = "a";
  q.version = 1;
  q.queued = {"p9/0"};  // never released
  CHECK_FALSE(m->check_report(q).is_ok());
  q.queued = {"p0/7"};  // beyond the group
  CHECK_FALSE(m->check_report(q).is_ok());
  CHECK(m->digest() == before);
}

TEST_CASE("manager state: versions a rollout is told to load never go backwards") {
  for (const char* mode : {"sync", "one-step-off", "stream", "partial-rollout", "sluice"}) {
    CAPTURE(mode);
    rollout::ManagerConfig cfg = small_job();
    cfg.mode = mode;
    cfg.prompts = 8;
    auto m = make_state(cfg);
    FakeRollout a("a", 0), b("b", 0);
    std::map<std::string, std::uint64_t> loaded;
    int t = 0;
    for (std::uint64_t v = 1; v <= 4; ++v) {
      m->published({v, 2 * v});
      for (int round = 0; round < 4; ++round) {
        for (auto* r : {&a, &b}) {
          rollout::ReportReply reply = r->report(*m, at(t += 10));
          CHECK(reply.latest == v);
          r->staged = std::max(r->staged, reply.latest);  // pulled in the background
          if (reply.load > 0) {
            CHECK(reply.load >= r->version);
            CHECK(reply.load <= v);
            r->version = reply.load;
          }
          r->step();
          if (!r->running.empty()) r->finish(r->running.begin()->first);
        }
      }
    }
    // Whatever finished was generated by versions in increasing order, and is delivered once.
    rollout::CollectRequest c;
    c.epoch = "e1";
    std::set<std::string> seen;
    for (const auto& tr : m->collect(c, at(t += 10)).trajectories) {
      CHECK(seen.insert(tr.id).second);
      CHECK(std::is_sorted(tr.versions.begin(), tr.versions.end()));
      CHECK(std::adjacent_find(tr.versions.begin(), tr.versions.end()) == tr.versions.end());
    }
    CHECK(seen.size() == m->counts().finished);
    CHECK(m->counts().finished > 0);
    CHECK(m->counts().duplicates == 0);
  }
}

// ---- Admission and the tail (rollout/mode_policy.hpp: Admission, TailPolicy).

namespace {

// 16 prompts of 2, a batch of 4 (one batch ahead under the budget), one rollout of 4 slots.
rollout::ManagerConfig tail_job(const std::string& mode, const std::string& admission) {
  rollout::ManagerConfig cfg = small_job();
  cfg.mode = mode;
  cfg.prompts = 16;
  cfg.ahead_batches = 1;
  cfg.admission = admission;
  return cfg;
}

double free_slot_s(const ManagerState& m, const char* cause) {
  return m.status(at(0)).fields.at("free_slot_s").at(cause).get<double>();
}

}  // namespace

TEST_CASE("manager state: continuous admission fills free slots while a batch's tail runs") {
  for (const std::string admission : {"budget", "continuous"}) {
    CAPTURE(admission);
    auto m = make_state(tail_job("sluice", admission));
    m->published({1, 0});
    FakeRollout a("a");
    a.report(*m, at(0));
    REQUIRE(a.running.size() == 4);
    // Three finish; the fourth is the batch's long tail.
    a.step();
    for (int k = 0; k < 3; ++k)
      a.finish(a.running.begin()->first);
    m->sample_free_slots(at(50));
    rollout::ReportReply r = a.report(*m, at(100));
    m->sample_free_slots(at(1100));  // a second with the slots as they are now
    if (admission == "budget") {
      // The released batch is not consumed: the three free slots wait behind the tail.
      CHECK(r.assign.empty());
      CHECK(free_slot_s(*m, "budget") > 2.9);
    } else {
      // Nothing in flight counts: every free slot takes new work at once.
      CHECK(r.assign.size() == 3);
      CHECK(free_slot_s(*m, "budget") == 0);
      CHECK(free_slot_s(*m, "backlog") == 0);
    }
  }
}

TEST_CASE("manager state: continuous admission pauses only while the actor's queue is full") {
  rollout::ManagerConfig cfg = tail_job("sluice", "continuous");
  cfg.backlog_batches = 1;  // 4 trajectories of complete groups not taken pause it
  auto m = make_state(cfg);
  m->published({1, 0});
  FakeRollout a("a");
  a.capacity.max_sequences = 8;
  a.report(*m, at(0));
  REQUIRE(a.running.size() == 8);
  // One member of a group finishes: no complete group, nothing waits for the actor.
  a.step();
  a.finish("p0/0");
  CHECK(a.report(*m, at(10)).assign.size() == 1);
  // The rest finish: 8 trajectories of complete groups (4 groups) wait for the actor. Only the
  // other member of the group already released (p4) is handed out; no new group is.
  for (const std::string id : {"p0/1", "p1/0", "p1/1", "p2/0", "p2/1", "p3/0", "p3/1"})
    a.finish(id);
  rollout::ReportReply r = a.report(*m, at(20));
  REQUIRE(r.assign.size() == 1);
  CHECK(r.assign[0].trajectory_id == "p4/1");
  CHECK(a.report(*m, at(30)).assign.empty());
  m->sample_free_slots(at(1030));
  CHECK(free_slot_s(*m, "backlog") > 5.9);  // 6 free slots for a second
  CHECK(free_slot_s(*m, "budget") == 0);
  // The actor takes them: admission resumes.
  rollout::CollectRequest c;
  c.epoch = "e1";
  c.max = 16;
  CHECK(m->collect(c, at(1040)).trajectories.size() == 8);
  c.consumed = 8;
  m->collect(c, at(1050));
  CHECK(a.report(*m, at(1060)).assign.size() == 6);
}

TEST_CASE("manager state: admission and tail settings are checked") {
  rollout::ManagerConfig cfg = small_job();
  cfg.mode = "sync";
  cfg.admission = "continuous";
  CHECK(cfg.validate().message().find("not possible in sync") != std::string::npos);
  cfg.mode = "one-step-off";
  CHECK_FALSE(cfg.validate().is_ok());
  cfg.mode = "partial-rollout";
  CHECK(cfg.validate().is_ok());
  cfg.admission = "eager";
  CHECK(cfg.validate().message().find("unknown admission 'eager'") != std::string::npos);
  cfg.admission = "";
  cfg.tail = "wait";
  CHECK(cfg.validate().message().find("unknown tail 'wait'") != std::string::npos);
  cfg.tail = "auto";
  cfg.backlog_batches = 0;
  CHECK(cfg.validate().message().find("backlog_batches") != std::string::npos);
  // partial-rollout keeps the budget unless told otherwise: its tail holds the free slots.
  auto m = make_state(tail_job("partial-rollout", ""));
  m->published({1, 0});
  FakeRollout a("a");
  a.report(*m, at(0));
  a.step();
  for (int k = 0; k < 3; ++k)
    a.finish(a.running.begin()->first);
  CHECK(a.report(*m, at(100)).assign.empty());
}

TEST_CASE("manager state: a tail drains, or continues on the newest version") {
  for (const std::string tail : {"drain", "continue"}) {
    CAPTURE(tail);
    rollout::ManagerConfig cfg = tail_job("sluice", "continuous");
    cfg.tail = tail;
    auto m = make_state(cfg);
    m->published({1, 0});
    FakeRollout a("a");
    a.report(*m, at(0));
    REQUIRE(a.running.size() == 4);
    a.step();
    m->published({2, 0});
    a.staged = 2;  // pulled in the background
    rollout::ReportReply r = a.report(*m, at(100));
    CHECK(r.assign.empty());
    if (tail == "drain") {
      CHECK(r.load == 0);  // it waits for its version-1 trajectories to finish
      continue;
    }
    CHECK(r.load == 2);
    CHECK(r.allow_active);
    CHECK_FALSE(r.unqueue);
    a.version = 2;
    a.step();
    a.finish_all();
    a.report(*m, at(200));
    // Each records both versions; its staleness counts from the oldest.
    CHECK(m->counts().mixed == 4);
    rollout::CollectRequest c;
    c.epoch = "e1";
    for (const auto& t : m->collect(c, at(300)).trajectories) {
      CHECK(t.version == 1);
      CHECK(t.versions == std::vector<std::uint64_t>{1, 2});
    }
  }
}

TEST_CASE("manager state: tail auto drains while busy, continues once ramped down alone") {
  rollout::ManagerConfig cfg = tail_job("sluice", "continuous");
  cfg.tail = "auto";
  cfg.ramp_down_occupancy = 0.5;
  auto m = make_state(cfg);
  m->published({1, 0});
  FakeRollout a("a");
  a.report(*m, at(0));
  a.step();
  m->published({2, 0});
  a.staged = 2;
  a.report(*m, at(10));
  m->plan_repack();  // 4 of 4 slots busy: it drains
  CHECK(a.report(*m, at(20)).load == 0);
  a.finish(a.running.begin()->first);
  a.report(*m, at(30));
  m->plan_repack();  // 3 of 4: still above the ramp-down level
  CHECK(a.report(*m, at(40)).load == 0);
  a.finish(a.running.begin()->first);
  a.finish(a.running.begin()->first);
  a.report(*m, at(50));
  m->plan_repack();  // 1 of 4, and no other rollout of version 1 to repack onto: it continues
  rollout::ReportReply r = a.report(*m, at(60));
  CHECK(r.load == 2);
  CHECK(r.allow_active);
}

// ---- Ownership: a report counts only for what the manager assigned to that rollout.

TEST_CASE("manager state: a finish reported for another rollout's trajectory is refused") {
  auto m = make_state(small_job());
  m->published({1, 0});
  FakeRollout a("a"), b("b");
  a.report(*m, at(0));
  REQUIRE(a.running.size() == 4);
  b.report(*m, at(10));
  a.step();
  a.report(*m, at(15));
  const std::string victim = a.running.begin()->first;
  // b claims a's trajectory as finished (with made-up tokens): nothing is counted.
  b.running[victim] = a.running.at(victim);
  b.running[victim].generated = {1, 2, 3};
  b.running[victim].logprobs = {-0.1f, -0.1f, -0.1f};
  b.finish(victim);
  b.report(*m, at(20));
  CHECK(m->counts().finished == 0);
  CHECK(m->counts().foreign == 1);
  CHECK(m->where(victim)->state == TrajState::kActive);
  CHECK(m->where(victim)->rollout == "a");
  rollout::CollectRequest c;
  c.epoch = "e1";
  CHECK(m->collect(c, at(30)).trajectories.empty());
  // a's own finish counts, once, with a's tokens.
  a.finish(victim);
  a.report(*m, at(40));
  CHECK(m->counts().finished == 1);
  CHECK(m->counts().duplicates == 0);
  auto got = m->collect(c, at(50)).trajectories;
  REQUIRE(got.size() == 1);
  CHECK(got[0].id == victim);
  CHECK(got[0].response_tokens.size() == 1);  // a's one step, not the three made up
}

TEST_CASE("manager state: a rollout naming another's running trajectory does not take it over") {
  auto m = make_state(small_job());
  m->published({1, 0});
  FakeRollout a("a"), b("b");
  a.report(*m, at(0));
  const std::string victim = a.running.begin()->first;
  b.running[victim] = a.running.at(victim);
  rollout::ReportReply r = b.report(*m, at(10));
  CHECK(m->where(victim)->rollout == "a");
  CHECK(m->counts().foreign == 1);
  // b is told to stop its copy; its abandoned copy is dropped quietly.
  REQUIRE(r.abandon.size() == 1);
  CHECK(r.abandon[0] == victim);
  rl::Trajectory t = rollout::to_trajectory(b.running.at(victim), 0.0, "b");
  t.abandoned = true;
  b.running.erase(victim);
  b.finished.push_back(t);
  b.report(*m, at(20));
  CHECK(m->counts().finished == 0);
  CHECK(m->counts().abandoned == 0);
  // a still holds it and finishes it.
  a.finish(victim);
  a.report(*m, at(30));
  CHECK(m->counts().finished == 1);
}

// ---- Bounded state: what the actor acknowledged is erased.

TEST_CASE("manager state: acknowledged trajectories are erased, a late copy is a duplicate") {
  rollout::ManagerConfig cfg = small_job();
  cfg.prompts = 40;
  cfg.admission = "continuous";
  auto m = make_state(cfg);
  m->published({1, 0});
  FakeRollout a("a");
  a.capacity.max_sequences = 8;
  rollout::CollectRequest c;
  c.epoch = "e1";
  std::vector<rl::Trajectory> kept;  // a copy of every finished trajectory, re-reported later
  std::size_t most_tracked = 0;
  for (int t = 0; t < 4000 && !m->done(); t += 10) {
    a.report(*m, at(t));
    a.step();
    for (const auto& [tid, s] : a.running)
      kept.push_back(rollout::to_trajectory(s, 1.0, "a"));
    a.finish_all();
    a.report(*m, at(t + 5));
    auto got = m->collect(c, at(t + 6)).trajectories;
    c.ack = ids_of(got);
    c.consumed += got.size();
    most_tracked = std::max(most_tracked, m->tracked());
  }
  m->collect(c, at(5000));
  REQUIRE(m->done());
  CHECK(m->counts().finished == 80);
  CHECK(m->counts().acked == 80);
  // Nothing of the job's history is kept: the record is a floor.
  CHECK(m->tracked() == 0);
  CHECK(m->done_record().floor() == 40);
  CHECK(m->done_record().above() == 0);
  CHECK(most_tracked <= 2 * (8 + cfg.prefetch) + cfg.batch_trajectories);
  // Every one of them reported again: each a duplicate, none counted again.
  a.finished = kept;
  a.report(*m, at(5100));
  CHECK(m->counts().finished == 80);
  CHECK(m->counts().duplicates == kept.size());
  CHECK(m->where("p3/1")->state == TrajState::kFinished);
  CHECK(m->collect(c, at(5200)).trajectories.empty());
}

// ---- A partial state whose version nobody runs any more.

TEST_CASE("manager state: an orphaned state continues on a newer rollout, or restarts if refused") {
  rollout::ManagerConfig cfg = small_job();
  cfg.tail = "continue";
  auto m = make_state(cfg);
  m->published({1, 0});
  FakeRollout a("a", 1);
  a.report(*m, at(0));
  REQUIRE(a.running.size() == 4);
  a.step();
  for (const auto& [tid, s] : a.running)
    a.stream(tid);
  a.report(*m, at(10));
  m->published({2, 0});
  FakeRollout b("b", 2);
  b.capacity.max_sequences = 8;
  b.report(*m, at(20));
  b.report(*m, at(1050));
  m->check_heartbeats(at(1100));  // a is dead; its states were generated by version 1
  REQUIRE(m->counts().dead == 1);

  // b runs version 2 and nobody runs 1: the states go to b, marked to continue there.
  rollout::ReportReply r = b.report(*m, at(1110));
  REQUIRE(r.import.size() == 4);
  std::vector<std::string> imported;
  for (const auto& s : r.import) {
    CHECK(s.versions == std::vector<std::uint64_t>{1});
    imported.push_back(s.trajectory_id);
  }
  std::sort(imported.begin(), imported.end());
  std::vector<std::string> marked = r.continue_ids;
  std::sort(marked.begin(), marked.end());
  CHECK(marked == imported);

  // A rollout that refuses them anyway (an older build): after kMaxFailedMoves refusals each
  // restarts from its prompt instead of circling.
  std::vector<SequenceState> states = r.import;
  b.running.clear();
  for (std::uint32_t round = 0; round < rollout::kMaxFailedMoves; ++round) {
    rollout::ReportRequest q;
    q.id = "b";
    q.incarnation = "0000000000000001";
    q.version = 2;
    q.staged = 2;
    q.capacity = b.capacity;
    q.refused = states;
    REQUIRE(m->check_report(q).is_ok());
    rollout::ReportReply again = m->report(std::move(q), at(1200 + 10 * static_cast<int>(round)));
    if (round + 1 < rollout::kMaxFailedMoves) {
      CHECK(again.import.size() == 4);
      states = again.import;
    } else {
      CHECK(again.import.empty());
      REQUIRE(again.assign.size() == 4);
      for (const auto& s : again.assign)
        CHECK(s.generated.empty());
    }
  }
  CHECK(m->counts().moves_given_up == 4);
}

// ---- Recovery after a restart ends once every rollout live before it has reported.

TEST_CASE(
    "manager state: after a restart, work nobody names goes out once every rollout reported") {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("sluice-recovery-" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  rollout::ManagerConfig cfg = small_job();
  cfg.state_path = path.string();
  auto open_state = [&](Clock::time_point now) {
    auto db = rollout::ManagerDb::open(cfg.state_path);
    REQUIRE(db.is_ok());
    auto s = ManagerState::create(cfg, std::move(db).value(), now);
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    return std::move(s).value();
  };
  FakeRollout a("a"), b("b");
  {
    auto m = open_state(at(0));
    m->published({1, 0});
    REQUIRE(m->commit().is_ok());
    a.report(*m, at(0));
    REQUIRE(m->commit().is_ok());
    b.report(*m, at(5));
    REQUIRE(m->commit().is_ok());
    REQUIRE(a.running.size() == 4);
  }  // killed
  // a lost one of its trajectories with the crash (say, a reply it never saw).
  const std::string lost = a.running.begin()->first;
  a.running.erase(lost);
  auto m = open_state(at(100));
  a.report(*m, at(110));
  CHECK_FALSE(m->where(lost).has_value());  // still waiting: b has not reported
  rollout::ReportReply r = b.report(*m, at(120));
  // b was the last rollout to report: the lost trajectory restarts now, not after the grace
  // period (2 x heartbeat_timeout_ms), and b takes it.
  REQUIRE(r.assign.size() == 1);
  CHECK(r.assign[0].trajectory_id == lost);
  CHECK(m->counts().recovery_restarted == 1);
  CHECK(m->counts().recovered == 3);
  m.reset();
  std::filesystem::remove(path);
}

// ---- A manager that stalls (stopped, starved) did not hear its rollouts meanwhile.

TEST_CASE(
    "manager state: heartbeat checks this far apart are a stall, and their interval is checked") {
  rollout::ManagerConfig cfg = small_job();  // heartbeat_timeout_ms 1000
  CHECK(cfg.stall_ms() == 250);              // a quarter of the time-out
  cfg.heartbeat_check_ms = 200;
  CHECK(cfg.stall_ms() == 400);  // twice the checks' interval
  cfg.heartbeat_check_ms = 0;
  CHECK(cfg.validate().message().find("heartbeat_check_ms") != std::string::npos);
  cfg.heartbeat_check_ms = 1001;
  CHECK(cfg.validate().message().find("heartbeat_check_ms") != std::string::npos);
}

TEST_CASE(
    "manager state: a manager stalled for twice the heartbeat time-out declares nobody dead") {
  auto m = make_state(small_job());  // heartbeat_timeout_ms 1000
  m->published({1, 0});
  FakeRollout a("a"), b("b");
  a.report(*m, at(0));
  b.report(*m, at(10));
  REQUIRE(a.running.size() == 4);
  for (int t = 100; t <= 500; t += 100) {
    a.report(*m, at(t));
    b.report(*m, at(t));
    m->check_heartbeats(at(t));
  }
  // The manager stops for 2 s, twice the time-out: the reports the rollouts sent meanwhile
  // expired and were dropped unread (wire/messaging.cpp), so it heard nothing from them. Its
  // next heartbeat check is the first thing it does when it runs again.
  m->check_heartbeats(at(2500));
  CHECK(m->counts().dead == 0);
  CHECK(m->counts().reclaimed == 0);
  CHECK(m->counts().stalls == 1);
  for (const auto& tid : a.received) {
    REQUIRE(m->where(tid).has_value());
    CHECK(m->where(tid)->state == TrajState::kActive);
    CHECK(m->where(tid)->rollout == "a");
  }
  // Their next reports are served as ever: nothing to rejoin, nothing handed out again.
  CHECK_FALSE(a.report(*m, at(2600)).rejoin);
  CHECK_FALSE(b.report(*m, at(2600)).rejoin);
  CHECK(a.received.size() == 4);
  CHECK(b.received.empty());

  // A rollout that stays silent after the stall is still found dead, a time-out after the stall
  // at the latest: here b, while a keeps reporting.
  for (int t = 2600; t <= 3600; t += 100) {
    a.report(*m, at(t));
    m->check_heartbeats(at(t));
  }
  CHECK(m->counts().dead == 0);  // b silent 1000 ms: not yet
  a.report(*m, at(3700));
  m->check_heartbeats(at(3700));
  CHECK(m->counts().dead == 1);
  CHECK(m->counts().stalls == 1);  // checks 100 ms apart are no stall
  CHECK(b.report(*m, at(3750)).rejoin);
}

TEST_CASE("manager state: a rollout declared dead that rejoins before the commit stays recorded") {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("sluice-rejoin-" + std::to_string(::getpid()) + ".db");
  for (const char* ext : {"", "-wal", "-shm"})
    std::filesystem::remove(path.string() + ext);
  rollout::ManagerConfig cfg = small_job();
  cfg.state_path = path.string();
  {
    auto db = rollout::ManagerDb::open(cfg.state_path);
    REQUIRE(db.is_ok());
    auto made = ManagerState::create(cfg, std::move(db).value(), at(0));
    REQUIRE(made.is_ok());
    auto m = std::move(made).value();
    m->published({1, 0});
    FakeRollout a("a");
    a.report(*m, at(0));
    REQUIRE(m->commit().is_ok());
    // a falls silent and is declared dead; before the next commit (a failed one is retried with
    // the changes of the requests after it) it comes back, is told to rejoin, and joins afresh.
    m->check_heartbeats(at(1500));
    REQUIRE(m->counts().dead == 1);
    CHECK(a.report(*m, at(1600)).rejoin);
    CHECK_FALSE(a.report(*m, at(1700)).rejoin);
    REQUIRE(m->commit().is_ok());
  }
  // The file says a is live: a manager restarted on it waits for a's report.
  std::vector<std::string> recorded;
  {
    auto db = rollout::ManagerDb::open(cfg.state_path);
    REQUIRE(db.is_ok());
    auto snap = (*db)->load();
    REQUIRE(snap.is_ok());
    recorded = snap->rollouts;
  }
  CHECK(recorded == std::vector<std::string>{"a"});
  for (const char* ext : {"", "-wal", "-shm"})
    std::filesystem::remove(path.string() + ext);
}
