// The fleet harness (tests/rollout/fleet_harness.hpp): the real manager state, worker decisions
// and simulated engine, in synthetic time.
#include "tests/rollout/fleet_harness.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "rollout/manager_db.hpp"

namespace sluice::test {

using rollout::Clock;
namespace fs = std::filesystem;

namespace {

constexpr double kTickMs = 1.0;         // the harness's time step
constexpr double kHeartbeatTick = 100;  // the manager's heartbeat checks (heartbeat_check_ms)
constexpr double kCollectMs = 20;       // the actor asks for trajectories this often

}  // namespace

// A report on its way to the manager (or queued there), with what the rollout waits for.
struct FleetHarness::Report {
  std::uint32_t rollout = 0;
  std::uint64_t seq = 0;  // the rollout's request number: a late reply to an old one is dropped
  double deadline_ms = 0;
  rollout::ReportRequest q;
};

// A rollout process: the real WorkerState and SimEngine, driven as rollout/worker.cpp drives them.
struct FleetHarness::Rollout {
  std::uint32_t index = 0;
  std::string id;
  std::uint32_t incarnation = 0;
  bool alive = true;
  double back_at = 0;  // when a killed one's new process starts
  rollout::RolloutConfig cfg;
  std::optional<rollout::WorkerState> ws;
  std::unique_ptr<rollout::SimEngine> engine;
  std::deque<rollout::SequenceState> queue;
  std::vector<rl::Trajectory> finished;
  std::vector<rollout::SequenceState> exported, refused, returned;
  std::uint64_t reports = 0;
  double engine_free_at = 0;
  // The report waiting for its reply: its number, when it times out, and the reply once it came.
  std::uint64_t waiting = 0;
  double timeout_at = 0;
  std::size_t sent_finished = 0;
  std::optional<rollout::ReportReply> reply;
};

FleetHarness::FleetHarness(FleetOptions o) : o_(std::move(o)) {
  dir_ = fs::temp_directory_path() / fmt::format("sluice-fleet-harness-{}-{}", ::getpid(),
                                                 reinterpret_cast<std::uintptr_t>(this));
  fs::create_directories(dir_);
  for (std::uint32_t i = 0; i < o_.rollouts; ++i) {
    auto r = std::make_unique<Rollout>();
    r->index = i;
    r->id = fmt::format("rollout-{}", i);
    r->cfg.rollout_id = r->id;
    r->cfg.report_ms = o_.report_ms;
    r->cfg.report_timeout_ms = o_.report_timeout_ms;
    r->cfg.report_retry_ms = o_.report_retry_ms;
    r->cfg.sim.max_sequences = o_.max_sequences;
    r->cfg.sim.t0_ms = 2.0;
    r->cfg.sim.t1_ms = 0.2;
    r->cfg.sim.lengths.median = 16;
    r->cfg.sim.lengths.p99 = 160;
    r->cfg.sim.lengths.max_len = 256;
    r->alive = false;
    r->back_at = 0;
    rollouts_.push_back(std::move(r));
  }
  start_manager();
}

FleetHarness::~FleetHarness() {
  mgr_.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Clock::time_point FleetHarness::tp() const {
  return Clock::time_point{} + std::chrono::hours(1) +
         std::chrono::microseconds(static_cast<std::int64_t>(now_ * 1000));
}

void FleetHarness::start_manager() {
  rollout::ManagerConfig c;
  c.mode = "sluice";
  c.admission = o_.admission;
  c.tail = o_.tail;
  c.prompts = o_.prompts;
  c.group_size = o_.group_size;
  c.batch_trajectories = o_.batch;
  c.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
  c.heartbeat_check_ms = static_cast<std::uint64_t>(kHeartbeatTick);
  c.repack = o_.repack;
  c.prompt_tokens = 8;
  c.max_new_tokens = 256;
  c.state_path = (dir_ / "manager.db").string();
  REQUIRE(c.validate().is_ok());
  auto db = rollout::ManagerDb::open(c.state_path);
  REQUIRE(db.is_ok());
  auto m = rollout::ManagerState::create(std::move(c), std::move(db).value(), tp());
  REQUIRE(m.is_ok());
  mgr_ = std::move(m).value();
  manager_back_at_ = -1;
  // The actor publishes again on its next collect; the manager restored the latest version.
}

void FleetHarness::send_report(Rollout& r) {
  auto rep = std::make_unique<Report>();
  rollout::ReportRequest& q = rep->q;
  q.id = r.id;
  q.incarnation = fmt::format("{}.{}", r.id, r.incarnation);
  q.version = r.engine->version();
  q.staged = std::max(version_, r.engine->version());  // pulls are instant here
  q.capacity = r.engine->capacity();
  for (const auto& a : r.engine->active_sequences())
    q.active.push_back({a.trajectory_id, a.kv_tokens});
  for (const auto& s : r.queue)
    q.queued.push_back(s.trajectory_id);
  r.sent_finished = rollout::fitting_prefix(r.finished);
  q.finished.assign(r.finished.begin(),
                    r.finished.begin() + static_cast<std::ptrdiff_t>(r.sent_finished));
  q.exported = r.exported;
  q.refused = r.refused;
  q.returned = r.returned;
  if (r.cfg.partial_every > 0 && r.reports % r.cfg.partial_every == 0)
    q.partial = r.engine->snapshot();
  ++r.reports;
  r.waiting = r.reports;
  r.timeout_at = now_ + static_cast<double>(r.cfg.effective_report_timeout_ms());
  r.reply.reset();
  rep->rollout = r.index;
  rep->seq = r.reports;
  rep->deadline_ms = r.timeout_at;
  // A manager that is down takes nothing, unless the transport queues for it.
  if (manager_back_at_ >= 0 && !o_.queue_while_down) return;
  inbox_.push_back(std::move(rep));
}

void FleetHarness::apply_reply(Rollout& r, rollout::ReportReply reply) {
  r.finished.erase(r.finished.begin(),
                   r.finished.begin() + static_cast<std::ptrdiff_t>(r.sent_finished));
  r.exported.clear();
  r.refused.clear();
  r.returned.clear();
  if (!r.ws->take_reply(reply)) {
    ++dead_;
    r.engine->export_all();
    r.queue.clear();
    return;
  }
  if (reply.unqueue) {
    for (auto& s : r.queue)
      r.returned.push_back(std::move(s));
    r.queue.clear();
  }
  auto abandon = [&](const std::string& id) {
    auto q = std::find_if(r.queue.begin(), r.queue.end(),
                          [&](const rollout::SequenceState& s) { return s.trajectory_id == id; });
    rollout::SequenceState s;
    if (q != r.queue.end()) {
      s = std::move(*q);
      r.queue.erase(q);
    } else {
      auto e = r.engine->export_sequence(id);
      if (!e.is_ok()) return;
      s = std::move(e).value();
    }
    rl::Trajectory t = rollout::to_trajectory(s, 0.0, r.id);
    t.abandoned = true;
    r.finished.push_back(std::move(t));
  };
  for (const auto& id : reply.abandon)
    abandon(id);
  for (const auto& id : rollout::WorkerState::stale(r.engine->active_sequences(),
                                                    r.engine->version(), r.ws->abandon_before()))
    abandon(id);
  for (const auto& id : reply.export_ids) {
    auto s = r.engine->export_sequence(id);
    if (s.is_ok()) r.exported.push_back(std::move(s).value());
  }
  for (auto& s : reply.import) {
    const std::uint64_t v = s.versions.empty() ? r.engine->version() : s.versions.back();
    const bool continues = std::find(reply.continue_ids.begin(), reply.continue_ids.end(),
                                     s.trajectory_id) != reply.continue_ids.end();
    if (!rollout::WorkerState::admits_import(v, r.engine->version(), continues,
                                             r.engine->can_admit(s.kv_tokens()))) {
      s.kv.reset();
      s.kv_ref.reset();
      r.refused.push_back(std::move(s));
      continue;
    }
    REQUIRE(r.engine->admit(std::move(s)).is_ok());
  }
  for (auto& s : reply.assign)
    r.queue.push_back(std::move(s));
  if (reply.load > r.engine->version()) {
    // Refused while sequences run without allow_active: the manager asks again.
    r.engine->load_weights(reply.load, nullptr, 0, reply.allow_active).ignore();
  }
}

void FleetHarness::step_rollout(Rollout& r) {
  if (!r.alive) {
    if (now_ < r.back_at) return;
    // A new process: nothing of the old one's work survives.
    r.alive = true;
    ++r.incarnation;
    r.ws.emplace(r.cfg, tp());
    auto e = rollout::SimEngine::create(r.cfg.sim);
    REQUIRE(e.is_ok());
    r.engine = std::move(e).value();
    r.queue.clear();
    r.finished.clear();
    r.exported.clear();
    r.refused.clear();
    r.returned.clear();
    r.waiting = 0;
    r.reports = 0;
    r.engine_free_at = now_;
  }
  if (r.waiting != 0) {
    // The worker blocks on its report: the engine waits with it.
    if (r.reply) {
      r.waiting = 0;
      r.ws->report_answered(tp());
      rollout::ReportReply reply = std::move(*r.reply);
      r.reply.reset();
      apply_reply(r, std::move(reply));
      r.ws->schedule_report(tp());
    } else if (now_ >= r.timeout_at) {
      r.waiting = 0;
      REQUIRE(r.ws->report_failed(tp(), nullptr).is_ok());
      r.ws->schedule_report(tp());
    } else {
      return;
    }
  }
  if (r.ws->report_due(tp())) {
    send_report(r);
    return;
  }
  if (now_ < r.engine_free_at) return;
  if (r.ws->may_admit(r.finished.size())) {
    while (!r.queue.empty() && r.engine->can_admit(r.queue.front().kv_tokens())) {
      REQUIRE(r.engine->admit(std::move(r.queue.front())).is_ok());
      r.queue.pop_front();
    }
  }
  if (r.engine->active() == 0) return;
  rollout::StepResult res = r.engine->step();
  r.engine_free_at = now_ + res.wait_s * 1000.0;
  for (auto& s : res.finished)
    r.finished.push_back(rollout::to_trajectory(s, 1.0, r.id));
  if (!res.finished.empty() && r.engine->active() == 0 && r.queue.empty())
    r.ws->report_at_once(tp());
}

bool FleetHarness::manager_stopped() const {
  for (const auto& s : o_.manager_stalls) {
    if (now_ >= s.at_ms && now_ < s.at_ms + s.for_ms) return true;
  }
  return false;
}

void FleetHarness::step_manager() {
  if (manager_stopped()) return;
  if (manager_back_at_ >= 0) {
    if (now_ < manager_back_at_) return;
    start_manager();
    manager_busy_until_ = now_;
  }
  for (double t : o_.manager_restarts) {
    if (t <= now_ && t > now_ - kTickMs) {
      // kill -9: what was not committed is gone; replies not sent are lost.
      mgr_.reset();
      manager_back_at_ = now_ + o_.down_ms;
      if (!o_.queue_while_down) inbox_.clear();
      return;
    }
  }
  if (now_ >= next_tick_) {
    mgr_->check_heartbeats(tp());
    mgr_->sample_free_slots(tp());
    REQUIRE(mgr_->commit().is_ok());
    next_tick_ = now_ + kHeartbeatTick;
  }
  if (now_ >= next_repack_) {
    mgr_->plan_repack();
    next_repack_ = now_ + 200;
  }
  // One report at a time, each costing service_ms.
  while (!inbox_.empty() && manager_busy_until_ <= now_) {
    std::unique_ptr<Report> rep = std::move(inbox_.front());
    inbox_.pop_front();
    if (o_.drop_expired && now_ > rep->deadline_ms) {
      ++expired_;
      continue;
    }
    Rollout& r = *rollouts_[rep->rollout];
    const std::string incarnation = rep->q.incarnation;
    if (!mgr_->check_report(rep->q).is_ok()) continue;
    rollout::ReportReply reply = mgr_->report(std::move(rep->q), tp());
    REQUIRE(mgr_->commit().is_ok());
    manager_busy_until_ = now_ + o_.service_ms;
    // The reply reaches the rollout only if that process still waits for this very report.
    if (r.alive && r.waiting == rep->seq &&
        incarnation == fmt::format("{}.{}", r.id, r.incarnation))
      r.reply = std::move(reply);
  }
}

void FleetHarness::step_actor() {
  if (manager_back_at_ >= 0 || manager_stopped() || now_ < next_collect_) return;
  next_collect_ = now_ + kCollectMs;
  rollout::CollectRequest q;
  q.ack = std::move(to_ack_);  // every step is checkpointed at once here
  to_ack_.clear();
  q.have = std::vector<std::string>{};
  q.consumed = consumed_;
  q.epoch = "actor-1";
  rollout::CollectReply reply = mgr_->collect(q, tp());
  REQUIRE(mgr_->commit().is_ok());
  for (const auto& t : reply.trajectories) {
    to_ack_.push_back(t.id);
    // The actor's buffer refuses what it has already; a second acknowledgement is harmless.
    if (!seen_.insert(t.id).second) continue;
    ++consumed_;
    ++trained_since_publish_;
  }
  if (trained_since_publish_ >= o_.batch) {
    trained_since_publish_ = 0;
    ++version_;
    rollout::PublishedRequest p;
    p.version = version_;
    p.consumed = consumed_;
    mgr_->published(p);
    REQUIRE(mgr_->commit().is_ok());
  } else if (mgr_->latest() < version_) {
    // A restarted manager learns the newest version from the actor's next publish.
    mgr_->published({version_, consumed_});
  }
}

FleetResult FleetHarness::run() {
  FleetResult out;
  for (; now_ < o_.end_ms; now_ += kTickMs) {
    for (const auto& k : o_.kills) {
      if (k.at_ms <= now_ && k.at_ms > now_ - kTickMs) {
        Rollout& r = *rollouts_.at(k.rollout);
        r.alive = false;
        r.back_at = now_ + o_.restart_ms;
        r.reply.reset();
        r.waiting = 0;
      }
    }
    step_manager();
    step_actor();
    for (auto& r : rollouts_)
      step_rollout(*r);
    if (manager_back_at_ < 0 && mgr_->done()) {
      out.done = true;
      break;
    }
  }
  out.end_ms = now_;
  out.consumed = consumed_;
  out.expired = expired_;
  out.declared_dead = dead_;
  if (mgr_) out.counts = mgr_->counts();
  return out;
}

}  // namespace sluice::test
