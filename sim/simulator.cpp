// The simulator's event loop, the actor and the results (the rollouts: sim_rollout.cpp).
#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/checksum.hpp"
#include "rollout/mode_policy.hpp"
#include "sim/sim_state.hpp"

namespace sluice::sim {

namespace {

// What a label runs: a mode or a variant (rollout::parse_mode_variant), or sync-colocated (sync on
// every GPU, see colocated_input in the command line).
core::Result<rollout::ModeVariant> variant_of(const std::string& label) {
  if (label == "sync-colocated") return rollout::ModeVariant{"sync", true, "", ""};
  if (label == "partial-broadcast") {
    return rollout::ModeVariant{"partial-rollout", true, "budget", ""};
  }
  return rollout::parse_mode_variant(label);
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Sim::Sim(const SimInput& in, std::string label, rollout::Mode mode, bool repack,
         const Progress& progress)
    : in_(in), label_(std::move(label)), mode_(mode), repack_(repack), progress_(progress) {}

core::Status Sim::init() {
  SLUICE_ASSIGN_OR_RETURN(rollout::ModeVariant variant, variant_of(label_));
  in_.manager.mode = variant.mode;
  in_.manager.repack = repack_;
  if (!variant.admission.empty()) in_.manager.admission = variant.admission;
  if (!variant.tail.empty()) in_.manager.tail = variant.tail;
  // Nobody fails: 10^12 ms (32 years) outlasts any run, and still fits a nanosecond clock.
  in_.manager.heartbeat_timeout_ms = 1000ull * 1000 * 1000 * 1000;
  SLUICE_TRY(in_.manager.validate());
  SLUICE_TRY(in_.engine.validate());
  SLUICE_TRY(in_.sim.validate());
  if (in_.manager.prompts == 0) {
    return core::invalid_argument("simulate: manager.prompts must be set (the job must end)");
  }
  global_ = rollout::global_update(mode_);
  report_s_ = static_cast<double>(std::max<std::uint64_t>(1, in_.report_ms)) / 1000.0;
  SLUICE_ASSIGN_OR_RETURN(rollout::LengthSampler ls,
                          rollout::LengthSampler::create(in_.engine.lengths, in_.engine.seed));
  lengths_ = std::make_unique<rollout::LengthSampler>(std::move(ls));
  if (in_.engine.turns > 1) {
    SLUICE_ASSIGN_OR_RETURN(rl::EnvLatency env,
                            rl::EnvLatency::create(in_.env_latency, in_.engine.seed));
    env_latency_ = env;
  }
  SLUICE_ASSIGN_OR_RETURN(mgr_, rollout::ManagerState::create(in_.manager, nullptr, tp(0)));
  actor::BufferOptions bo;
  bo.group_size = in_.actor.group_size;
  bo.max_staleness = in_.actor.max_staleness;
  bo.policy = in_.actor.staleness_policy == "downweight" ? actor::StalenessPolicy::kDownweight
                                                         : actor::StalenessPolicy::kDrop;
  bo.stale_weight = in_.actor.stale_weight;
  buffer_ = std::make_unique<actor::ExperienceBuffer>(bo);

  placement_ = place(in_.sim, in_.rollouts);
  colocated_ = label_ == "sync-colocated";
  broadcast_ = label_ == "partial-broadcast";
  relay_ = relay_times(in_.sim, placement_.hosts, in_.actor.weight_bytes, in_.actor.chunk_bytes);
  if (colocated_) {
    // Trainer and rollouts on the same GPUs: a version is already where it is needed.
    for (auto& h : relay_) {
      h.first_s = 0;
      h.all_s = 0;
    }
  }
  rollouts_.resize(in_.rollouts);
  const std::vector<GpuType> timings = rollout_timings(in_);
  for (std::uint32_t i = 0; i < in_.rollouts; ++i) {
    SimRollout& r = rollouts_[i];
    r.id = fmt::format("rollout-{}", i);
    r.index = i;
    r.host = placement_.rollout_host[i];
    r.cap = in_.engine.capacity();
    r.t0 = timings[i].t0_ms / 1000.0;
    r.t1 = timings[i].t1_ms / 1000.0;
    r.prefill = timings[i].prefill_ms_per_token / 1000.0;
    // Rollouts report out of phase with each other, as independent processes do.
    const std::uint64_t h = core::chunk_checksum(r.id.data(), r.id.size());
    r.phase = static_cast<double>(h % 1000) / 1000.0 * report_s_;
    want_report(r, 0);  // joins
  }
  if (in_.sim.cpu.cores > 0) {
    cpu_slow_ = 0;  // forces the first update_cpu to set every rollout's speed
    update_cpu(0);
  }
  publish(0);  // the initial weights
  const double sample_s = std::max(0.1, report_s_);
  at(sample_s, Ev::kSample);
  if (rollout::repacks(mode_)) {
    // The manager's repack timer runs with repack off too: it also decides tails (sluice mode).
    at(static_cast<double>(in_.manager.repack_interval_ms) / 1000.0, Ev::kRepack);
  }
  return {};
}

rollout::Clock::time_point Sim::tp(double t) const {
  return rollout::Clock::time_point(
      std::chrono::duration_cast<rollout::Clock::duration>(std::chrono::duration<double>(t)));
}

void Sim::at(double t, Ev kind, std::uint32_t who, std::uint64_t token) {
  events_.push(Event{t, seq_++, kind, who, token});
}

// Wakes whoever the manager's last change may concern.
void Sim::observe_manager(double t) {
  const rollout::ManagerCounts& c = mgr_->counts();
  Seen now{mgr_->latest(), c.finished,        c.returned,     c.move_failures, c.restarted,
           c.repack_plans, c.moved_kv_tokens, c.lost_replies, c.abandoned,     c.acked};
  if (now.latest != seen_.latest || now.plans != seen_.plans || now.moved_kv != seen_.moved_kv) {
    wake(t, false);
  } else if (now.returned != seen_.returned || now.move_failures != seen_.move_failures ||
             now.restarted != seen_.restarted || now.lost != seen_.lost ||
             now.abandoned != seen_.abandoned) {
    wake(t, true);
  }
  if (now.finished != seen_.finished) want_collect(t);
  seen_ = now;
}

// ---- The actor (actor/trainer.cpp's loop, with a simulated trainer).

void Sim::want_collect(double t) {
  if (actor_busy_ || actor_done_) return;
  const double when = std::max(t, collect_at_ + static_cast<double>(in_.actor.collect_ms) / 1000.0);
  if (collect_pending_) return;
  collect_pending_ = true;
  at(when, Ev::kCollect);
}

void Sim::on_collect(double t) {
  collect_pending_ = false;
  if (actor_busy_ || actor_done_) return;
  collect_at_ = t;
  rollout::CollectRequest q;
  q.ack = std::move(ack_);
  q.have = std::move(have_);
  ack_.clear();
  have_.clear();
  q.consumed = consumed_;
  q.max = 512;
  rollout::CollectReply reply = mgr_->collect(q, tp(t));
  manager_done_ = reply.done;
  if (rollout::collect_opens_budget(mode_) && q.consumed > mgr_consumed_) {
    // Room ahead of the actor opened: rollouts with free slots may be given work.
    mgr_consumed_ = q.consumed;
    wake(t, true);
  }
  const bool got = !reply.trajectories.empty();
  for (auto& tr : reply.trajectories) {
    std::string id = tr.id;
    (void)buffer_->add(std::move(tr));  // a duplicate is refused and counted by the buffer
    have_.push_back(id);
    ack_.push_back(std::move(id));  // no checkpoints: acknowledged on receipt
  }
  const std::size_t need = in_.actor.batch_trajectories - batch_.size();
  for (auto& s : buffer_->take(need, version_)) {
    ++taken_;
    staleness_sum_ += static_cast<double>(s.staleness);
    staleness_max_ = std::max(staleness_max_, s.staleness);
    actor::count_staleness(staleness_counts_, s.staleness);
    if (s.trajectory.mixed_versions()) ++mixed_;
    batch_.push_back(std::move(s));
  }
  (void)buffer_->drain_dropped_ids();
  const std::uint64_t before = consumed_;
  consumed_ = taken_ + buffer_->counts().dropped_stale;
  observe_manager(t);
  if (consumed_ != before && rollout::collect_opens_budget(mode_)) {
    // The manager learns of it with the next collect: the actor's acks go at once.
    want_collect(t);
  }
  const bool full = batch_.size() >= in_.actor.batch_trajectories;
  const bool last = manager_done_ && buffer_->held() == 0;
  if (!full && !last) {
    if (got || !ack_.empty()) want_collect(t);
    return;  // else woken by the next finished trajectory
  }
  if (batch_.empty()) {  // the job's end, nothing left to train
    actor_done_ = true;
    actor_idle_s_ += t - idle_since_;
    return;
  }
  final_batch_ = !full;
  std::uint64_t tokens = 0;
  for (const auto& s : batch_) {
    if (s.weight > 0) tokens += s.trajectory.response_tokens.size();
  }
  actor_idle_s_ += t - idle_since_;
  actor_busy_ = true;
  const double ms =
      in_.actor.train_ms_fixed + in_.actor.train_ms_per_token * static_cast<double>(tokens);
  at(t + ms / 1000.0, Ev::kTrained);
}

void Sim::on_trained(double t) {
  std::uint64_t tokens = 0;
  for (const auto& s : batch_) {
    if (s.weight > 0) tokens += s.trajectory.response_tokens.size();
    ++trained_ids_[s.trajectory.id];
  }
  samples_ += batch_.size();
  trained_tokens_ += tokens;
  step_ends_.push_back(StepEnd{t, tokens});
  batch_.clear();
  last_progress_ = t;
  if (final_batch_) {
    // The last partial batch: the actor acknowledges and ends (no version follows it).
    rollout::CollectRequest q;
    q.ack = std::move(ack_);
    q.have = std::move(have_);
    q.consumed = consumed_;
    q.max = 0;
    (void)mgr_->collect(q, tp(t));
    actor_done_ = true;
    actor_busy_ = false;
    idle_since_ = t;
    return;
  }
  publish(t);
}

double Sim::broadcast_s() const {
  return static_cast<double>(in_.actor.weight_bytes) / (in_.sim.broadcast_gbps * 1e9);
}

void Sim::publish(double t) {
  actor_busy_ = true;
  ++version_;
  // Colocated: no staging copy, the rollouts reload from the trainer's own GPUs.
  double stall = colocated_ ? 0.0 : publish_stall_s(in_.sim, in_.actor.weight_bytes);
  if (broadcast_) {
    // The trainer sends the version itself, to every rollout at once: a global pause. Each
    // rollout stops generating for the broadcast and then loads it with its sequences in flight
    // (on_loaded re-prefills them). The manager hears of the version when the broadcast ends,
    // before any rollout reports it.
    stall = broadcast_s();
    at(t + stall, Ev::kPublished);
    for (auto& r : rollouts_) {
      if (r.done) continue;
      advance(r, t);
      add_block(r, t, stall, true);
      r.switching = version_;
      r.staged = version_;
      r.allow_active = true;
      reschedule_engine(r, t);  // in a load: its pending engine event is void
      at(r.blocks.back().until, Ev::kLoaded, r.index);
    }
    return;
  }
  at(t + stall, Ev::kPublished);
}

void Sim::on_published(double t) {
  published_at_[version_] = t;
  (void)mgr_->published(rollout::PublishedRequest{version_, consumed_});
  actor_busy_ = false;
  idle_since_ = t;
  observe_manager(t);
  on_collect(t);
}

// ---- The CPU model (SimulateConfig::cpu).

double Sim::cpu_demand() const {
  const CpuModel& c = in_.sim.cpu;
  double d = 0;
  for (const auto& r : rollouts_) {
    if (r.done) continue;
    d += c.report_cpu_ms / 1000.0 / report_s_;
    if (!r.active.empty() && !r.in_load()) d += c.step_cpu_ms / 1000.0 / r.nominal_step_s();
    if (r.pulling != 0) d += in_.sim.local_gbps * c.cpu_s_per_gb;
  }
  return d;
}

double Sim::cpu_slowdown() const {
  if (!(in_.sim.cpu.cores > 0)) return 1;
  return std::max(1.0, cpu_demand() / in_.sim.cpu.cores);
}

void Sim::update_cpu(double t) {
  const double f = cpu_slowdown();
  if (std::fabs(f - cpu_slow_) < 1e-9) return;
  cpu_slow_ = f;
  // The worker's reports every report period stop generation for report_stall_ms each.
  const double stall = in_.sim.cpu.report_stall_ms / 1000.0 * f;
  const double slow = f * (report_s_ + stall) / report_s_;
  for (auto& r : rollouts_) {
    advance(r, t);  // at the old speed up to now
    r.slow = slow;
    reschedule_engine(r, t);
  }
}

// ---- The loop.

core::Result<ModeResult> Sim::run() {
  const double started = wall_now();
  double last_line = started;
  double t = 0;
  while (!events_.empty() && !actor_done_) {
    const Event e = events_.top();
    events_.pop();
    t = e.t;
    ++n_events_;
    if (t > in_.sim.max_sim_s) {
      return core::timeout_error(fmt::format(
          "simulate {}: passed max_sim_s ({} s of simulated time) with {} of {} trajectories "
          "finished",
          label_, in_.sim.max_sim_s, mgr_->counts().finished,
          in_.manager.prompts * in_.manager.group_size));
    }
    if (t - last_progress_ > in_.sim.stall_s) {
      std::uint32_t gen = 0, loading = 0, other = 0;
      for (const auto& r : rollouts_) {
        (r.in_load() ? loading : r.active.empty() ? other : gen) += 1;
      }
      return core::timeout_error(fmt::format(
          "simulate {}: no progress for {} s of simulated time (t = {:.1f} s): {} of {} "
          "trajectories finished, {} trained, actor at version {} with {} in its buffer and {} in "
          "its batch; rollouts: {} generating, {} loading, {} without work",
          label_, in_.sim.stall_s, t, mgr_->counts().finished,
          in_.manager.prompts * in_.manager.group_size, samples_, version_, buffer_->held(),
          batch_.size(), gen, loading, other));
    }
    switch (e.kind) {
      case Ev::kEngine: {
        SimRollout& r = rollouts_[e.who];
        if (e.token == r.engine_token) on_engine(r, t);
        break;
      }
      case Ev::kReport: {
        SimRollout& r = rollouts_[e.who];
        if (e.token == r.report_token) on_report(r, t);
        break;
      }
      case Ev::kPulled:
        on_pulled(rollouts_[e.who], t);
        break;
      case Ev::kEnvAnswer:
        on_env_answer(rollouts_[e.who], e.token, t);
        break;
      case Ev::kLoaded:
        on_loaded(rollouts_[e.who], t);
        break;
      case Ev::kCollect:
        on_collect(t);
        break;
      case Ev::kTrained:
        on_trained(t);
        break;
      case Ev::kPublished:
        on_published(t);
        break;
      case Ev::kRepack:
        mgr_->plan_repack();
        observe_manager(t);
        at(t + static_cast<double>(in_.manager.repack_interval_ms) / 1000.0, Ev::kRepack);
        break;
      case Ev::kSample:
        // The manager's tick: nobody dies here, but resumable states whose version no rollout
        // holds any more restart (or, under tail continue or auto, continue on a newer one).
        mgr_->check_heartbeats(tp(t));
        mgr_->sample_free_slots(tp(t));
        at(t + std::max(0.1, report_s_), Ev::kSample);
        break;
    }
    if (!fatal_.is_ok()) return fatal_;
    if (in_.sim.cpu.cores > 0) update_cpu(t);
    if (progress_ && in_.sim.progress_s > 0 && (n_events_ & 1023) == 0) {
      const double w = wall_now();
      if (w - last_line >= in_.sim.progress_s) {
        last_line = w;
        progress_(
            fmt::format("simulate {}: {:.0f} s simulated, {} of {} trajectories trained, "
                        "version {}, {} events ({:.0f} s)",
                        label_, t, samples_, in_.manager.prompts * in_.manager.group_size, version_,
                        n_events_, w - started));
      }
    }
  }
  if (!actor_done_) {
    return core::internal_error(fmt::format(
        "simulate {}: nothing left to happen at t = {:.1f} s with {} of {} trajectories trained",
        label_, t, samples_, in_.manager.prompts * in_.manager.group_size));
  }
  for (auto& r : rollouts_)
    advance(r, t);
  ModeResult res = results(t);
  res.run_s = wall_now() - started;
  return res;
}

bool sim_only_label(const std::string& label) {
  return label == "sync-colocated" || label == "partial-broadcast" || limit_label(label);
}

bool limit_label(const std::string& label) {
  return label == "limit" || label == "steady-limit";
}

core::Result<ModeResult> simulate_mode(const SimInput& in, const std::string& label,
                                       const Progress& progress) {
  if (label == "limit") return limit_result(in);
  if (label == "steady-limit") return steady_limit_result(in);
  SLUICE_ASSIGN_OR_RETURN(rollout::ModeVariant variant, variant_of(label));
  SLUICE_ASSIGN_OR_RETURN(rollout::Mode mode, rollout::parse_mode(variant.mode));
  Sim sim(in, label, mode, variant.repack && in.manager.repack && rollout::repacks(mode), progress);
  SLUICE_TRY(sim.init());
  return sim.run();
}

}  // namespace sluice::sim
