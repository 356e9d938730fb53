#include "rollout/manager.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "core/messaging.hpp"
#include "core/metrics.hpp"
#include "rl/trajectory.hpp"
#include "rollout/engine.hpp"
#include "rollout/manager_db.hpp"
#include "rollout/protocol.hpp"
#include "rollout/repack.hpp"

namespace sluice::rollout {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {

// A request may name a version this far above the newest the manager knows (one it has not heard
// of yet, say after a restart of the actor); beyond it, the request is refused as malformed.
constexpr std::uint64_t kVersionSlack = 1'000'000;

enum class Mode { kSync, kOneStepOff, kStream, kPartialRollout, kSluice };

core::Result<Mode> parse_mode(const std::string& s) {
  if (s == "sync") return Mode::kSync;
  if (s == "one-step-off") return Mode::kOneStepOff;
  if (s == "stream") return Mode::kStream;
  if (s == "partial-rollout") return Mode::kPartialRollout;
  if (s == "sluice") return Mode::kSluice;
  return core::invalid_argument(
      fmt::format("unknown mode '{}' (sync, one-step-off, stream, partial-rollout or sluice)", s));
}

// Weight updates in these modes are global: nobody loads the new version until every rollout
// has drained the old one.
bool global_update(Mode m) {
  return m == Mode::kOneStepOff || m == Mode::kStream;
}

// A deterministic prompt for the simulated workload: token ids in [0, 32).
std::vector<std::int32_t> sim_prompt(std::uint64_t seed, std::uint64_t index, std::uint32_t n) {
  std::vector<std::int32_t> tokens(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + index + 1;
  for (auto& t : tokens) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<std::int32_t>(x % 32);
  }
  return tokens;
}

}  // namespace

core::Status ManagerConfig::validate() const {
  SLUICE_TRY(parse_mode(mode).status());
  if (group_size == 0) return core::invalid_argument("group_size must be at least 1");
  if (batch_trajectories == 0 || batch_trajectories % group_size != 0) {
    return core::invalid_argument(
        fmt::format("batch_trajectories ({}) must be a positive multiple of group_size ({})",
                    batch_trajectories, group_size));
  }
  if (ahead_batches == 0) return core::invalid_argument("ahead_batches must be at least 1");
  if (prompt_source != "sim" && prompt_source != "task") {
    return core::invalid_argument(
        fmt::format("prompt_source must be sim or task, not '{}'", prompt_source));
  }
  if (prompt_source == "task") SLUICE_TRY(task.validate().with_context("task"));
  if (heartbeat_timeout_ms < 100) {
    return core::invalid_argument("heartbeat_timeout_ms must be at least 100");
  }
  if (ramp_down_occupancy < 0 || ramp_down_occupancy > 1) {
    return core::invalid_argument("ramp_down_occupancy must be in [0, 1]");
  }
  return {};
}

struct Manager::Impl {
  // Exported on the role's /metrics (core::process_metrics()).
  core::Counter& m_finished = core::process_metrics().counter(
      "sluice_manager_trajectories_finished_total", "trajectories finished by rollouts, each once");
  core::Counter& m_acked = core::process_metrics().counter(
      "sluice_manager_trajectories_acked_total", "trajectories the actor acknowledged as durable");
  core::Counter& m_duplicates = core::process_metrics().counter(
      "sluice_manager_duplicates_total", "finished trajectories reported again (counted once)");
  core::Gauge& m_latest =
      core::process_metrics().gauge("sluice_manager_latest_version", "newest version published");

  enum class State { kPending, kQueued, kActive, kMoving, kFinished };
  struct Traj {
    State state = State::kPending;
    std::string rollout;
    std::optional<SequenceState> partial;  // last streamed state (the partial-response pool)
    SequenceState initial;                 // the trajectory as first assigned (for a restart)
  };
  struct Rollout {
    std::string id;
    std::string incarnation;  // chosen by the rollout process at start ("" from older rollouts)
    bool alive = true;
    bool loading = false;
    std::uint64_t version = 0;
    std::uint64_t staged = 0;  // newest version it holds (loaded, or pulled in the background)
    Capacity capacity;
    Clock::time_point last_seen;
    std::vector<SequenceView> active;
    std::uint32_t previous_active = 0;
    std::set<std::string> queued;
    std::vector<SequenceState> to_import;
    std::vector<std::string> to_export;
    std::vector<std::string> to_abandon;  // trajectories of doomed groups it holds
    json stats = json::object();
    std::uint64_t reports = 0;  // reports received from it
    // Work sent in a reply (assigned or imported), by trajectory id, with the report it answered:
    // the rollout's next report names it (active, queued, finished, exported, returned or
    // refused) unless that reply never reached it (it timed out waiting and reported again).
    std::map<std::string, std::pair<SequenceState, std::uint64_t>> awaiting;
    std::uint64_t active_at_version(std::uint64_t v) const {
      return version < v ? active.size() + queued.size() : 0;
    }
  };
  struct Move {
    std::string from, to;
    std::uint64_t version = 0;
  };

  core::EventLoop* loop = nullptr;
  ManagerConfig cfg;
  Mode mode = Mode::kSluice;
  std::unique_ptr<core::Server> server;
  std::optional<rl::ArithmeticTask> task;  // prompt_source task
  std::unique_ptr<core::EventLoop::Timer> tick_timer;
  std::unique_ptr<core::EventLoop::Timer> repack_timer;
  std::unique_ptr<core::EventLoop::Timer> sample_timer;

