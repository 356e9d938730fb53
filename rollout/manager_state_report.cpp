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
  take_report(*r, q);
  ReportReply reply;
  if (leaving) {
    // It handed everything back in this report (take_report routed it); whatever else was on its
    // way to it (a reply it never saw, a repack move to it) goes back too, and it is forgotten:
    // a later report under its id is a new rollout joining.
    const std::string id = r->id;
    reclaim(id, "left the job");
    rollouts_.erase(id);
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
    log::info("manager: rollout {} joined", id);
  }
  r.last_seen = now;
  ++r.reports;
  return &r;
}

// What the rollout says it holds, finished and handed back.
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
  for (const auto& a : q.active) {
    const std::string& tid = a.trajectory_id;
    named.insert(tid);
    r.active.push_back(SequenceView{tid, a.kv_tokens});
    bool known = trajs_.count(tid) > 0;
    Traj& t = traj_named(tid);
    if (!known) recover(r, tid, t);
    if (t.state != TrajState::kFinished && t.state != TrajState::kMoving) {
      t.state = TrajState::kActive;
      t.rollout = id;
    }
    auto mv = moves_.find(tid);
    if (t.state == TrajState::kMoving && mv != moves_.end() && mv->second.to == id) {
      moves_.erase(mv);
      t.state = TrajState::kActive;
      t.rollout = id;
    }
  }
  r.queued.clear();
  for (const auto& tid : q.queued) {
    bool known = trajs_.count(tid) > 0;
    Traj& t = traj_named(tid);
    if (!known) {
      t.state = TrajState::kQueued;
      t.rollout = id;
      recover(r, tid, t);
    }
    r.queued.insert(tid);
    named.insert(tid);
  }
  r.stats = std::move(q.stats);

  for (const auto& tr : q.finished) {
    traj_named(tr.id);
    named.insert(tr.id);
    on_finished(tr);
  }
  for (auto& s : q.exported) {
    traj_named(s.trajectory_id);
    named.insert(s.trajectory_id);
    route_exported(id, std::move(s));
  }
  for (auto& s : q.partial) {
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    t.partial = std::move(s);
    t.partial->kv_ref.reset();  // only an exported state's reference is honoured, for its move
  }
  // Queued work handed back unstarted (sluice mode: see hands_back_queued) starts elsewhere.
  for (auto& s : q.returned) {
    named.insert(s.trajectory_id);
    r.queued.erase(s.trajectory_id);
    ++counts_.returned;
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    send_back(t, std::move(s));
  }
  // Refused imports (did not fit, or the version changed) come back as resumable states.
  for (auto& s : q.refused) {
    named.insert(s.trajectory_id);
    moves_.erase(s.trajectory_id);
    ++counts_.move_failures;
    Traj& t = traj_named(s.trajectory_id);
    if (t.state == TrajState::kFinished) continue;
    send_back(t, std::move(s));
  }
  reclaim_lost(r, named);
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
  const bool has_work = !r.active.empty() || !r.queued.empty() || !r.to_import.empty();
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
      const bool here = v == r.version || (v < r.version && continues_orphans() && orphaned(v));
      if (!here || room() <= 0) return false;
      ++counts_.resumed;
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
    if (assign.empty() && r.active.empty() && r.queued.empty()) state = out_of_work_state(mode_);
  } else if (load == 0 && r.active.empty() && r.queued.empty() && state == "run") {
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
