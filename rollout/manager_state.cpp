// The manager's state machine: lifecycle and durability, handing out work, failures, repack and
// the actor's side. A rollout's report is in manager_state_report.cpp; the prompt pool and the
// outbox to the actor are classes of their own (prompt_pool.*, manager_outbox.*).
#include <fmt/format.h>

#include <algorithm>

#include "core/log.hpp"
#include "rollout/manager_state.hpp"

namespace sluice::rollout {

namespace log = core::log;
using Millis = std::chrono::milliseconds;
using nlohmann::json;

namespace {

// A request may name a version this far above the newest the manager knows (one it has not heard
// of yet, say after a restart of the actor); beyond it, the request is refused as malformed.
constexpr std::uint64_t kVersionSlack = 1'000'000;

std::uint64_t last_version(const SequenceState& s) {
  return s.versions.empty() ? 0 : s.versions.back();
}

}  // namespace

ManagerState::ManagerState(ManagerConfig config, Mode mode, Admission admission, TailPolicy tail,
                           std::optional<rl::ArithmeticTask> task, Clock::time_point now)
    : m_finished_(core::process_metrics().counter("sluice_manager_trajectories_finished_total",
                                                  "trajectories finished by rollouts, each once")),
      m_acked_(core::process_metrics().counter("sluice_manager_trajectories_acked_total",
                                               "trajectories the actor acknowledged as durable")),
      m_duplicates_(
          core::process_metrics().counter("sluice_manager_duplicates_total",
                                          "finished trajectories reported again (counted once)")),
      m_latest_(core::process_metrics().gauge("sluice_manager_latest_version",
                                              "newest version published")),
      cfg_(std::move(config)),
      mode_(mode),
      tail_(tail),
      pool_(cfg_, mode, admission, std::move(task)),
      outbox_(Millis(cfg_.resend_ms)),
      done_(cfg_.group_size),
      started_(now),
      last_sample_(now) {}

core::Result<std::unique_ptr<ManagerState>> ManagerState::create(ManagerConfig config,
                                                                 std::unique_ptr<ManagerDb> db,
                                                                 Clock::time_point now) {
  SLUICE_ASSIGN_OR_RETURN(Mode mode, parse_mode(config.mode));
  SLUICE_ASSIGN_OR_RETURN(Admission admission, parse_admission(config.admission, mode));
  SLUICE_ASSIGN_OR_RETURN(TailPolicy tail, parse_tail(config.tail));
  std::optional<rl::ArithmeticTask> task;
  if (config.prompt_source == "task") {
    SLUICE_ASSIGN_OR_RETURN(rl::ArithmeticTask t, rl::ArithmeticTask::create(config.task));
    config.max_new_tokens = std::min<std::uint64_t>(config.max_new_tokens, t.max_response_tokens());
    task.emplace(std::move(t));
  }
  std::unique_ptr<ManagerState> s(
      new ManagerState(std::move(config), mode, admission, tail, std::move(task), now));
  if (db) {
    s->db_ = std::move(db);
    SLUICE_TRY(s->restore(now));
  }
  return s;
}

// Loads the durable state of a previous run. Released trajectories that are neither finished nor
// named by a rollout within the grace period restart from their prompts.
core::Status ManagerState::restore(Clock::time_point now) {
  SLUICE_ASSIGN_OR_RETURN(ManagerSnapshot snap, db_->load());
  committed_ = snap.counters;
  pool_.restore(snap);
  latest_ = snap.counters.latest;
  counts_.acked = snap.counters.acked;
  done_.restore(snap.counters.done_floor, snap.done);
  for (const auto& id : snap.finished) {
    if (!done_.contains(id)) trajs_[id].state = TrajState::kFinished;
  }
  // A database of an older build kept no count: every finished id was in it.
  counts_.finished = std::max<std::uint64_t>(snap.counters.finished, snap.finished.size());
  for (const auto& [id, text] : snap.unacked) {
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return core::data_loss(fmt::format("manager db: trajectory {}", id));
    SLUICE_ASSIGN_OR_RETURN(rl::Trajectory tr, rl::Trajectory::from_json(j));
    outbox_.hold(std::move(tr), nullptr);  // in the database already
  }
  // Below the done floor everything is done: the walk costs what was in flight.
  for (std::uint64_t p = done_.floor(); p < pool_.released(); ++p) {
    for (std::uint32_t k = 0; k < cfg_.group_size; ++k) {
      std::string id = fmt::format("p{}/{}", p, k);
      if (!trajs_.count(id) && !done_.contains(id)) unclaimed_.insert(id);
    }
  }
  recovering_ = pool_.released() > 0;
  awaited_.insert(snap.rollouts.begin(), snap.rollouts.end());
  restored_at_ = now;
  std::uint64_t grace =
      cfg_.recovery_grace_ms > 0 ? cfg_.recovery_grace_ms : 2 * cfg_.heartbeat_timeout_ms;
  recovery_deadline_ = now + Millis(grace);
  if (recovering_) {
    log::info(
        "manager: restored from {}: {} prompts released, {} finished ({} unacknowledged), {} in "
        "flight or waiting; latest version {}",
        db_->path(), pool_.released(), counts_.finished, outbox_.held(), unclaimed_.size(),
        latest_);
  }
  return {};
}

core::Status ManagerState::commit() {
  if (!db_) return {};
  changes_.counters = counters();
  changes_.counters_changed = !(changes_.counters == committed_);
  if (changes_.empty()) return {};
  core::Status st = db_->commit(changes_);
  if (!st.is_ok()) {
    log::error("manager: {}", st.to_string());
    return st;
  }
  committed_ = changes_.counters;
  changes_ = ManagerChanges{};
  return {};
}

DecodeLimits ManagerState::decode_limits() const {
  DecodeLimits l;
  l.max_version = latest_ + kVersionSlack;
  return l;
}

bool ManagerState::done() const {
  return cfg_.prompts != 0 && counts_.acked >= pool_.total_trajectories() && outbox_.empty();
}

std::optional<ManagerState::Where> ManagerState::where(const std::string& id) const {
  auto it = trajs_.find(id);
  if (it == trajs_.end()) {
    if (done_.contains(id)) return Where{TrajState::kFinished, ""};
    return std::nullopt;
  }
  return Where{it->second.state, it->second.rollout};
}

// ---- Handing out work.

// The next trajectory to hand out: one sent back, else the first of a newly released group (the
// rest of the group waits in the pool), else none (the job or the budget ahead is used up).
std::optional<SequenceState> ManagerState::next_item() {
  while (!pending_.empty()) {
    SequenceState s = std::move(pending_.front());
    pending_.pop_front();
    if (!pool_.doomed(s.prompt_id)) return s;
    finish_abandoned(s);
  }
  std::vector<SequenceState> group = pool_.release();
  if (group.empty()) return std::nullopt;
  // Members 1.. first, then 0 (the order the records were always made in).
  for (std::size_t k = 1; k < group.size(); ++k) {
    Traj& t = trajs_[group[k].trajectory_id];
    t.initial = std::move(group[k]);
    pending_.push_back(t.initial);
  }
  Traj& first = trajs_[group[0].trajectory_id];
  first.initial = std::move(group[0]);
  return first.initial;
}

// ---- Failures and hand-backs.

// Work of a dead or departing rollout goes back: partial states resume on the same version, the
// rest restarts from the prompt.
void ManagerState::reclaim(const std::string& rollout_id, const std::string& why) {
  std::uint64_t back = 0;
  for (auto& [id, t] : trajs_) {
    bool mine =
        t.rollout == rollout_id && (t.state == TrajState::kQueued ||
                                    t.state == TrajState::kActive || t.state == TrajState::kMoving);
    auto mv = moves_.find(id);
    if (mv != moves_.end() && (mv->second.to == rollout_id || mv->second.from == rollout_id) &&
        t.state == TrajState::kMoving) {
      mine = true;
    }
    if (!mine) continue;
    if (mv != moves_.end()) moves_.erase(mv);
    ++back;
    ++counts_.reclaimed;
    if (t.partial && !t.partial->generated.empty()) {
      resumes_.push_back(*t.partial);
      t.state = TrajState::kPending;
      t.rollout.clear();
    } else {
      restart(t);
    }
  }
  for (auto& [id, r] : rollouts_) {
    std::erase_if(r.to_import, [&](const SequenceState& s) {
      return trajs_[s.trajectory_id].rollout == rollout_id;
    });
  }
  log::warn("manager: rollout {} {}: {} trajectories go back to the pool", rollout_id, why, back);
}

void ManagerState::restart(Traj& t) {
  if (t.partial) ++counts_.restarted;
  t.partial.reset();
  t.state = TrajState::kPending;
  t.rollout.clear();
  pending_.push_front(t.initial);
}

// Work that did not start where it was sent goes back: to the front of the pool when nothing of
// it was generated yet, else to the resumes (it continues on a rollout of its version).
void ManagerState::send_back(Traj& t, SequenceState s) {
  if (pool_.doomed(s.prompt_id)) {
    finish_abandoned(s);
    return;
  }
  // A KV reference was bound to where the state was sent; wherever it goes next re-prefills.
  if (s.kv_ref) {
    ++counts_.kv_refs_dropped;
    s.kv_ref.reset();
  }
  t.state = TrajState::kPending;
  t.rollout.clear();
  if (s.generated.empty()) {
    pending_.push_front(std::move(s));
  } else {
    resumes_.push_back(std::move(s));
  }
}

// The grace period after a restart ended: what no rollout named restarts from its prompt.
void ManagerState::end_recovery() {
  recovering_ = false;
  // Taken out first: a doomed one finishes at once, which erases it from `unclaimed_`.
  std::set<std::string> left = std::move(unclaimed_);
  unclaimed_.clear();
  for (const auto& id : left) {
    auto s = pool_.initial_of(id);
    if (!s.is_ok()) {
      log::error("manager: recovery of {}: {}", id, s.status().to_string());
      continue;
    }
    Traj& t = trajs_[id];
    t.initial = *s;
    ++counts_.recovery_restarted;
    send_back(t, std::move(s).value());
  }
  awaited_.clear();
  if (!left.empty()) {
    log::info("manager: recovery: {} trajectories no rollout named restart from their prompts",
              left.size());
  }
}

void ManagerState::check_heartbeats(Clock::time_point now) {
  // The manager did not run for a while: it heard nothing, and what the rollouts sent meanwhile
  // may have expired unread. The silence was its own, so every rollout gets a full time-out from
  // now to be heard before it can be declared dead (a dead one is found that much later).
  const auto gap = std::chrono::duration_cast<Millis>(now - last_check_.value_or(now));
  last_check_ = std::max(last_check_.value_or(now), now);
  if (gap >= Millis(cfg_.stall_ms())) {
    ++counts_.stalls;
    for (auto& [id, r] : rollouts_)
      r.last_seen = std::max(r.last_seen, now);
    log::warn(
        "manager: stalled for {} ms (heartbeat checks are due every {} ms): every rollout has "
        "{} ms from now to report before it is declared dead",
        gap.count(), cfg_.heartbeat_check_ms, cfg_.heartbeat_timeout_ms);
  }
  if (recovering_ && now >= recovery_deadline_) end_recovery();
  for (auto& [id, r] : rollouts_) {
    if (!r.alive) continue;
    if (now - r.last_seen > Millis(cfg_.heartbeat_timeout_ms)) {
      r.alive = false;
      ++counts_.dead;
      if (db_) changes_.rollout_gone(id);
      reclaim(id, fmt::format("missed heartbeats for {} ms", cfg_.heartbeat_timeout_ms));
    }
  }
  // Resumable states whose version no live rollout has (and none will get again: everyone is
  // newer) restart from the prompt, unless tails may continue on newer weights (sluice mode, tail
  // continue or auto): then a rollout on a newer version takes them up (reply_work).
  if (continues_orphans()) return;
  std::erase_if(resumes_, [&](const SequenceState& s) {
    if (!orphaned(last_version(s))) return false;
    restart(trajs_[s.trajectory_id]);
    return true;
  });
}

bool ManagerState::orphaned(std::uint64_t v) const {
  for (const auto& [rid, r] : rollouts_) {
    if (r.alive && r.version <= v) return false;
  }
  return true;
}

bool ManagerState::continues_orphans() const {
  return mode_ == Mode::kSluice && tail_ != TailPolicy::kDrain;
}

// ---- Repack and the free-slot account.

bool ManagerState::takes_work(const Rollout& r) const {
  return rollout::takes_work(mode_, r.versions(), latest_, cfg_.max_assign_lag);
}

void ManagerState::sample_free_slots(Clock::time_point now) {
  double dt = std::chrono::duration<double>(now - last_sample_).count();
  last_sample_ = now;
  const bool work_waits = !pending_.empty() || (!pool_.all_released() && pool_.budget_left());
  for (const auto& [id, r] : rollouts_) {
    if (!r.alive || r.version == 0) continue;
    std::int64_t free = static_cast<std::int64_t>(r.capacity.max_sequences) -
                        static_cast<std::int64_t>(r.active.size() + r.queued.size());
    if (free <= 0) continue;
    // As many free slots as it has episodes waiting on their environment, when the pool has no
    // work to fill them, are the environment's.
    const auto env =
        work_waits ? 0 : std::min<std::int64_t>(free, static_cast<std::int64_t>(r.waiting.size()));
    free_slots_.environment += dt * static_cast<double>(env);
    free -= env;
    if (free <= 0) continue;
    double slot_s = dt * static_cast<double>(free);
    if (!work_waits) {
      if (pool_.all_released()) {
        free_slots_.end += slot_s;
      } else if (pool_.admission() == Admission::kContinuous) {
        free_slots_.backlog += slot_s;
      } else {
        free_slots_.budget += slot_s;
      }
    } else if (r.loading) {
      free_slots_.loading += slot_s;
    } else if (!takes_work(r)) {
      free_slots_.draining += slot_s;
    } else {
      free_slots_.other += slot_s;
    }
  }
}

void ManagerState::plan_repack() {
  // Rollouts a repack move empties or fills: their versions must stay as they are.
  std::set<std::string> moving;
  for (const auto& [tid, mv] : moves_) {
    moving.insert(mv.from);
    moving.insert(mv.to);
  }
  if (repacks(mode_) && cfg_.repack) plan_moves(moving);
  if (mode_ == Mode::kSluice) decide_tails(moving);
}

// A tail continues on the newest version when draining would leave most of its rollout's slots
// free: under `continue`, whenever the rollout holds the newest version; under `auto`, once its
// occupancy is down to the ramp-down level with nothing queued and repack is not emptying it
// (the planner found no destination, or the move did not pay).
void ManagerState::decide_tails(const std::set<std::string>& moving) {
  if (tail_ == TailPolicy::kDrain) return;
  for (auto& [id, r] : rollouts_) {
    r.continue_tail = false;
    if (!r.alive || r.loading || r.version == 0 || r.version >= latest_ || r.staged < latest_ ||
        r.active.empty() || moving.count(id) || !r.to_export.empty() || !r.to_import.empty()) {
      continue;
    }
    if (tail_ == TailPolicy::kContinue) {
      r.continue_tail = true;
      continue;
    }
    const double occupancy = r.capacity.max_sequences == 0
                                 ? 0.0
                                 : static_cast<double>(r.active.size()) / r.capacity.max_sequences;
    r.continue_tail = r.queued.empty() && occupancy <= cfg_.ramp_down_occupancy;
  }
}

void ManagerState::plan_moves(std::set<std::string>& moving) {
  std::vector<RolloutView> fleet;
  for (const auto& [id, r] : rollouts_) {
    if (!r.alive || r.loading || r.version == 0 || !r.to_export.empty() || !r.to_import.empty()) {
      continue;
    }
    bool busy_moving = false;
    for (const auto& [tid, mv] : moves_) {
      if (mv.from == id || mv.to == id) busy_moving = true;
    }
    if (busy_moving) continue;
    RolloutView v;
    v.id = id;
    v.version = r.version;
    v.capacity = r.capacity;
    v.queued = static_cast<std::uint32_t>(r.queued.size());
    // A rollout still given new work is not ramping down. Sluice mode stops giving work to a
    // rollout once it holds the newest version it is behind on, or once it is more than
    // max_assign_lag behind while still pulling it: it is draining then.
    if (takes_work(r)) v.queued += 1;
    v.previous_active = r.previous_active;
    // Each sequence's age for the cost model (tokens generated) was set as the report was taken.
    v.sequences = r.active;
    // Emptied, it gains something only by loading a newer version and taking work.
    v.freed_has_work = r.version < latest_ && (!pending_.empty() || !pool_.all_released());
    fleet.push_back(std::move(v));
  }
  RepackPlan plan = rollout::plan_repack(
      fleet, RepackPolicy{cfg_.ramp_down_occupancy, cfg_.kv_headroom, cfg_.repack_cost});
  counts_.repack_declined += plan.declined;
  if (plan.moves.empty()) return;
  ++counts_.repack_plans;
  for (const auto& m : plan.moves) {
    auto& src = rollouts_[m.from];
    auto& dst = rollouts_[m.to];
    if (src.version != dst.version) {
      ++counts_.cross_version;  // the planner must never do this; counted so tests can check
      continue;
    }
    src.to_export.push_back(m.trajectory_id);
    moving.insert(m.from);
    moving.insert(m.to);
    moves_[m.trajectory_id] = Move{m.from, m.to, src.version, m.with_kv};
    auto& t = trajs_[m.trajectory_id];
    t.state = TrajState::kMoving;
    t.rollout = m.from;
    ++counts_.repack_moves;
  }
  log::debug("manager: repack moves {} trajectories, frees {} rollouts", plan.moves.size(),
             plan.freed.size());
}

// ---- Finishing and abandoning.

// A trajectory first generated before this version can no longer be trained on (0: none).
std::uint64_t ManagerState::abandon_before() const {
  if (!cfg_.abandon_stale || latest_ <= cfg_.max_staleness) return 0;
  return latest_ - cfg_.max_staleness;
}

void ManagerState::finish_abandoned(const SequenceState& s) {
  rl::Trajectory tr = to_trajectory(s, 0.0, std::string());
  tr.abandoned = true;
  on_finished(tr);
}

// The group of `prompt_id` will be dropped: its members still to run or running end now.
void ManagerState::doom(const std::string& prompt_id) {
  if (!pool_.doom(prompt_id, changes())) return;
  for (std::uint32_t k = 0; k < cfg_.group_size; ++k) {
    std::string id = fmt::format("{}/{}", prompt_id, k);
    auto it = trajs_.find(id);
    if (it == trajs_.end()) continue;
    Traj& t = it->second;
    if (t.state == TrajState::kPending) {
      auto same = [&](const SequenceState& s) { return s.trajectory_id == id; };
      std::erase_if(pending_, same);
      std::erase_if(resumes_, same);
      finish_abandoned(t.partial ? *t.partial : t.initial);
    } else if ((t.state == TrajState::kQueued || t.state == TrajState::kActive) &&
               !t.rollout.empty()) {
      auto r = rollouts_.find(t.rollout);
      if (r != rollouts_.end()) r->second.to_abandon.push_back(id);
    }
    // A trajectory being moved is abandoned where it lands (route_exported).
  }
}

// Exactly once: the first report of a finished id counts; later copies (a resumed trajectory
// whose first rollout also finished it) are counted as duplicates and dropped.
void ManagerState::on_finished(const rl::Trajectory& tr) {
  if (done_.contains(tr.id)) {
    ++counts_.duplicates;
    m_duplicates_.inc();
    return;
  }
  auto& t = trajs_[tr.id];
  if (t.state == TrajState::kFinished) {
    ++counts_.duplicates;
    m_duplicates_.inc();
    return;
  }
  t.state = TrajState::kFinished;
  t.partial.reset();
  t.rollout.clear();
  moves_.erase(tr.id);
  if (tr.mixed_versions()) ++counts_.mixed;
  ++counts_.finished;
  m_finished_.inc();
  if (tr.abandoned) ++counts_.abandoned;
  pool_.count_group_member(tr.prompt_id);
  unclaimed_.erase(tr.id);
  if (db_) changes_.finished.push_back(tr.id);
  outbox_.hold(tr, changes());
  if (cfg_.abandon_stale && (tr.abandoned || tr.version < abandon_before())) doom(tr.prompt_id);
}

// ---- The actor's side.

CollectReply ManagerState::collect(const CollectRequest& q, Clock::time_point now) {
  std::vector<std::string> now_done;
  const std::size_t acked = outbox_.acknowledge(q.ack, changes(), &now_done);
  counts_.acked += acked;
  m_acked_.inc(static_cast<double>(acked));
  // Done: its effect is in a durable checkpoint. Nothing more is kept of it than that.
  const std::uint64_t floor = done_.floor();
  for (const auto& id : now_done) {
    done_.add(id);
    trajs_.erase(id);
    moves_.erase(id);
  }
  if (done_.floor() > floor) pool_.forget_below(done_.floor());
  if (q.epoch) outbox_.see_epoch(*q.epoch);
  outbox_.mark_have(q.have.value_or(std::vector<std::string>{}));
  if (collect_opens_budget(mode_)) pool_.consume(q.consumed);
  CollectReply reply;
  reply.trajectories = outbox_.take(q.max, now);
  // Done, for the actor: nothing more will come to this epoch (every trajectory of the job
  // finished and received). The actor acknowledges the last of them only after its final
  // checkpoint, which it writes once it hears this; done() (everything acknowledged) is the
  // manager's own end.
  reply.done = done() || all_received();
  return reply;
}

bool ManagerState::all_received() const {
  return cfg_.prompts != 0 && counts_.acked + outbox_.held() >= pool_.total_trajectories() &&
         outbox_.all_received();
}

PublishedReply ManagerState::published(const PublishedRequest& q) {
  std::uint64_t v = q.version;  // a maximum: a repeated or older publish changes nothing
  pool_.consume(q.consumed);
  if (v > latest_) {
    latest_ = v;
    m_latest_.set(static_cast<double>(v));
    log::info("manager: version {} published", v);
    plan_repack();
  }
  return PublishedReply{latest_};
}

}  // namespace sluice::rollout