  std::map<std::string, Rollout> rollouts;
  std::unordered_map<std::string, Traj> trajs;
  std::deque<SequenceState> pending;   // fresh or restarted trajectories
  std::vector<SequenceState> resumes;  // partial states waiting for a rollout of their version
  std::map<std::string, Move> moves;   // trajectory id -> repack move in progress
  std::uint64_t next_prompt = 0;
  std::uint64_t latest = 0;
  std::uint64_t consumed = 0;  // trajectories the actor has taken (trained on or dropped)

  std::set<std::string> doomed;  // prompts whose group the actor will drop (abandon_stale)
  std::uint64_t abandoned = 0;   // trajectories ended as abandoned
  // Finished trajectories the actor has not acknowledged (durable), by id; `outbox` orders those
  // not yet sent to the actor's current epoch.
  struct Held {
    rl::Trajectory tr;
    bool sent = false;  // to the current epoch
    bool have = false;  // the actor said it received it (this epoch)
    Clock::time_point sent_at;
  };
  std::map<std::string, Held> unacked;
  std::deque<std::string> outbox;
  std::string epoch;  // the actor's, as last seen ("" before any)
  std::uint64_t finished = 0, acked = 0;

  // Durable state (state_path; see manager_db.hpp): the changes of the request being handled,
  // committed before its reply goes out.
  std::unique_ptr<ManagerDb> db;
  ManagerChanges changes;
  ManagerCounters committed;
  // After a restart: released trajectories of which nothing is known (not finished, not named by
  // a rollout yet). Those still unnamed when the grace period ends restart from their prompts.
  bool recovering = false;
  Clock::time_point recovery_deadline;
  std::set<std::string> unclaimed;
  std::uint64_t recovered = 0;  // in-flight trajectories accepted from rollouts after a restart
  std::uint64_t recovery_restarted = 0;  // unnamed after the grace period: restarted
  std::uint64_t rollout_restarts = 0;    // a known rollout id reported with a new incarnation

  // Counters for the bench and the tests.
  std::uint64_t lost_replies = 0;  // work re-sent because a reply never reached its rollout
  std::uint64_t duplicates = 0, mixed = 0, restarted = 0, resumed = 0, dead = 0;
  std::uint64_t repack_plans = 0, repack_moves = 0, moved_kv_tokens = 0, cross_version = 0;
  std::uint64_t move_failures = 0;
  std::uint64_t returned = 0;  // queued trajectories handed back unstarted by draining rollouts
  Clock::time_point started = Clock::now();
  // Where free rollout slots went, in slot-seconds (sampled). While work waited in the pool: a
  // rollout loading weights, one draining an old version (given no new work), anything else.
  // While none waited: the budget ahead of the actor was used up, or none was left in the job.
  struct FreeSlots {
    double loading = 0, draining = 0, budget = 0, end = 0, other = 0;
  } free_slots;
  Clock::time_point last_sample = Clock::now();

  std::uint64_t total_trajectories() const { return cfg.prompts * cfg.group_size; }
  bool all_released() const { return cfg.prompts != 0 && next_prompt >= cfg.prompts; }
  bool is_done() const {
    return cfg.prompts != 0 && acked >= total_trajectories() && unacked.empty();
  }

  std::uint64_t ahead() const {
    if (mode == Mode::kSync) return 1;
    if (mode == Mode::kOneStepOff) return 2;
    return cfg.ahead_batches;
  }
  // New trajectories may be released while fewer than this many are unconsumed.
  bool budget_left() const {
    std::uint64_t released = next_prompt * cfg.group_size;
    return released + cfg.group_size <= consumed + ahead() * cfg.batch_trajectories;
  }

  bool any_behind_with_work(std::uint64_t v) const {
    for (const auto& [id, r] : rollouts) {
      if (r.alive && r.active_at_version(v) > 0) return true;
    }
    for (const auto& s : resumes) {
      if (!s.versions.empty() && s.versions.back() < v) return true;
    }
    return false;
  }
  bool any_behind(std::uint64_t v) const {
    for (const auto& [id, r] : rollouts) {
      if (r.alive && r.version < v) return true;
    }
    return false;
  }

  SequenceState fresh(const std::string& traj_id, const std::string& prompt_id,
                      std::vector<std::int32_t> prompt) const {
    SequenceState s;
    s.trajectory_id = traj_id;
    s.prompt_id = prompt_id;
    s.prompt_tokens = std::move(prompt);
    s.max_new_tokens = cfg.max_new_tokens;
    s.rng_state = core::chunk_checksum(traj_id.data(), traj_id.size()) ^ cfg.seed;
    return s;
  }

  // The prompt of index `p`, deterministic from the configuration (a restarted manager rebuilds
  // the same prompt for a trajectory it has no record of).
  core::Result<std::vector<std::int32_t>> prompt_of(std::uint64_t p) const {
    if (!task) return sim_prompt(cfg.seed, p, cfg.prompt_tokens);
    SLUICE_ASSIGN_OR_RETURN(auto tp, task->train_prompt(p));
    return std::vector<std::int32_t>(tp.tokens.begin(), tp.tokens.end());
  }

  // The trajectory "p<N>/<k>" as first assigned, rebuilt from its id.
  core::Result<SequenceState> initial_of(const std::string& traj_id) const {
    auto ix = parse_trajectory_id(traj_id);
    if (!ix || ix->second >= cfg.group_size || ix->first >= next_prompt) {
      return core::invalid_argument(
          fmt::format("trajectory {} is not one this manager released", traj_id));
    }
    SLUICE_ASSIGN_OR_RETURN(auto prompt, prompt_of(ix->first));
    return fresh(traj_id, fmt::format("p{}", ix->first), std::move(prompt));
  }

