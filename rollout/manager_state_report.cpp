// The manager's state machine: a rollout's report. The report tells what the rollout holds; the
// reply tells it what to load, what to run, what to hand over and what to stop.
#include <fmt/format.h>

#include "core/log.hpp"
#include "rollout/manager_state.hpp"

namespace sluice::rollout {

namespace log = core::log;

namespace {

std::uint64_t last_version(const SequenceState& s) {
  return s.versions.empty() ? 0 : s.versions.back();
}

}  // namespace

core::Status ManagerState::check_report(const ReportRequest& q) const {
  auto check = [&](const std::string& tid) -> core::Status {
    if (trajs_.count(tid)) return {};
    core::Status st = pool_.initial_of(tid).status();
    if (st.is_ok()) return {};
    return core::protocol_error(fmt::format("{}: {}", msg::kReport, st.message()));
  };
  for (const auto& a : q.active)
    SLUICE_TRY(check(a.trajectory_id));
  for (const auto& tid : q.queued)
    SLUICE_TRY(check(tid));
  for (const auto& t : q.finished)
    SLUICE_TRY(check(t.id));
  for (const auto* l : {&q.exported, &q.partial, &q.returned, &q.refused}) {
    for (const auto& st : *l)
      SLUICE_TRY(check(st.trajectory_id));
  }
  return {};
}

// The record of a trajectory named by a rollout. One this manager has none of (it restarted, and
// the rollout kept working) is accepted: its first state is rebuilt from its id (which
// check_report verified can be done).
ManagerState::Traj& ManagerState::traj_named(const std::string& traj_id) {
  auto it = trajs_.find(traj_id);
  if (it != trajs_.end()) return it->second;
  unclaimed_.erase(traj_id);
  Traj& t = trajs_[traj_id];
  auto s = pool_.initial_of(traj_id);
  if (s.is_ok()) t.initial = std::move(s).value();
  return t;
}

// A trajectory this manager had no record of (it restarted) runs on `r`: it is accepted; when its
// group was doomed before the restart, the rollout is told to stop it.
void ManagerState::recover(Rollout& r, const std::string& tid, const Traj& t) {
  ++counts_.recovered;
  if (pool_.doomed(t.initial.prompt_id)) r.to_abandon.push_back(tid);
}

bool ManagerState::any_behind_with_work(std::uint64_t v) const {
  for (const auto& [id, r] : rollouts_) {
    if (r.alive && r.active_at_version(v) > 0) return true;
  }
  for (const auto& s : resumes_) {
    if (!s.versions.empty() && s.versions.back() < v) return true;
  }
  return false;
}

bool ManagerState::any_behind(std::uint64_t v) const {
  for (const auto& [id, r] : rollouts_) {
    if (r.alive && r.version < v) return true;
  }
  return false;
}

ReportReply ManagerState::report(ReportRequest q, Clock::time_point now) {
  Rollout* r = admit(q, now);
  if (!r) {
    // Declared dead: its work was handed out again. It starts afresh.
    ReportReply reply;
    reply.rejoin = true;
    return reply;
  }
  const bool leaving = q.leaving;
  const std::string rid = q.id;
  take_report(*r, q);
  if (recovering_ && awaited_.erase(rid) > 0 && awaited_.empty()) {
    // Every rollout live before the restart has said what it holds: what none named is nowhere.
    log::info("manager: recovery: every rollout reported {} ms after the restart",
              std::chrono::duration_cast<std::chrono::milliseconds>(now - restored_at_).count());
    end_recovery();
  }
  ReportReply reply;
  if (leaving) {
    // It handed everything back in this report (take_report routed it); whatever else was on its
    // way to it (a reply it never saw, a repack move to it) goes back too, and it is forgotten:
    // a later report under its id is a new rollout joining.
    const std::string id = r->id;
    reclaim(id, "left the job");
    rollouts_.erase(id);
    if (db_) changes_.rollout_gone(id);
    ++counts_.left;
    log::info("manager: rollout {} left", id);
    reply.done = done();
    reply.latest = latest_;
    return reply;
  }
  reply_work(*r, reply);
  return reply;
}

// The rollout sending report `q`, joined or known; null when it was declared dead (it must drop
// its work and join afresh).
ManagerState::Rollout* ManagerState::admit(const ReportRequest& q, Clock::time_point now) {
  const std::string& id = q.id;
  auto found = rollouts_.find(id);
  bool restarted_process = found != rollouts_.end() && !q.incarnation.empty() &&
                           !found->second.incarnation.empty() &&
                           q.incarnation != found->second.incarnation;
  if (found != rollouts_.end() && !found->second.alive) {
    // Declared dead: its work was handed out again. A new process has nothing to drop: it simply
    // joins.
    rollouts_.erase(found);
    if (!restarted_process) return nullptr;
    found = rollouts_.end();
  } else if (restarted_process) {
    // The same id from a new process: the old one's work is gone with it.
    ++counts_.rollout_restarts;
    reclaim(id, fmt::format("restarted (incarnation {} -> {})", found->second.incarnation,
                            q.incarnation));
    rollouts_.erase(found);
    found = rollouts_.end();
  }
  bool is_new = found == rollouts_.end();
  Rollout& r = rollouts_[id];
  if (is_new) {
    r.id = id;
    r.incarnation = q.incarnation;
    if (db_) changes_.rollout_joined(id);
    log::info("manager: rollout {} joined", id);
  }
  r.last_seen = now;
  ++r.reports;
  return &r;
}

// Whether `r` may report on `tid`: the trajectory is assigned to it (queued or sent there, running
// there, or leaving it by a repack move), or this manager has no record of it (it restarted, and
// the rollout kept working: recovery). Anything else is another rollout's, or nobody's, and the
// entry is refused: a finish is not counted, a run is not taken over, a state is not kept.
bool ManagerState::owns(const Rollout& r, const std::string& tid, const char* what) {
  auto it = trajs_.find(tid);
  return owns(r, it == trajs_.end() ? nullptr : &it->second, tid, what);
}

bool ManagerState::owns(const Rollout& r, const Traj* t, const std::string& tid, const char* what) {
  if (!t || t->rollout == r.id) return true;
  ++counts_.foreign;
  log::warn("manager: rollout {} reported {} {}, which is assigned to {}: refused", r.id, what, tid,
            t->rollout.empty() ? std::string("no rollout") : t->rollout);
  return false;
}

// What the rollout says it holds, finished and handed back. Each entry counts only for a
// trajectory assigned to this rollout (owns); one that is done (acknowledged by the actor) or
// finished already is a late copy: a run of it is stopped, a finish is a duplicate.
void ManagerState::take_report(Rollout& r, ReportRequest& q) {
  const std::string& id = r.id;
  // Every trajectory this report names, to find work sent to it that never arrived.
  std::set<std::string> named;
  r.version = q.version;
  r.loading = q.loading;
  r.staged = std::max(r.version, q.staged);
  r.capacity = q.capacity;
  r.previous_active = static_cast<std::uint32_t>(r.active.size());
  r.active.clear();
  // A run here of something that is not this rollout's to run (done, finished, or assigned
  // elsewhere): it is told to stop (its abandoned copy is then dropped).
  auto stop_here = [&](const std::string& tid, const char* what) {
    auto it = trajs_.find(tid);
    const bool late =
        done_.contains(tid) || (it != trajs_.end() && it->second.state == TrajState::kFinished);
    if (!late && owns(r, tid, what)) return false;
    r.to_abandon.push_back(tid);
    return true;
  };
  for (const auto& a : q.active) {
    const std::string& tid = a.trajectory_id;
    named.insert(tid);
    // As stop_here and traj_named, with the record looked up once: a report names every running
    // trajectory, and the lookups were most of a large fleet's report time.
    auto it = trajs_.find(tid);
    Traj* found = it == trajs_.end() ? nullptr : &it->second;
    const bool late = done_.contains(tid) || (found && found->state == TrajState::kFinished);
    if (late || !owns(r, found, tid, "running")) {
      r.to_abandon.push_back(tid);
      continue;
    }
    const bool known = found != nullptr;
    Traj& t = known ? *found : traj_named(tid);
    if (!known) recover(r, tid, t);
    // The repack planner's age of the sequence: tokens generated, its KV tokens less its prompt.
    const std::uint64_t prompt =
        t.initial.prompt_tokens.empty() ? cfg_.prompt_tokens : t.initial.prompt_tokens.size();
    r.active.push_back(
        SequenceView{tid, a.kv_tokens, a.kv_tokens > prompt ? a.kv_tokens - prompt : 0});
    auto mv = moves_.find(tid);
    if (t.state != TrajState::kMoving) {
      t.state = TrajState::kActive;
    } else if (mv != moves_.end() && mv->second.to == id) {
      moves_.erase(mv);
      t.state = TrajState::kActive;
    }
    t.rollout = id;
    if (t.state == TrajState::kActive) t.failed_moves = 0;  // it runs: its move worked
  }
  // Episodes waiting on their environment run here as the active do, holding no slot.
  r.waiting.clear();
  for (const auto& tid : q.waiting) {
    named.insert(tid);
    if (stop_here(tid, "waiting")) continue;
    r.waiting.push_back(tid);
    bool known = trajs_.count(tid) > 0;
    Traj& t = traj_named(tid);
    if (!known) recover(r, tid, t);
    if (t.state != TrajState::kMoving) t.state = TrajState::kActive;
    t.rollout = id;
  }
  r.queued.clear();
  for (const auto& tid : q.queued) {
    named.insert(tid);
    if (stop_here(tid, "queued")) continue;
    bool known = trajs_.count(tid) > 0;
    Traj& t = traj_named(tid);
    if (!known) {
      t.state = TrajState::kQueued;
      t.rollout = id;
      recover(r, tid, t);
    }
    r.queued.insert(tid);
  }
  r.stats = std::move(q.stats);

  for (const auto& tr : q.finished) {
    named.insert(tr.id);
    auto it = trajs_.find(tr.id);
    const bool late =
        done_.contains(tr.id) || (it != trajs_.end() && it->second.state == TrajState::kFinished);
    if (!late) {
      // An abandoned copy of what it was told to stop is dropped quietly.
      if (tr.abandoned && it != trajs_.end() && it->second.rollout != id) continue;
      if (!owns(r, tr.id, "finished")) continue;
      traj_named(tr.id);
    }
    on_finished(tr);
  }
  // What it hands over or back is taken only from the rollout it was assigned to; anything about
  // a done trajectory is old news.
  auto takes = [&](const std::string& tid, const char* what) {
    return !done_.contains(tid) && owns(r, tid, what);
  };
  for (auto& s : q.exported) {
    named.insert(s.trajectory_id);
    if (!takes(s.trajectory_id, "exported")) continue;
    traj_named(s.trajectory_id);
    route_exported(id, std::move(s));
  }
  for (auto& s : q.partial) {
    if (!takes(s.trajectory_id, "a partial state of")) continue;
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    t.partial = std::move(s);
    t.partial->kv_ref.reset();  // only an exported state's reference is honoured, for its move
  }
  // Queued work handed back unstarted (sluice mode: see hands_back_queued) starts elsewhere.
  for (auto& s : q.returned) {
    named.insert(s.trajectory_id);
    r.queued.erase(s.trajectory_id);
    if (!takes(s.trajectory_id, "returned")) continue;
    ++counts_.returned;
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    send_back(t, std::move(s));
  }
  // Refused imports (did not fit, or the version changed) come back as resumable states.
  for (auto& s : q.refused) {
    named.insert(s.trajectory_id);
    if (!takes(s.trajectory_id, "refused")) continue;
    moves_.erase(s.trajectory_id);
    ++counts_.move_failures;
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    if (gave_up_moving(t, s.trajectory_id, fmt::format("refused by {}", id))) continue;
    send_back(t, std::move(s));
  }
  reclaim_lost(r, named);
}

// A partial state whose moves keep failing (refused where it was sent, or its destination gone)
// is given up after kMaxFailedMoves: it restarts from its prompt, which any rollout on the newest
// version takes, rather than circle between the manager and rollouts that refuse it.
bool ManagerState::gave_up_moving(Traj& t, const std::string& tid, const std::string& why) {
  if (++t.failed_moves < kMaxFailedMoves) return false;
  log::warn(
      "manager: {}'s partial state failed to move {} times (last: {}): it restarts from its "
      "prompt",
      tid, t.failed_moves, why);
  ++counts_.moves_given_up;
  t.failed_moves = 0;
  if (pool_.doomed(t.initial.prompt_id)) {
    finish_abandoned(t.initial);
    return true;
  }
  restart(t);
  return true;
}

// A trajectory rollout `source` exported for a repack move: to its destination when that still
// runs the same version, else back to the resumes. A KV reference travels only with the move, and
// only as the manager issues it: published by `source` and bound to the move's destination (a
// reader refuses one bound to another rollout). Anywhere else the state re-prefills.
void ManagerState::route_exported(const std::string& source, SequenceState s) {
  auto drop_kv_ref = [&](SequenceState& st, const char* why) {
    if (!st.kv_ref) return;
    log::debug("manager: {}'s kv reference dropped: {}", st.trajectory_id, why);
    ++counts_.kv_refs_dropped;
    st.kv_ref.reset();
  };
  if (s.kv_ref && s.kv_ref->source != source) drop_kv_ref(s, "it names another source");
  auto mv = moves_.find(s.trajectory_id);
  auto& t = trajs_[s.trajectory_id];
  if (t.state == TrajState::kFinished) return;
  if (pool_.doomed(s.prompt_id)) {
    if (mv != moves_.end()) moves_.erase(mv);
    finish_abandoned(s);
    return;
  }
  t.partial = s;
  t.partial->kv_ref.reset();
  std::uint64_t v = last_version(s);
  if (mv != moves_.end()) {
    auto dst = rollouts_.find(mv->second.to);
    if (dst != rollouts_.end() && dst->second.alive && !dst->second.loading &&
        dst->second.version == v) {
      counts_.moved_kv_tokens += s.kv_tokens();
      t.rollout = dst->first;
      if (s.kv_ref) s.kv_ref->destination = dst->first;
      dst->second.to_import.push_back(std::move(s));
      return;
    }
    ++counts_.move_failures;
    moves_.erase(mv);
    if (gave_up_moving(t, s.trajectory_id, "its destination changed")) return;
  }
  drop_kv_ref(s, "its move failed");
  t.state = TrajState::kPending;
  t.rollout.clear();
  resumes_.push_back(std::move(s));
}

// Work sent to `r` that its latest report does not name although it answered that reply: the
// reply was lost, and the work goes back to be handed out again (else it would never finish, and
// the actor would wait for its batch forever; seen when the manager stalled for a second and the
// rollouts' reports timed out).
void ManagerState::reclaim_lost(Rollout& r, const std::set<std::string>& named) {
  for (auto it = r.awaiting.begin(); it != r.awaiting.end();) {
    if (it->second.second >= r.reports) {
      ++it;
      continue;
    }
    if (!named.count(it->first)) {
      auto& t = trajs_[it->first];
      if (t.state != TrajState::kFinished && t.rollout == r.id &&
          (t.state == TrajState::kQueued || t.state == TrajState::kMoving)) {
        SequenceState st = it->second.first;
        log::warn("manager: {} never got {} (a lost reply): handed out again", r.id, it->first);
        ++counts_.lost_replies;
        moves_.erase(it->first);
        send_back(t, std::move(st));
      }
    }
    it = r.awaiting.erase(it);
  }
}

// The reply's instructions: a version to load, partial states to resume, new work, and what to
// hand over or stop.
void ManagerState::reply_work(Rollout& r, ReportReply& reply) {
  const bool has_work =
      !r.active.empty() || !r.waiting.empty() || !r.queued.empty() || !r.to_import.empty();
  const bool continue_tail =
      r.continue_tail || (mode_ == Mode::kSluice && tail_ == TailPolicy::kContinue);
  const LoadDecision d = decide_load(mode_, r.versions(), latest_, has_work,
                                     global_update(mode_) && any_behind_with_work(latest_),
                                     cfg_.max_assign_lag, continue_tail);
  std::string state = d.barrier ? "barrier" : "run";
  const std::uint64_t load = d.load;
  // Partial states of this rollout's version resume here first.
  std::vector<SequenceState>& imports = reply.import;
  auto room = [&]() -> std::int64_t {
    return static_cast<std::int64_t>(r.capacity.max_sequences) -
           static_cast<std::int64_t>(r.active.size() + r.queued.size() + imports.size());
  };
  for (auto& s : r.to_import)
    imports.push_back(std::move(s));
  r.to_import.clear();
  if (!r.loading && load == 0 && r.version > 0) {
    std::erase_if(resumes_, [&](SequenceState& s) {
      if (pool_.doomed(s.prompt_id)) {
        finish_abandoned(s);
        return true;
      }
      const std::uint64_t v = last_version(s);
      const bool continues = v < r.version && continues_orphans() && orphaned(v);
      if ((v != r.version && !continues) || room() <= 0) return false;
      ++counts_.resumed;
      // The rollout admits a state of an older version only when told that it continues there.
      if (continues) reply.continue_ids.push_back(s.trajectory_id);
      auto& t = trajs_[s.trajectory_id];
      t.state = TrajState::kQueued;
      t.rollout = r.id;
      imports.push_back(std::move(s));
      return true;
    });
  }
  for (const auto& item : imports)
    r.awaiting[item.trajectory_id] = {item, r.reports};

  // New work only for rollouts on the newest version (and, with global updates, only once
  // everyone is on it). In sluice mode a rollout keeps generating on its version while the newest
  // one is pulled in the background; once it holds it, it drains and swaps.
  std::vector<SequenceState>& assign = reply.assign;
  bool may_assign = latest_ > 0 && takes_work(r) && !r.loading && load == 0 &&
                    !(global_update(mode_) && any_behind(latest_));
  if (may_assign) {
    std::int64_t want = room() + cfg_.prefetch;
    while (want-- > 0) {
      auto item = next_item();
      if (!item) break;
      auto& t = trajs_[item->trajectory_id];
      t.state = TrajState::kQueued;
      t.rollout = r.id;
      r.queued.insert(item->trajectory_id);
      assign.push_back(std::move(*item));
    }
    if (assign.empty() && r.active.empty() && r.waiting.empty() && r.queued.empty()) {
      state = out_of_work_state(mode_);
    }
  } else if (load == 0 && r.active.empty() && r.waiting.empty() && r.queued.empty() &&
             state == "run") {
    state = latest_ == 0 ? "barrier" : "idle";
  }
  for (const auto& item : assign)
    r.awaiting[item.trajectory_id] = {item, r.reports};
  // A rollout whose tail continues on the newest version keeps its queue: it runs it there.
  reply.unqueue =
      !d.allow_active && hands_back_queued(mode_, r.versions(), latest_, !r.queued.empty());
  for (const auto& id : r.to_export) {
    auto mv = moves_.find(id);
    if (mv != moves_.end() && mv->second.with_kv) reply.export_kv.push_back(id);
  }
  reply.export_ids = std::move(r.to_export);
  r.to_export.clear();
  reply.abandon = std::move(r.to_abandon);
  r.to_abandon.clear();
  reply.abandon_before = abandon_before();
  reply.load = load;
  // Until it reports again it is switching: nothing of its old version is routed to it.
  if (load > 0) {
    r.loading = true;
    r.continue_tail = false;
  }
  reply.allow_active = d.allow_active;
  reply.state = state;
  reply.done = done();
  reply.latest = latest_;
}

}  // namespace sluice::rollout
