// The simulator's rollouts: a modelled engine (continuous batching, decode steps as a fluid) and
// the rollout worker's handling of the manager's replies, as rollout/worker.cpp does it.
#include <algorithm>
#include <cmath>

#include "rollout/worker.hpp"
#include "rollout/worker_state.hpp"
#include "sim/sim_state.hpp"
#include "sim/turns.hpp"

namespace sluice::sim {

namespace {

// Token ids and log-probabilities of generated tokens are not modelled: only their count matters
// (the manager's message bounds, KV use and the trained tokens all count tokens).
void fill_generated(rollout::SequenceState& s, std::uint64_t n) {
  s.generated.resize(n, 0);
  s.logprobs.resize(n, -1.0f);
}

bool can_admit(const SimRollout& r, std::uint64_t kv) {
  return r.active.size() < r.cap.max_sequences && kv <= r.cap.max_kv_tokens &&
         r.kv_used() <= r.cap.max_kv_tokens - kv;
}

}  // namespace

void add_block(SimRollout& r, double t, double dur, bool loading) {
  const double start = r.blocks.empty() ? t : std::max(t, r.blocks.back().until);
  r.blocks.push_back(Block{start + dur, loading});
}

std::uint64_t SimRollout::generated(const Seq& q) const {
  const double steps = std::floor(S - q.s0 + 1e-9);
  const auto gen = q.st.generated.size() + static_cast<std::uint64_t>(std::max(0.0, steps));
  return std::min(q.target, gen);
}

std::uint64_t SimRollout::kv_used() const {
  std::uint64_t kv = 0;
  for (const auto& q : active)
    kv += q.st.prompt_tokens.size() + generated(q);
  return kv;
}

// Brings the rollout's decode counter and its time accounts up to `t`. Nothing about the batch
// changes in between (every change calls this first).
void Sim::advance(SimRollout& r, double t) {
  while (r.clock < t) {
    if (!r.blocks.empty()) {
      const Block b = r.blocks.front();
      const double end = std::min(t, b.until);
      if (end > r.clock && r.first_load >= 0) (b.loading ? r.load_s : r.gen_s) += end - r.clock;
      r.clock = std::max(r.clock, end);
      if (b.until <= t) r.blocks.pop_front();
      continue;
    }
    const double d = t - r.clock;
    if (!r.active.empty()) {
      const double steps = d / r.step_s();
      r.S += steps;
      r.gen_s += d;
      r.occ_s += d * static_cast<double>(r.active.size()) / r.cap.max_sequences;
      r.tokens += static_cast<std::uint64_t>(steps * static_cast<double>(r.active.size()));
    } else if (r.first_load >= 0) {
      (r.state == "barrier" ? r.barrier_s : r.idle_s) += d;
    }
    r.clock = t;
  }
}

// The next event of the engine: when its next sequence finishes.
void Sim::reschedule_engine(SimRollout& r, double t) {
  ++r.engine_token;
  if (r.active.empty() || r.in_load()) return;
  double steps = INFINITY;
  for (const auto& q : r.active) {
    const double at_s = q.s0 + static_cast<double>(q.target - q.st.generated.size());
    steps = std::min(steps, std::max(0.0, std::ceil(at_s - r.S - 1e-9)));
  }
  const double free_from = r.blocks.empty() ? t : std::max(t, r.blocks.back().until);
  at(free_from + steps * r.step_s(), Ev::kEngine, r.index, r.engine_token);
}

rollout::SequenceState Sim::take_out(SimRollout& r, std::size_t k) {
  Seq q = std::move(r.active[k]);
  r.active.erase(r.active.begin() + static_cast<std::ptrdiff_t>(k));
  const std::uint64_t n = std::min(
      q.target, q.st.generated.size() +
                    static_cast<std::uint64_t>(std::max(0.0, std::floor(r.S - q.s0 + 1e-9))));
  fill_generated(q.st, n);
  return std::move(q.st);
}

void Sim::finish_done_sequences(SimRollout& r, double t) {
  bool any = false;
  for (std::size_t k = 0; k < r.active.size();) {
    if (r.generated(r.active[k]) < r.active[k].target) {
      ++k;
      continue;
    }
    const bool last = r.active[k].last_turn;
    rollout::SequenceState s = take_out(r, k);
    if (!last) {
      call_environment(r, std::move(s), t);
      continue;
    }
    r.finished.push_back(rollout::to_trajectory(s, rollout::sim_reward(s), r.id));
    any = true;
  }
  if (!any) return;
  last_progress_ = t;
  // The worker reports at once when it has run dry; otherwise at its next tick.
  want_report(r, t, r.active.empty() && r.queue.empty());
}

// Admits a new or migrated sequence: its prompt (and generated tokens) are prefilled first.
void Sim::admit(SimRollout& r, rollout::SequenceState s, double t) {
  const std::uint64_t kv = s.kv_tokens();
  bool migrated = !s.generated.empty();
  // An episode back from its environment prefills only its answer (and the call) when its KV
  // cache is of these weights, as the worker does.
  std::uint64_t cached = 0;
  if (s.kv) {
    if (s.kv->version == r.version && s.kv->positions < kv) {
      cached = s.kv->positions;
      ++r.env_kv_kept;
      migrated = false;
    } else {
      ++r.env_reprefills;
    }
    s.kv.reset();
  }
  const double fill = static_cast<double>(kv - cached) * r.prefill;
  add_block(r, t, fill, false);
  if (migrated) r.reprefill_s += fill;
  if (s.versions.empty() || s.versions.back() != r.version) s.versions.push_back(r.version);
  Seq q;
  std::tie(q.target, q.last_turn) = turn_end(s);
  q.target = std::max<std::uint64_t>(q.target, s.generated.size());
  q.s0 = r.S;
  q.st = std::move(s);
  r.active.push_back(std::move(q));
}

std::pair<std::uint64_t, bool> Sim::turn_end(const rollout::SequenceState& s) const {
  const std::uint64_t total = std::min(lengths_->length(s.trajectory_id), s.max_new_tokens);
  if (!env_latency_) return {total, true};
  const TurnEnd e =
      sim::turn_end(total, in_.engine.turns, s.turns, s.generated.size(), in_.engine.env_tokens);
  return {e.end, e.last};
}

void Sim::call_environment(SimRollout& r, rollout::SequenceState s, double t) {
  ++r.env_calls;
  const std::uint64_t token = ++r.next_wait;
  const double delay = env_latency_->delay_ms(s.trajectory_id, s.turns) / 1000.0;
  // Its modelled KV cache waits with it: the shape only.
  s.kv.emplace();
  s.kv->version = r.version;
  s.kv->positions = static_cast<std::uint32_t>(s.kv_tokens() - 1);
  r.waiting[token] = SimRollout::Waiting{std::move(s), t};
  at(t + delay, Ev::kEnvAnswer, r.index, token);
}

void Sim::on_env_answer(SimRollout& r, std::uint64_t token, double t) {
  auto it = r.waiting.find(token);
  if (it == r.waiting.end()) return;  // abandoned meanwhile
  advance(r, t);
  rollout::SequenceState s = std::move(it->second.st);
  r.env_wait_s += t - it->second.since;
  r.waiting.erase(it);
  fill_generated(s, s.generated.size() + in_.engine.env_tokens);
  ++s.turns;
  r.queue.push_front(std::move(s));
  last_progress_ = t;
  admit_queued(r, t);
  reschedule_engine(r, t);
  want_report(r, t);
}

void Sim::admit_queued(SimRollout& r, double t) {
  if (r.in_load()) return;
  bool any = false;
  while (!r.queue.empty() && can_admit(r, r.queue.front().kv_tokens())) {
    admit(r, std::move(r.queue.front()), t);
    r.queue.pop_front();
    any = true;
  }
  if (any) {
    last_progress_ = t;
    want_report(r, t);
  }
}

void Sim::on_engine(SimRollout& r, double t) {
  advance(r, t);
  finish_done_sequences(r, t);
  admit_queued(r, t);
  reschedule_engine(r, t);
}

double Sim::next_tick(const SimRollout& r, double t) const {
  const double k = std::ceil((t - r.phase) / report_s_ - 1e-9);
  return r.phase + std::max(0.0, k) * report_s_;
}

// Asks for a report at the rollout's next tick (or at once), unless one is due sooner.
void Sim::want_report(SimRollout& r, double t, bool now) {
  if (r.done) return;
  const double when = now ? t : next_tick(r, t);
  if (r.report_pending && r.report_at <= when) return;
  r.report_pending = true;
  r.report_at = when;
  at(when, Ev::kReport, r.index, ++r.report_token);
}

void Sim::on_report(SimRollout& r, double t) {
  r.report_pending = false;
  if (r.done) return;
  if (r.in_load()) return;  // the worker is inside load_version: it reports once loaded
  advance(r, t);
  finish_done_sequences(r, t);
  r.report_pending = false;  // this is the report: one asked for meanwhile is void
  ++r.report_token;
  rollout::ReportRequest q;
  q.id = r.id;
  q.incarnation = "sim";
  q.version = r.version;
  q.staged = std::max(r.staged, r.version);
  q.capacity = r.cap;
  for (const auto& a : r.active)
    q.active.push_back({a.st.trajectory_id, a.st.prompt_tokens.size() + r.generated(a)});
  for (const auto& s : r.queue)
    q.queued.push_back(s.trajectory_id);
  for (const auto& [token, w] : r.waiting)
    q.waiting.push_back(w.st.trajectory_id);
  const std::size_t n = rollout::fitting_prefix(r.finished);
  q.finished.assign(std::make_move_iterator(r.finished.begin()),
                    std::make_move_iterator(r.finished.begin() + static_cast<std::ptrdiff_t>(n)));
  r.finished.erase(r.finished.begin(), r.finished.begin() + static_cast<std::ptrdiff_t>(n));
  q.exported = std::move(r.exported);
  q.refused = std::move(r.refused);
  q.returned = std::move(r.returned);
  r.exported.clear();
  r.refused.clear();
  r.returned.clear();
  const bool has_work = !q.active.empty() || !q.queued.empty() || !q.waiting.empty();
  const bool changed_view = q.version != r.reported_version || has_work != r.reported_work;
  r.reported_version = q.version;
  r.reported_work = has_work;
  if (core::Status st = mgr_->check_report(q); !st.is_ok()) {
    fatal_ = st.with_context("simulate: a rollout's report was refused");
    return;
  }
  rollout::ReportReply reply = mgr_->report(std::move(q), tp(t));
  ++n_reports_;
  observe_manager(t);
  // In the global-update modes others' load decisions read this rollout's version and work.
  if (global_ && changed_view) wake(t, false);
  apply(r, std::move(reply), t);
  after_report(r, t);
}

// What the worker does with a reply (rollout/worker.cpp, apply()).
void Sim::apply(SimRollout& r, rollout::ReportReply reply, double t) {
  if (reply.rejoin) {
    fatal_ = core::internal_error("simulate: the manager declared rollout " + r.id +
                                  " dead; no rollout fails in a simulation");
    return;
  }
  r.done = reply.done;
  r.state = reply.state;
  if (reply.unqueue) {
    for (auto& s : r.queue)
      r.returned.push_back(std::move(s));
    r.queue.clear();
  }
  auto abandon = [&](const std::string& id) {
    auto it = std::find_if(r.queue.begin(), r.queue.end(),
                           [&](const rollout::SequenceState& s) { return s.trajectory_id == id; });
    rollout::SequenceState s;
    if (it != r.queue.end()) {
      s = std::move(*it);
      r.queue.erase(it);
    } else {
      auto a = std::find_if(r.active.begin(), r.active.end(),
                            [&](const Seq& q) { return q.st.trajectory_id == id; });
      auto w = std::find_if(r.waiting.begin(), r.waiting.end(),
                            [&](const auto& e) { return e.second.st.trajectory_id == id; });
      if (w != r.waiting.end()) {
        s = std::move(w->second.st);
        s.kv.reset();
        r.waiting.erase(w);
      } else if (a == r.active.end()) {
        return;  // finished meanwhile
      } else {
        s = take_out(r, static_cast<std::size_t>(a - r.active.begin()));
      }
    }
    rl::Trajectory tr = rollout::to_trajectory(s, 0.0, r.id);
    tr.abandoned = true;
    r.finished.push_back(std::move(tr));
  };
  for (const auto& id : reply.abandon)
    abandon(id);
  if (reply.abandon_before > 0) {
    std::vector<std::string> stale;
    for (const auto& q : r.active) {
      const std::uint64_t first = q.st.versions.empty() ? r.version : q.st.versions.front();
      if (first < reply.abandon_before) stale.push_back(q.st.trajectory_id);
    }
    for (const auto& id : stale)
      abandon(id);
  }
  for (const auto& id : reply.export_ids) {
    auto a = std::find_if(r.active.begin(), r.active.end(),
                          [&](const Seq& q) { return q.st.trajectory_id == id; });
    if (a != r.active.end())
      r.exported.push_back(take_out(r, static_cast<std::size_t>(a - r.active.begin())));
  }
  for (auto& s : reply.import) {
    const std::uint64_t v = s.versions.empty() ? r.version : s.versions.back();
    const bool continues = std::find(reply.continue_ids.begin(), reply.continue_ids.end(),
                                     s.trajectory_id) != reply.continue_ids.end();
    if (!rollout::WorkerState::admits_import(v, r.version, continues,
                                             can_admit(r, s.kv_tokens()))) {
      r.refused.push_back(std::move(s));
      continue;
    }
    admit(r, std::move(s), t);
  }
  for (auto& s : reply.assign)
    r.queue.push_back(std::move(s));
  r.latest = std::max(r.latest, reply.latest);
  prefetch(r, t);
  if (reply.load > r.version) request_load(r, reply.load, reply.allow_active, t);
  admit_queued(r, t);
  reschedule_engine(r, t);
}

// Follows the newest version (the worker's prefetch()). Without a copy of its own (local_gbps 0,
// sim/weights.hpp) the "pull" ends when the host's relay holds the version, and copies nothing.
void Sim::prefetch(SimRollout& r, double t) {
  if (broadcast_) return;  // versions come by the trainer's broadcast (publish())
  if (r.latest <= std::max(r.version, r.staged) || r.pulling != 0) return;
  auto pub = published_at_.find(r.latest);
  if (pub == published_at_.end()) return;  // not published yet as far as the model knows
  r.pulling = r.latest;
  const double from = std::max(t, pub->second + relay_[r.host].all_s);
  // With the CPU model a pull's time is fixed when it starts, at the slowdown then (its own
  // demand counted).
  r.pull_done =
      from + (colocated_ ? 0.0 : pull_s(in_.sim, in_.actor.weight_bytes) * cpu_slowdown());
  at(r.pull_done, Ev::kPulled, r.index);
}

// The worker's load_version(): waits for the pull (a weight stall), then switches to the newest
// version it holds.
void Sim::request_load(SimRollout& r, std::uint64_t v, bool allow_active, double t) {
  if (broadcast_) return;  // every rollout loads each version as it is broadcast (publish())
  r.allow_active = allow_active;
  if (r.staged >= v) {
    r.switching = r.staged;
    add_block(r, t, switch_s(in_.sim, in_.actor.weight_bytes, in_.actor.chunk_bytes), true);
    at(r.blocks.back().until, Ev::kLoaded, r.index);
    return;
  }
  if (r.pulling < v) {
    // The background pull is of an older version (or none runs): the newest follows it.
    r.latest = std::max(r.latest, v);
    prefetch(r, t);
  }
  r.switching = v;  // at least; set exactly when the pull lands
  if (!r.load_after_pull) r.load_asked = t;
  r.load_after_pull = true;
  add_block(r, t, std::max(0.0, (r.pulling ? r.pull_done : t) - t), true);
}

void Sim::on_pulled(SimRollout& r, double t) {
  advance(r, t);
  r.staged = std::max(r.staged, r.pulling);
  r.pulling = 0;
  last_progress_ = t;
  if (r.load_after_pull && r.staged >= r.switching) {
    // Without a copy of its own, the GPUs loaded their shares while the relay received the
    // version, from the ask on (the rollout has generated nothing since): the load ends as
    // load_window says. With one, they load from it now that the pull has ended.
    r.load_after_pull = false;
    r.switching = r.staged;
    auto pub = published_at_.find(r.staged);
    double end = t + switch_s(in_.sim, in_.actor.weight_bytes, in_.actor.chunk_bytes);
    if (in_.sim.local_gbps == 0 && !colocated_ && pub != published_at_.end()) {
      const LoadWindow w = load_window(in_.sim, relay_[r.host], in_.actor.weight_bytes,
                                       in_.actor.chunk_bytes, r.load_asked - pub->second);
      end = pub->second + w.end_s;
    }
    const double from = r.blocks.empty() ? t : std::max(t, r.blocks.back().until);
    add_block(r, t, std::max(0.0, end - from), true);
    at(r.blocks.back().until, Ev::kLoaded, r.index);
    return;
  }
  prefetch(r, t);
  if (r.load_after_pull) {
    r.blocks.back().until = std::max(r.blocks.back().until, r.pull_done);
    return;
  }
  want_report(r, t);  // it holds a newer version: the manager's decisions may change
}

void Sim::on_loaded(SimRollout& r, double t) {
  advance(r, t);
  if (r.switching < r.version) ++regressions_;
  r.version = r.switching;
  r.switching = 0;
  ++r.loads;
  if (r.first_load < 0) r.first_load = t;
  last_progress_ = t;
  if (r.allow_active) {
    // As the engine does (rollout/sim_engine.cpp, load_weights): a sequence continued on new
    // weights has its KV cache recomputed (re-prefilled) before its next token.
    std::uint64_t refill = 0;
    for (auto& q : r.active) {
      if (q.st.versions.back() == r.version) continue;
      q.st.versions.push_back(r.version);
      refill += q.st.prompt_tokens.size() + r.generated(q);
    }
    if (refill > 0) add_block(r, t, static_cast<double>(refill) * r.prefill, false);
  }
  // The worker's next report comes report_ms after load_version returned.
  want_report(r, t + report_s_ * 0.5);
  prefetch(r, t);
  admit_queued(r, t);
  reschedule_engine(r, t);
}

void Sim::after_report(SimRollout& r, double t) {
  if (r.done || r.in_load()) return;
  const bool more =
      !r.finished.empty() || !r.exported.empty() || !r.refused.empty() || !r.returned.empty();
  if (more) {
    want_report(r, t + report_s_ * 0.5);
  } else if (repack_ && !r.active.empty()) {
    want_report(r, t + static_cast<double>(in_.sim.refresh_ms) / 1000.0);
  }
  // Otherwise it sleeps until something changes (its own engine, or the manager: wake()).
}

void Sim::wake(double t, bool only_with_room) {
  for (auto& r : rollouts_) {
    if (r.done || r.in_load()) continue;
    if (only_with_room && r.active.size() + r.queue.size() >= r.cap.max_sequences) continue;
    want_report(r, t);
  }
}

}  // namespace sluice::sim