  // The record of a trajectory named by a rollout. One this manager has none of (it restarted,
  // and the rollout kept working) is accepted: its first state is rebuilt from its id (which
  // check_named verified can be done).
  Traj& traj_named(const std::string& traj_id) {
    auto it = trajs.find(traj_id);
    if (it != trajs.end()) return it->second;
    unclaimed.erase(traj_id);
    Traj& t = trajs[traj_id];
    auto s = initial_of(traj_id);
    if (s.is_ok()) t.initial = std::move(s).value();
    return t;
  }

  // A trajectory this manager had no record of (it restarted) runs on `r`: it is accepted; when
  // its group was doomed before the restart, the rollout is told to stop it.
  void recover(Rollout& r, const std::string& tid, const Traj& t) {
    ++recovered;
    if (doomed.count(t.initial.prompt_id)) r.to_abandon.push_back(tid);
  }

  std::optional<SequenceState> next_item() {
    while (!pending.empty()) {
      SequenceState s = std::move(pending.front());
      pending.pop_front();
      if (!doomed.count(s.prompt_id)) return s;
      finish_abandoned(s);
    }
    if (all_released() || !budget_left()) return std::nullopt;
    std::uint64_t p = next_prompt++;
    std::string prompt_id = fmt::format("p{}", p);
    auto prompt = prompt_of(p);
    if (!prompt.is_ok()) {
      log::error("manager: prompt {}: {}", p, prompt.status().to_string());
      return std::nullopt;
    }
    for (std::uint32_t k = 1; k < cfg.group_size; ++k) {
      std::string id = fmt::format("{}/{}", prompt_id, k);
      trajs[id].initial = fresh(id, prompt_id, *prompt);
      pending.push_back(trajs[id].initial);
    }
    std::string id0 = prompt_id + "/0";
    trajs[id0].initial = fresh(id0, prompt_id, std::move(prompt).value());
    return trajs[id0].initial;
  }

  // Work of a dead or departing rollout goes back: partial states resume on the same version,
  // the rest restarts from the prompt.
  void reclaim(const std::string& rollout_id, const std::string& why) {
    std::uint64_t back = 0;
    for (auto& [id, t] : trajs) {
      bool mine =
          t.rollout == rollout_id &&
          (t.state == State::kQueued || t.state == State::kActive || t.state == State::kMoving);
      auto mv = moves.find(id);
      if (mv != moves.end() && (mv->second.to == rollout_id || mv->second.from == rollout_id) &&
          t.state == State::kMoving) {
        mine = true;
      }
      if (!mine) continue;
      if (mv != moves.end()) moves.erase(mv);
      ++back;
      if (t.partial && !t.partial->generated.empty()) {
        resumes.push_back(*t.partial);
        t.state = State::kPending;
        t.rollout.clear();
      } else {
        restart(id, t);
      }
    }
    for (auto& [id, r] : rollouts) {
      std::erase_if(r.to_import, [&](const SequenceState& s) {
        return trajs[s.trajectory_id].rollout == rollout_id;
      });
    }
    log::warn("manager: rollout {} {}: {} trajectories go back to the pool", rollout_id, why, back);
  }

  void restart(const std::string& /*id*/, Traj& t) {
    if (t.partial) ++restarted;
    t.partial.reset();
    t.state = State::kPending;
    t.rollout.clear();
    pending.push_front(t.initial);
  }

  ManagerCounters counters() const { return {next_prompt, latest, consumed, acked}; }

  // Commits the changes made since the last commit (one transaction). On an error they stay
  // queued for the next attempt, and the caller replies with the error.
  core::Status persist() {
    if (!db) return {};
    changes.counters = counters();
    changes.counters_changed = !(changes.counters == committed);
    if (changes.empty()) return {};
    core::Status st = db->commit(changes);
    if (!st.is_ok()) {
      log::error("manager: {}", st.to_string());
      return st;
    }
    committed = changes.counters;
    changes = ManagerChanges{};
    return {};
  }

  // Loads the durable state of a previous run. Released trajectories that are neither finished
  // nor named by a rollout within the grace period restart from their prompts.
  core::Status restore() {
    SLUICE_ASSIGN_OR_RETURN(ManagerSnapshot snap, db->load());
    committed = snap.counters;
    next_prompt = snap.counters.next_prompt;
    latest = snap.counters.latest;
    consumed = snap.counters.consumed;
    acked = snap.counters.acked;
    for (const auto& id : snap.finished)
      trajs[id].state = State::kFinished;
    finished = snap.finished.size();
    for (const auto& [id, text] : snap.unacked) {
      json j = json::parse(text, nullptr, false);
      if (j.is_discarded()) return core::data_loss(fmt::format("manager db: trajectory {}", id));
      SLUICE_ASSIGN_OR_RETURN(rl::Trajectory tr, rl::Trajectory::from_json(j));
      unacked[id] = Held{std::move(tr), false, false, {}};
      outbox.push_back(id);
    }
    doomed.insert(snap.doomed.begin(), snap.doomed.end());
    for (std::uint64_t p = 0; p < next_prompt; ++p) {
      for (std::uint32_t k = 0; k < cfg.group_size; ++k) {
        std::string id = fmt::format("p{}/{}", p, k);
        if (!trajs.count(id)) unclaimed.insert(id);
      }
    }
    recovering = next_prompt > 0;
    std::uint64_t grace =
        cfg.recovery_grace_ms > 0 ? cfg.recovery_grace_ms : 2 * cfg.heartbeat_timeout_ms;
    recovery_deadline = Clock::now() + Millis(grace);
    if (recovering) {
      log::info(
          "manager: restored from {}: {} prompts released, {} finished ({} unacknowledged), "
          "{} in flight or waiting; latest version {}",
          db->path(), next_prompt, finished, unacked.size(), unclaimed.size(), latest);
    }
    return {};
  }

  // The grace period after a restart ended: what no rollout named restarts from its prompt.
  void end_recovery() {
    recovering = false;
    // Taken out first: a doomed one finishes at once, which erases it from `unclaimed`.
    std::set<std::string> left = std::move(unclaimed);
    unclaimed.clear();
    for (const auto& id : left) {
      auto s = initial_of(id);
      if (!s.is_ok()) {
        log::error("manager: recovery of {}: {}", id, s.status().to_string());
        continue;
      }
      Traj& t = trajs[id];
      t.initial = *s;
      ++recovery_restarted;
      send_back(t, std::move(s).value());
    }
    if (!left.empty()) {
      log::info("manager: recovery: {} trajectories no rollout named restart from their prompts",
                left.size());
    }
  }

  void check_heartbeats() {
    auto now = Clock::now();
    if (recovering && now >= recovery_deadline) end_recovery();
    for (auto& [id, r] : rollouts) {
      if (!r.alive) continue;
      if (now - r.last_seen > Millis(cfg.heartbeat_timeout_ms)) {
        r.alive = false;
        ++dead;
        reclaim(id, fmt::format("missed heartbeats for {} ms", cfg.heartbeat_timeout_ms));
      }
    }
    // Resumable states whose version no live rollout has (and none will get again: everyone is
    // newer) restart from the prompt.
    std::erase_if(resumes, [&](const SequenceState& s) {
      std::uint64_t v = s.versions.empty() ? 0 : s.versions.back();
      for (const auto& [rid, r] : rollouts) {
        if (r.alive && r.version <= v) return false;
      }
      restart(s.trajectory_id, trajs[s.trajectory_id]);
      return true;
    });
  }

  // Whether `r` is given new work on its version: on the newest one, or (sluice mode) still
  // pulling the newest one while at most max_assign_lag behind. Otherwise it drains.
  bool takes_work(const Rollout& r) const {
    return r.version == latest || (mode == Mode::kSluice && r.version > 0 && r.staged < latest &&
                                   latest - r.version <= cfg.max_assign_lag);
  }

  void sample_free_slots() {
    auto now = Clock::now();
    double dt = std::chrono::duration<double>(now - last_sample).count();
    last_sample = now;
    const bool work_waits = !pending.empty() || (!all_released() && budget_left());
    for (const auto& [id, r] : rollouts) {
      if (!r.alive || r.version == 0) continue;
      std::int64_t free = static_cast<std::int64_t>(r.capacity.max_sequences) -
                          static_cast<std::int64_t>(r.active.size() + r.queued.size());
      if (free <= 0) continue;
      double slot_s = dt * static_cast<double>(free);
      if (!work_waits) {
        (all_released() ? free_slots.end : free_slots.budget) += slot_s;
      } else if (r.loading) {
        free_slots.loading += slot_s;
      } else if (!takes_work(r)) {
        free_slots.draining += slot_s;
      } else {
        free_slots.other += slot_s;
      }
    }
  }

  void plan_repack_now() {
    if (mode != Mode::kSluice || !cfg.repack) return;
    std::vector<RolloutView> fleet;
    for (const auto& [id, r] : rollouts) {
      if (!r.alive || r.loading || r.version == 0 || !r.to_export.empty() || !r.to_import.empty()) {
        continue;
      }
      bool busy_moving = false;
      for (const auto& [tid, mv] : moves) {
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
      v.sequences = r.active;
      fleet.push_back(std::move(v));
    }
    RepackPlan plan = plan_repack(fleet, RepackPolicy{cfg.ramp_down_occupancy, cfg.kv_headroom});
    if (plan.moves.empty()) return;
    ++repack_plans;
    for (const auto& m : plan.moves) {
      auto& src = rollouts[m.from];
      auto& dst = rollouts[m.to];
      if (src.version != dst.version) {
        ++cross_version;  // the planner must never do this; counted so tests can check
        continue;
      }
      src.to_export.push_back(m.trajectory_id);
      moves[m.trajectory_id] = Move{m.from, m.to, src.version};
      auto& t = trajs[m.trajectory_id];
      t.state = State::kMoving;
      t.rollout = m.from;
      ++repack_moves;
    }
    log::debug("manager: repack moves {} trajectories, frees {} rollouts", plan.moves.size(),
               plan.freed.size());
  }

  // A trajectory first generated before this version can no longer be trained on (0: none).
  std::uint64_t abandon_before() const {
    if (!cfg.abandon_stale || latest <= cfg.max_staleness) return 0;
    return latest - cfg.max_staleness;
  }

  void finish_abandoned(const SequenceState& s) {
    rl::Trajectory tr = to_trajectory(s, 0.0, std::string());
    tr.abandoned = true;
    on_finished(tr);
  }

  // The group of `prompt_id` will be dropped: its members still to run or running end now.
  void doom(const std::string& prompt_id) {
    if (!doomed.insert(prompt_id).second) return;
    if (db) changes.doomed.push_back(prompt_id);
    for (std::uint32_t k = 0; k < cfg.group_size; ++k) {
      std::string id = fmt::format("{}/{}", prompt_id, k);
      auto it = trajs.find(id);
      if (it == trajs.end()) continue;
      Traj& t = it->second;
      if (t.state == State::kPending) {
        auto same = [&](const SequenceState& s) { return s.trajectory_id == id; };
        std::erase_if(pending, same);
        std::erase_if(resumes, same);
        finish_abandoned(t.partial ? *t.partial : t.initial);
      } else if ((t.state == State::kQueued || t.state == State::kActive) && !t.rollout.empty()) {
        auto r = rollouts.find(t.rollout);
        if (r != rollouts.end()) r->second.to_abandon.push_back(id);
      }
      // A trajectory being moved is abandoned where it lands (route_exported).
    }
  }

  void on_finished(const rl::Trajectory& tr) {
    auto& t = trajs[tr.id];
    if (t.state == State::kFinished) {
      ++duplicates;
      m_duplicates.inc();
      return;
    }
    t.state = State::kFinished;
    t.partial.reset();
    t.rollout.clear();
    moves.erase(tr.id);
    if (tr.mixed_versions()) ++mixed;
    ++finished;
    m_finished.inc();
    if (tr.abandoned) ++abandoned;
    unclaimed.erase(tr.id);
    unacked[tr.id] = Held{tr, false, false, {}};
    outbox.push_back(tr.id);
    if (db) {
      changes.finished.push_back(tr.id);
      changes.unacked.emplace_back(tr.id, tr.to_json().dump());
    }
    if (cfg.abandon_stale && (tr.abandoned || tr.version < abandon_before())) doom(tr.prompt_id);
  }

  void route_exported(SequenceState s) {
    auto mv = moves.find(s.trajectory_id);
    auto& t = trajs[s.trajectory_id];
    if (t.state == State::kFinished) return;
    if (doomed.count(s.prompt_id)) {
      if (mv != moves.end()) moves.erase(mv);
      finish_abandoned(s);
      return;
    }
    t.partial = s;
    std::uint64_t v = s.versions.empty() ? 0 : s.versions.back();
    if (mv != moves.end()) {
      auto dst = rollouts.find(mv->second.to);
      if (dst != rollouts.end() && dst->second.alive && !dst->second.loading &&
          dst->second.version == v) {
        moved_kv_tokens += s.kv_tokens();
        t.rollout = dst->first;
        dst->second.to_import.push_back(std::move(s));
        return;
      }
      ++move_failures;
      moves.erase(mv);
    }
    t.state = State::kPending;
    t.rollout.clear();
    resumes.push_back(std::move(s));
  }

  // Work that did not start where it was sent goes back: to the front of the pool when nothing of
  // it was generated yet, else to the resumes (it continues on a rollout of its version).
  void send_back(Traj& t, SequenceState s) {
    if (doomed.count(s.prompt_id)) {
      finish_abandoned(s);
      return;
    }
    t.state = State::kPending;
    t.rollout.clear();
    if (s.generated.empty()) {
      pending.push_front(std::move(s));
    } else {
      resumes.push_back(std::move(s));
    }
  }

  // Work sent to `r` that its latest report does not name although it answered that reply: the
  // reply was lost, and the work goes back to be handed out again (else it would never finish,
  // and the actor would wait for its batch forever; seen when the manager stalled for a second
  // and the rollouts' reports timed out).
  void reclaim_lost(Rollout& r, const std::set<std::string>& named) {
    for (auto it = r.awaiting.begin(); it != r.awaiting.end();) {
      if (it->second.second >= r.reports) {
        ++it;
        continue;
      }
      if (!named.count(it->first)) {
        auto& t = trajs[it->first];
        if (t.state != State::kFinished && t.rollout == r.id &&
            (t.state == State::kQueued || t.state == State::kMoving)) {
          SequenceState st = it->second.first;
          log::warn("manager: {} never got {} (a lost reply): handed out again", r.id, it->first);
          ++lost_replies;
          moves.erase(it->first);
          send_back(t, std::move(st));
        }
      }
      it = r.awaiting.erase(it);
    }
  }

  // Bounds for decoding a request: a version may be ahead of the newest this manager knows (it
  // may not have heard of it yet), but not absurdly far.
  DecodeLimits limits() const {
    DecodeLimits l;
    l.max_version = latest + kVersionSlack;
    return l;
  }

  // Every trajectory a report names is one this manager knows, or one it released and can
  // rebuild (after a restart). Checked before anything is applied.
  core::Status check_named(const ReportRequest& q) const {
    auto check = [&](const std::string& tid) -> core::Status {
      if (trajs.count(tid)) return {};
      core::Status st = initial_of(tid).status();
      if (st.is_ok()) return {};
      return core::protocol_error(fmt::format("mgr.report: {}", st.message()));
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

  core::Result<core::Message> on_report(const core::Message& req) {
    // Decoded and checked in full before anything changes.
    SLUICE_ASSIGN_OR_RETURN(ReportRequest q, decode_report(req.body, limits()));
    SLUICE_TRY(check_named(q));
    return encode(apply_report(std::move(q)));
  }

  ReportReply apply_report(ReportRequest q) {
    const std::string& id = q.id;
    const std::string& incarnation = q.incarnation;
    auto found = rollouts.find(id);
    bool restarted_process = found != rollouts.end() && !incarnation.empty() &&
                             !found->second.incarnation.empty() &&
                             incarnation != found->second.incarnation;
    if (found != rollouts.end() && !found->second.alive) {
      // Declared dead: its work was handed out again. It starts afresh (a new process has
      // nothing to drop: it simply joins).
      rollouts.erase(found);
      if (!restarted_process) {
        ReportReply reply;
        reply.rejoin = true;
        return reply;
      }
      found = rollouts.end();
    } else if (restarted_process) {
      // The same id from a new process: the old one's work is gone with it.
      ++rollout_restarts;
      reclaim(id, fmt::format("restarted (incarnation {} -> {})", found->second.incarnation,
                              incarnation));
      rollouts.erase(found);
      found = rollouts.end();
    }
    bool is_new = found == rollouts.end();
    Rollout& r = rollouts[id];
    if (is_new) {
      r.id = id;
      r.incarnation = incarnation;
      log::info("manager: rollout {} joined", id);
    }
    r.last_seen = Clock::now();
    ++r.reports;
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
      bool known = trajs.count(tid) > 0;
      Traj& t = traj_named(tid);
      if (!known) recover(r, tid, t);
      if (t.state != State::kFinished && t.state != State::kMoving) {
        t.state = State::kActive;
        t.rollout = id;
      }
      if (t.state == State::kMoving && moves.count(tid) && moves[tid].to == id) {
        moves.erase(tid);
        t.state = State::kActive;
        t.rollout = id;
      }
    }
    r.queued.clear();
    for (const auto& tid : q.queued) {
      bool known = trajs.count(tid) > 0;
      Traj& t = traj_named(tid);
      if (!known) {
        t.state = State::kQueued;
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
      route_exported(std::move(s));
    }
    for (auto& s : q.partial) {
      Traj& t = traj_named(s.trajectory_id);
      if (t.state != State::kFinished) t.partial = std::move(s);
    }
    // Queued work handed back unstarted (sluice mode: see "unqueue" below) starts elsewhere.
    for (auto& s : q.returned) {
      named.insert(s.trajectory_id);
      r.queued.erase(s.trajectory_id);
      ++returned;
      Traj& t = traj_named(s.trajectory_id);
      if (t.state == State::kFinished) continue;
      send_back(t, std::move(s));
    }
    // Refused imports (did not fit, or the version changed) come back as resumable states.
    for (auto& s : q.refused) {
      named.insert(s.trajectory_id);
      moves.erase(s.trajectory_id);
      ++move_failures;
      Traj& t = traj_named(s.trajectory_id);
      if (t.state == State::kFinished) continue;
      send_back(t, std::move(s));
    }

    reclaim_lost(r, named);
    ReportReply reply;
    std::string state = "run";
    std::uint64_t load = 0;
    bool allow_active = false;
    if (latest > 0 && r.version < latest && !r.loading) {
      bool has_work = !r.active.empty() || !r.queued.empty() || !r.to_import.empty();
      if (mode == Mode::kPartialRollout) {
        load = latest;
        allow_active = true;
      } else if (global_update(mode)) {
        if (!any_behind_with_work(latest)) {
          load = latest;
        } else if (!has_work) {
          state = "barrier";
        }
      } else if (!has_work && (mode != Mode::kSluice || r.staged >= latest)) {
        load = latest;
      } else if (!has_work && r.staged > r.version && latest - r.staged <= cfg.max_assign_lag) {
        // Sluice mode, drained while the newest version is still on its way: the newer version
        // it already holds lets it take work now (as a rollout that is still pulling may) rather
        // than idle until the newest one arrives.
        load = r.staged;
      }
    }
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
      std::erase_if(resumes, [&](SequenceState& s) {
        if (doomed.count(s.prompt_id)) {
          finish_abandoned(s);
          return true;
        }
        std::uint64_t v = s.versions.empty() ? 0 : s.versions.back();
        if (v != r.version || room() <= 0) return false;
        ++resumed;
        auto& t = trajs[s.trajectory_id];
        t.state = State::kQueued;
        t.rollout = id;
        imports.push_back(std::move(s));
        return true;
      });
    }
    for (const auto& item : imports)
      r.awaiting[item.trajectory_id] = {item, r.reports};

    // New work only for rollouts on the newest version (and, with global updates, only once
    // everyone is on it).
    std::vector<SequenceState>& assign = reply.assign;
    // In sluice mode a rollout keeps generating on its version while the newest one is pulled in
    // the background; once it holds it, it drains and swaps.
    bool may_assign = latest > 0 && takes_work(r) && !r.loading && load == 0 &&
                      !(global_update(mode) && any_behind(latest));
    if (may_assign) {
      std::int64_t want = room() + cfg.prefetch;
      while (want-- > 0) {
        auto item = next_item();
        if (!item) break;
        auto& t = trajs[item->trajectory_id];
        t.state = State::kQueued;
        t.rollout = id;
        r.queued.insert(item->trajectory_id);
        assign.push_back(std::move(*item));
      }
      if (assign.empty() && r.active.empty() && r.queued.empty()) {
        // Nothing to run: in sync-like modes the next batch waits for new weights.
        state = (mode == Mode::kSync || mode == Mode::kOneStepOff) ? "barrier" : "idle";
      }
    } else if (load == 0 && r.active.empty() && r.queued.empty() && state == "run") {
      state = latest == 0 ? "barrier" : "idle";
    }
    for (const auto& item : assign)
      r.awaiting[item.trajectory_id] = {item, r.reports};
    // Sluice mode: a rollout that holds the newest version and is draining its old one would
    // start its queued trajectories on the old version as slots free up, making them stale and
    // delaying its swap. It hands them back instead, for rollouts on the newest version.
    reply.unqueue =
        mode == Mode::kSluice && latest > r.version && r.staged >= latest && !r.queued.empty();
    reply.export_ids = std::move(r.to_export);
    r.to_export.clear();
    reply.abandon = std::move(r.to_abandon);
    r.to_abandon.clear();
    reply.abandon_before = abandon_before();
    reply.load = load;
    // Until it reports again it is switching: nothing of its old version is routed to it.
    if (load > 0) r.loading = true;
    reply.allow_active = allow_active;
    reply.state = state;
    reply.done = is_done();
    reply.latest = latest;
    return reply;
  }

  core::Result<core::Message> on_collect(const core::Message& req) {
    SLUICE_ASSIGN_OR_RETURN(CollectRequest q, decode_collect(req.body, limits()));
    return encode(apply_collect(q));
  }

  CollectReply apply_collect(const CollectRequest& q) {
    for (const auto& id : q.ack) {
      if (unacked.erase(id) == 0) continue;  // a repeated ack is harmless
      ++acked;
      m_acked.inc();
      if (db) changes.acked.push_back(id);
    }
    if (q.epoch) {
      const std::string& e = *q.epoch;
      if (e != epoch) {
        // A restarted actor lost what it had not checkpointed: everything unacked goes again.
        if (!epoch.empty())
          log::info("manager: actor epoch {} -> {}: re-sending unacked", epoch, e);
        epoch = e;
        for (auto& [id, h] : unacked) {
          h.have = false;
          if (h.sent) {
            h.sent = false;
            outbox.push_back(id);
          }
        }
      }
    }
    for (const auto& id : q.have.value_or(std::vector<std::string>{})) {
      auto it = unacked.find(id);
      if (it != unacked.end() && it->second.sent) it->second.have = true;
    }
    // In the batch-synchronous modes the next batch opens with the next version, not when the
    // actor takes the current one (else it would be generated with the old weights).
    if (mode != Mode::kSync && mode != Mode::kOneStepOff) {
      consumed = std::max(consumed, q.consumed);
    }
    const std::size_t max = q.max;
    CollectReply reply;
    std::vector<rl::Trajectory>& out = reply.trajectories;
    auto now = Clock::now();
    // Resend what was delivered a while ago and neither received (`have`) nor acknowledged: the
    // reply was lost. The actor's buffer refuses what it already has.
    // Bounded by bytes (kTrajectoryBytesPerMessage): a restarted actor is owed every
    // unacknowledged trajectory at once, and one reply with all of them was refused whole and
    // sent again forever (the job stalled under sluice chaos).
    std::size_t bytes = 0;
    auto fits = [&](const rl::Trajectory& t) {
      std::size_t b = approx_json_bytes(t);
      if (!out.empty() && bytes + b > kTrajectoryBytesPerMessage) return false;
      bytes += b;
      return true;
    };
    for (auto& [id, h] : unacked) {
      if (out.size() >= max) break;
      if (h.sent && !h.have && now - h.sent_at > Millis(cfg.resend_ms)) {
        if (!fits(h.tr)) break;
        h.sent_at = now;
        out.push_back(h.tr);
      }
    }
    while (out.size() < max && !outbox.empty()) {
      auto it = unacked.find(outbox.front());
      if (it == unacked.end() || it->second.sent) {  // acknowledged meanwhile
        outbox.pop_front();
        continue;
      }
      if (!fits(it->second.tr)) break;  // the rest in the next reply
      outbox.pop_front();
      it->second.sent = true;
      it->second.sent_at = now;
      out.push_back(it->second.tr);
    }
    // Done, for the actor: nothing more will come to this epoch (every trajectory of the job
    // finished and received). The actor acknowledges the last of them only after its final
    // checkpoint, which it writes once it hears this; is_done() (everything acknowledged) is the
    // manager's own end.
    reply.done = is_done() || all_received();
    return reply;
  }

  bool all_received() const {
    if (cfg.prompts == 0 || acked + unacked.size() < total_trajectories() || !outbox.empty()) {
      return false;
    }
    return std::all_of(unacked.begin(), unacked.end(),
                       [](const auto& u) { return u.second.sent && u.second.have; });
  }

  core::Result<core::Message> on_published(const core::Message& req) {
    SLUICE_ASSIGN_OR_RETURN(PublishedRequest q, decode_published(req.body, limits()));
    std::uint64_t v = q.version;  // a maximum: a repeated or older publish changes nothing
    consumed = std::max(consumed, q.consumed);
    if (v > latest) {
      latest = v;
      m_latest.set(static_cast<double>(v));
      log::info("manager: version {} published", v);
      plan_repack_now();
    }
    return encode(PublishedReply{latest});
  }

  // A hash over the state the manager acts on (not its clocks or metrics): equal digests before
  // and after a request mean the request changed nothing.
  std::string state_digest() const {
    std::string s = fmt::format("{} {} {} {} {} {} {} {}|", next_prompt, latest, consumed, acked,
                                finished, duplicates, epoch, recovering);
    std::map<std::string, const Traj*> sorted;
    for (const auto& [id, t] : trajs)
      sorted.emplace(id, &t);
    for (const auto& [id, t] : sorted) {
      s += fmt::format("{}:{}:{}:{};", id, static_cast<int>(t->state), t->rollout,
                       t->partial ? static_cast<std::int64_t>(t->partial->generated.size()) : -1);
    }
    s += "|";
    for (const auto& p : pending)
      s += p.trajectory_id + ";";
    s += "|";
    for (const auto& p : resumes)
      s += p.trajectory_id + ";";
    s += "|";
    for (const auto& [id, h] : unacked)
      s += fmt::format("{}:{}:{};", id, h.sent, h.have);
    for (const auto& id : outbox)
      s += id + ";";
    s += "|";
    for (const auto& id : doomed)
      s += id + ";";
    for (const auto& id : unclaimed)
      s += id + ";";
    for (const auto& [id, m] : moves)
      s += fmt::format("{}:{}>{}@{};", id, m.from, m.to, m.version);
    for (const auto& [id, r] : rollouts) {
      s += fmt::format("|{} {} {} {} {} {} {} {} {}:", id, r.incarnation, r.alive, r.loading,
                       r.version, r.staged, r.reports, r.capacity.max_sequences,
                       r.capacity.max_kv_tokens);
      for (const auto& a : r.active)
        s += fmt::format("{}/{};", a.trajectory_id, a.kv_tokens);
      for (const auto& q : r.queued)
        s += q + ";";
      for (const auto& [tid, w] : r.awaiting)
        s += tid + ";";
      for (const auto& q : r.to_import)
        s += q.trajectory_id + ";";
      for (const auto& q : r.to_export)
        s += q + ";";
      for (const auto& q : r.to_abandon)
        s += q + ";";
    }
    return fmt::format("{:016x}", core::chunk_checksum(s.data(), s.size()));
  }

  json status_json() const {
    json rs = json::array();
    for (const auto& [id, r] : rollouts) {
      rs.push_back(json{{"id", id},
                        {"alive", r.alive},
                        {"version", r.version},
                        {"active", r.active.size()},
                        {"stats", r.stats}});
    }
    double wall = std::chrono::duration<double>(Clock::now() - started).count();
    return json{{"mode", cfg.mode},
                {"latest", latest},
                {"wall_s", wall},
                {"released_prompts", next_prompt},
                {"finished", finished},
                {"acked", acked},
                {"consumed", consumed},
                {"done", is_done()},
                {"duplicates", duplicates},
                {"lost_replies", lost_replies},
                {"mixed_version_trajectories", mixed},
                {"restarted", restarted},
                {"resumed", resumed},
                {"dead_rollouts", dead},
                {"repack_plans", repack_plans},
                {"repack_moves", repack_moves},
                {"moved_kv_tokens", moved_kv_tokens},
                {"move_failures", move_failures},
                {"returned", returned},
                {"abandoned", abandoned},
                {"recovering", recovering},
                {"recovered", recovered},
                {"recovery_restarted", recovery_restarted},
                {"rollout_restarts", rollout_restarts},
                {"cross_version_moves", cross_version},
                {"free_slot_s",
                 {{"loading", free_slots.loading},
                  {"draining", free_slots.draining},
                  {"budget", free_slots.budget},
                  {"end", free_slots.end},
                  {"other", free_slots.other}}},
                {"rollouts", rs}};
  }
};

core::Result<std::unique_ptr<Manager>> Manager::create(core::EventLoop& loop,
                                                       ManagerConfig config) {
  SLUICE_TRY(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->mode = parse_mode(config.mode).value();
  impl->cfg = std::move(config);
  if (impl->cfg.prompt_source == "task") {
    SLUICE_ASSIGN_OR_RETURN(rl::ArithmeticTask t, rl::ArithmeticTask::create(impl->cfg.task));
    impl->cfg.max_new_tokens =
        std::min<std::uint64_t>(impl->cfg.max_new_tokens, t.max_response_tokens());
    impl->task.emplace(std::move(t));
  }
  if (!impl->cfg.state_path.empty()) {
    SLUICE_ASSIGN_OR_RETURN(impl->db, ManagerDb::open(impl->cfg.state_path));
    SLUICE_TRY(impl->restore());
  }
  SLUICE_ASSIGN_OR_RETURN(core::Security security,
                          core::load_security(impl->cfg.security, "rollout-manager"));
  SLUICE_ASSIGN_OR_RETURN(impl->server, core::Server::create(loop, impl->cfg.listen, security));
  Impl* p = impl.get();
  // Every request's durable changes are committed before its reply is sent.
  auto guard = [p](auto fn) {
    return [fn, p](const core::Message& m) -> core::Result<core::Message> {
      core::Result<core::Message> reply = core::internal_error("unset");
      try {
        reply = fn(m);
      } catch (const std::exception& e) {
        reply = core::protocol_error(fmt::format("{}: {}", m.type, e.what()));
      }
      SLUICE_TRY(p->persist());
      return reply;
    };
  };
  // Who may send what (docs/architecture.md, "Authorization"); in curve mode another role is
  // refused before the handler runs, and nothing changes.
  // A rollout reports only as itself: its rollout id is its authenticated identity.
  auto as_itself = [](const core::Message& m) -> core::Status {
    if (!m.peer.authenticated) return {};
    auto id = m.body.find("id");
    if (id != m.body.end() && id->is_string() && id->get<std::string>() == m.peer.identity)
      return {};
    core::Status no = core::permission_denied(m.peer.identity + " may report only as itself");
    core::count_refusal("owner", m.peer.describe(), m.type + ": " + no.message());
    return no;
  };
  impl->server->on_sync("mgr.report",
                        [as_itself, report = guard([p](const core::Message& m) {
                                      return p->on_report(m);
                                    })](const core::Message& m) -> core::Result<core::Message> {
                          SLUICE_TRY(as_itself(m));
                          return report(m);
                        },
                        {core::kRoleRollout});
  impl->server->on_sync("mgr.collect",
                        guard([p](const core::Message& m) { return p->on_collect(m); }),
                        {core::kRoleActor});
  impl->server->on_sync("mgr.published",
                        guard([p](const core::Message& m) { return p->on_published(m); }),
                        {core::kRoleActor});
  impl->server->on_sync("mgr.status",
                        [p](const core::Message&) -> core::Result<core::Message> {
                          ManagerStatus st;
                          st.fields = p->status_json();
                          st.done = st.fields.value("done", false);
                          st.latest = st.fields.value("latest", std::uint64_t{0});
                          return encode(st);
                        },
                        {});  // any member: the launcher, the actor, tools
  impl->tick_timer = loop.every(Millis(100), [p] {
    p->check_heartbeats();
    p->persist().ignore();  // logged; retried with the next request
  });
  impl->sample_timer = loop.every(Millis(20), [p] { p->sample_free_slots(); });
  impl->repack_timer = loop.every(Millis(std::max<std::uint64_t>(10, impl->cfg.repack_interval_ms)),
                                  [p] { p->plan_repack_now(); });
  log::info("manager: mode {} listening on {}", impl->cfg.mode, impl->server->endpoint());
  return std::unique_ptr<Manager>(new Manager(std::move(impl)));
}

Manager::Manager(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Manager::~Manager() = default;
const std::string& Manager::endpoint() const {
  return impl_->server->endpoint();
}
bool Manager::done() const {
  return impl_->is_done();
}
std::string Manager::state_digest() const {
  return impl_->state_digest();
}

}  // namespace sluice::rollout
