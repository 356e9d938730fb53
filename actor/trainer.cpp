#include "actor/trainer.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "actor/batch_recorder.hpp"
#include "actor/checkpoint.hpp"
#include "actor/consumed.hpp"
#include "actor/gpt_policy.hpp"
#include "actor/policy.hpp"
#include "actor/publish_dtype.hpp"
#include "actor/publisher.hpp"
#include "actor/sim_policy.hpp"
#include "actor/trainer_state.hpp"
#include "core/log.hpp"
#include "core/metrics.hpp"
#include "core/units.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"
#include "weightstore/client.hpp"
#include "wire/messaging.hpp"
#include "wire/transfer.hpp"

namespace sluice::actor {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

namespace {
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// This process's epoch for the manager: random per start, so a restart reads as a new epoch.
std::string random_epoch() {
  std::random_device rd;
  std::uint64_t x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  x ^= static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  x ^= static_cast<std::uint64_t>(::getpid()) << 16;
  return fmt::format("{:016x}", x);
}

// A resumed actor asks the store for its latest version for this long (it may be restarting).
constexpr Millis kStoreLatestWait{10000};
}  // namespace

// The accounting a checkpoint keeps is the trainer's TrainerTotals, held as it is.
struct Trainer::Impl : TrainerTotals {
  // Exported on the role's /metrics (core::process_metrics()).
  core::Counter& m_steps =
      core::process_metrics().counter("sluice_actor_steps_total", "training steps taken");
  core::Counter& m_tokens = core::process_metrics().counter("sluice_actor_trained_tokens_total",
                                                            "response tokens trained on");
  core::Gauge& m_version =
      core::process_metrics().gauge("sluice_actor_version", "the newest version published");
  core::EventLoop* loop = nullptr;
  TrainerConfig cfg;
  std::vector<std::string> environment;
  std::unique_ptr<rollout::ManagerClient> manager;
  std::unique_ptr<core::TransferEngine> transfer;
  std::unique_ptr<weightstore::StoreClient> store;
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<ExperienceBuffer> buffer;
  std::unique_ptr<Policy> policy;
  // The batch record (policy gpt, record_batches on, batches_path set); else null.
  std::unique_ptr<BatchRecorder> recorder;
  // publish_dtype bf16: the rounded weights of the version being published (the publisher copies
  // them into its staging memory before publish() returns).
  std::vector<std::uint8_t> publish_storage;
  std::unique_ptr<std::ofstream> metrics;  // metrics.jsonl, one line per step
  std::atomic<bool> stopping{false};

  // The decisions: the version counter, acknowledgements, checkpoints due, the loop's next step.
  std::optional<TrainerState> state;

  // The manager protocol (see trainer.hpp).
  std::string epoch = random_epoch();

  // Checkpoints.
  std::uint64_t sequence = 0, restarts = 0;
  std::optional<std::uint64_t> resumed_from_step;
  std::string policy_file;  // of the newest checkpoint (empty: none)

  // Accounting.
  Clock::time_point started;
  // (The rest of it, kept in checkpoints, is TrainerTotals.) Trajectories the manager may
  // replace: those taken and those dropped as stale.
  std::uint64_t consumed = 0;
  // Samples taken since this process started, by staleness (not kept in checkpoints).
  StalenessCounts staleness_counts;
  json last_by_terms, initial_by_terms;  // the evaluations' accuracy_by_terms (null: none)

  // Store heartbeats: from collect() and, so that a long training step or weight load does not
  // starve them, from a loop timer (see beat()). Last member: destroyed first.
  Clock::time_point last_beat{};
  std::unique_ptr<core::EventLoop::Timer> beat_timer;

  void beat() {
    publisher->heartbeat();
    last_beat = Clock::now();
  }

  // A consumed trajectory: acknowledged after the next checkpoint (without checkpoints, it was
  // acknowledged on receipt).
  void consume(const std::string& id, bool trained) { state->consume(id, trained); }

  core::Status publish_next() {
    std::uint64_t version = state->publish_begin(Clock::now());
    while (true) {
      auto t0 = Clock::now();
      auto views = tensors_to_publish(policy->tensors(), cfg.publish_dtype, publish_storage);
      if (!views.is_ok()) return views.status().with_context("actor");
      auto m = publisher->publish(version, *views);
      publish_s += seconds(Clock::now() - t0);
      if (m.is_ok()) {
        m_version.set(static_cast<double>(version));
        break;
      }
      switch (state->publish_failed(Clock::now(), m.status().code(), stopping.load())) {
        case TrainerState::PublishRetry::kSameVersion:
          log::warn("actor: publish of version {} failed ({}); retrying", version,
                    m.status().to_string());
          wait_for(static_cast<double>(kStoreRetryPause.count()));
          continue;
        case TrainerState::PublishRetry::kNextVersion:
          log::warn("actor: version {} is taken in the store ({}); skipping it", version,
                    m.status().message());
          version = state->version();
          continue;
        case TrainerState::PublishRetry::kFail:
          return m.status().with_context(fmt::format("publish version {}", version));
      }
    }
    auto r = manager->published(rollout::PublishedRequest{version, consumed},
                                Millis(cfg.manager_call_ms));
    if (!r.is_ok()) {
      log::warn("actor: telling the manager about version {} failed: {}", version,
                r.status().to_string());
    }
    return {};
  }

  // One mgr.collect; `max` trajectories at most. Acknowledgements and `have` are dropped only
  // once a call got through.
  core::Result<rollout::CollectReply> call_collect(std::size_t max, Millis timeout) {
    rollout::CollectRequest q;
    q.ack = state->ack();
    q.have = state->have();
    q.consumed = consumed;
    q.max = max;
    q.epoch = epoch;
    bool answered = false;
    auto r = manager->collect(q, timeout, &answered);
    if (answered) state->call_answered();
    return r;
  }

  core::Status collect() {
    beat();
    auto r = call_collect(512, Millis(cfg.manager_call_ms));
    if (!r.is_ok()) return state->collect_failed(Clock::now(), r.status());
    state->collect_reply(Clock::now(), r->done, !r->trajectories.empty());
    for (auto& t : r->trajectories) {
      std::string id = t.id;
      auto st = buffer->add(std::move(t));
      state->received(id, st.code() == core::Code::kAlreadyExists);
    }
    return {};
  }

  // Lets time pass with the loop running: the publisher serves reads of the versions it holds
  // (over TCP a GET is answered by the holder's own progress) and keeps its heartbeats.
  void wait_for(double ms) {
    auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double, std::milli>(ms));
    loop->run_until([] { return false; }, until);
  }

  core::Status train(const std::vector<Sample>& batch) {
    std::uint64_t tokens = 0;
    double stale = 0;
    for (const auto& s : batch) {
      stale += static_cast<double>(s.staleness);
      if (s.weight <= 0) continue;
      tokens += s.trajectory.response_tokens.size();
    }
    auto t0 = Clock::now();
    if (recorder) recorder->before_step(*policy->learner());
    SLUICE_ASSIGN_OR_RETURN(json stats, policy->train(batch, [this](double ms) { wait_for(ms); }));
    train_s += seconds(Clock::now() - t0);
    trained_tokens += tokens;
    m_tokens.inc(static_cast<double>(tokens));
    m_steps.inc();
    trained_samples += batch.size();
    state->trained(Clock::now());
    const std::uint64_t steps = state->steps();
    if (recorder) {
      recorder->after_step(steps, state->version(), batch, *policy->learner(),
                           stats.value("loss", 0.0), stats.value("grad_norm", 0.0));
    }
    for (const auto& s : batch)
      consume(s.trajectory.id, true);
    if (cfg.eval_every > 0 && steps % cfg.eval_every == 0) {
      SLUICE_ASSIGN_OR_RETURN(json ev, policy->evaluate());
      stats.update(ev);
      if (ev.contains("accuracy")) last_accuracy = ev["accuracy"].get<double>();
      last_by_terms = ev.value("accuracy_by_terms", json());
    }
    double since = std::max(1e-9, seconds(Clock::now() - started));
    stats["t"] = since + cfg.start_offset_s;
    stats["step"] = steps;
    stats["version"] = state->version() + 1;
    stats["tokens_per_s"] = static_cast<double>(trained_tokens) / since;
    stats["trained_tokens"] = trained_tokens;  // for steady throughput (sluice bench e2e)
    stats["staleness_mean"] = batch.empty() ? 0.0 : stale / static_cast<double>(batch.size());
    stats["samples"] = trained_samples;
    if (metrics) *metrics << stats.dump() << std::endl;
    log::info("actor: step {}: {}", steps, stats.dump());
    return {};
  }

  // Evaluates and writes a metrics line of its own (before RL and at the end).
  core::Status evaluate_now() {
    SLUICE_ASSIGN_OR_RETURN(json ev, policy->evaluate());
    if (!ev.contains("accuracy")) return {};
    last_accuracy = ev["accuracy"].get<double>();
    last_by_terms = ev.value("accuracy_by_terms", json());
    if (initial_accuracy < 0) {
      initial_accuracy = last_accuracy;
      initial_by_terms = last_by_terms;
    }
    ev["t"] = seconds(Clock::now() - started) + cfg.start_offset_s;
    ev["step"] = state->steps();
    ev["version"] = state->version();
    ev["samples"] = trained_samples;
    if (metrics) *metrics << ev.dump() << std::endl;
    log::info("actor: held-out evaluation after {} steps: {}", state->steps(), ev.dump());
    return {};
  }

  // ---- checkpoints ----

  std::string in_checkpoint_dir(const std::string& name) const {
    return (std::filesystem::path(cfg.checkpoint_dir) / name).string();
  }

  // Writes a checkpoint when one is due (`force`: at the end), if anything changed since the
  // last. Call with no partial batch in hand: what was taken is then trained on.
  core::Status maybe_checkpoint(bool force) {
    if (!state->checkpoint_due(Clock::now(), force)) return {};
    return write_checkpoint_now();
  }

  core::Status write_checkpoint_now() {
    auto t0 = Clock::now();
    CheckpointState s;
    s.sequence = sequence + 1;
    s.policy = cfg.policy;
    s.policy_file = fmt::format("policy-{:06}.state", s.sequence);
    s.steps = state->steps();
    s.version = state->version();
    s.restarts = restarts;
    static_cast<TrainerTotals&>(s) = *this;
    s.initial_by_terms = initial_by_terms.dump();
    s.last_by_terms = last_by_terms.dump();
    static_cast<KeptBufferCounts&>(s) = buffer->counts_without_held();
    state->consumed().save(s);

    // The record first: a checkpoint at step s finds steps 1..s in it after any kill.
    if (recorder) recorder->sync();
    const std::string path = in_checkpoint_dir(s.policy_file);
    SLUICE_TRY(policy->save_state(path).with_context("actor checkpoint"));
    SLUICE_TRY(sync_file(path).with_context("actor checkpoint"));
    SLUICE_TRY(write_checkpoint(cfg.checkpoint_dir, s));
    // actor.ckpt names the new policy file now; the old one may go.
    if (!policy_file.empty() && policy_file != s.policy_file) {
      std::error_code ec;
      std::filesystem::remove(in_checkpoint_dir(policy_file), ec);
    }
    sequence = s.sequence;
    policy_file = s.policy_file;
    state->checkpoint_written(Clock::now());
    log::info(
        "actor: checkpoint {} at step {}, version {} ({} consumed ids, {} listed one by one, "
        "{:.3f} s)",
        sequence, s.steps, s.version, state->consumed().count(), s.consumed_listed.size(),
        seconds(Clock::now() - t0));
    return {};
  }

  // The store's latest committed version of the model (0: none), asked for a while: a restarting
  // store answers once its holders have registered again.
  core::Result<std::uint64_t> store_latest() {
    const auto deadline = Clock::now() + kStoreLatestWait;
    while (true) {
      auto r = store->latest(cfg.model);
      if (r.is_ok()) return *r;
      if (r.status().code() == core::Code::kNotFound) return std::uint64_t{0};
      if (Clock::now() >= deadline) {
        return r.status().with_context("actor: the store's latest version, to publish above it");
      }
      log::warn("actor: asking the store for its latest version: {}", r.status().to_string());
      wait_for(static_cast<double>(kStoreRetryPause.count()));
    }
  }

  // Resumes from checkpoint_dir/actor.ckpt if there is one. Returns whether it did. Nothing is
  // changed unless the checkpoint and the policy's state both load.
  core::Result<bool> resume() {
    if (cfg.checkpoint_dir.empty()) return false;
    std::error_code ec;
    std::filesystem::create_directories(cfg.checkpoint_dir, ec);
    if (ec) {
      return core::unavailable("actor: cannot create checkpoint_dir '" + cfg.checkpoint_dir +
                               "': " + ec.message());
    }
    const std::string path = in_checkpoint_dir(kCheckpointFile);
    if (!std::filesystem::exists(path)) return false;
    SLUICE_ASSIGN_OR_RETURN(CheckpointState s, read_checkpoint(path));
    if (s.policy != cfg.policy) {
      return core::invalid_argument(fmt::format(
          "actor checkpoint '{}' is of policy {}, this actor's is {}", path, s.policy, cfg.policy));
    }
    auto by_terms = [&](const std::string& text) -> core::Result<json> {
      json j = json::parse(text, nullptr, false);
      if (j.is_discarded()) return core::data_loss("actor checkpoint '" + path + "': bad by_terms");
      return j;
    };
    SLUICE_ASSIGN_OR_RETURN(json initial_terms, by_terms(s.initial_by_terms));
    Consumed restored(TrainerState::consumed_options(cfg));
    SLUICE_TRY(restored.restore(s).with_context("'" + path + "'"));
    SLUICE_ASSIGN_OR_RETURN(json last_terms, by_terms(s.last_by_terms));
    SLUICE_TRY(policy->load_state(in_checkpoint_dir(s.policy_file))
                   .with_context("actor checkpoint '" + path + "'"));
    SLUICE_ASSIGN_OR_RETURN(std::uint64_t latest, store_latest());

    sequence = s.sequence;
    policy_file = s.policy_file;
    restarts = s.restarts + 1;
    resumed_from_step = s.steps;
    static_cast<TrainerTotals&>(*this) = s;
    initial_by_terms = std::move(initial_terms);
    last_by_terms = std::move(last_terms);
    BufferCounts c;
    static_cast<KeptBufferCounts&>(c) = s;
    buffer->restore_counts(c);
    state->resume(s.steps, s.version, latest, std::move(restored));
    buffer->restore_seen(state->consumed().ids());
    consumed = taken + c.dropped_stale;
    log::info("actor: resumed from checkpoint at step {}, version {} (store latest {}; restart {})",
              s.steps, s.version, latest, restarts);
    return true;
  }

  // The last acknowledgement, after the last checkpoint: a few bounded tries.
  void final_ack() {
    for (int i = 0; state->final_ack_due(i); ++i) {
      auto r = call_collect(0, kFinalAckTimeout);
      if (r.is_ok()) return;
      log::warn("actor: final acknowledgement (try {} of {}): {}", i + 1, kFinalAckTries,
                r.status().to_string());
    }
    if (!state->ack().empty()) {
      log::warn("actor: {} acknowledgements not delivered; the manager sends them again",
                state->ack().size());
    }
  }

  core::Result<json> run() {
    if (!cfg.metrics_path.empty()) {
      metrics = std::make_unique<std::ofstream>(cfg.metrics_path, std::ios::app);
    }
    beat_timer = loop->every(Millis(cfg.heartbeat_ms), [this] {
      if (Clock::now() - last_beat >= Millis(cfg.heartbeat_ms)) beat();
    });
    auto out = run_job();
    beat_timer.reset();
    return out;
  }

  core::Result<json> run_job() {
    SLUICE_ASSIGN_OR_RETURN(bool resumed, resume());
    // A resumed policy has its warm start and first evaluation behind it (in the checkpoint).
    if (!resumed) {
      SLUICE_TRY(policy->prepare([this] { loop->run_until([] { return false; }, kPreparePump); }));
      if (!cfg.checkpoint_dir.empty()) {
        // No checkpoint, but maybe not the job's first actor: one killed before its first
        // checkpoint published versions that the rollouts now run. Publishing 1 again would sit
        // below them (every trajectory "from the future", the job stalled: seen in sluice chaos),
        // so this one starts above the store's latest. Its consumed ids died with it and the
        // manager sends them again.
        SLUICE_ASSIGN_OR_RETURN(std::uint64_t latest, store_latest());
        if (latest > 0) {
          log::warn("actor: no checkpoint, but the store has version {}: publishing above it",
                    latest);
        }
        state->start_above(latest);
      }
    }
    // The record starts from the weights RL starts from; a resumed actor cuts it back to its
    // checkpoint's step (what a killed incarnation trained on after it is not in the weights).
    if (recorder && resumed) recorder->resume(*resumed_from_step);
    if (recorder && !resumed) recorder->begin(*policy->learner());
    started = Clock::now();
    if (cfg.eval_every > 0 && !resumed) SLUICE_TRY(evaluate_now());
    SLUICE_TRY(publish_next());  // the initial (or restored) weights
    std::vector<Sample> batch;
    while (!stopping.load() && !loop->stopped()) {
      if (state->steps_done()) break;
      auto wait0 = Clock::now();
      SLUICE_TRY(collect());
      std::size_t need = cfg.batch_trajectories - batch.size();
      auto got = buffer->take(need, state->version());
      for (const auto& id : buffer->drain_dropped_ids())
        consume(id, false);
      for (auto& s : got) {
        ++taken;
        staleness_sum += static_cast<double>(s.staleness);
        staleness_max = std::max(staleness_max, s.staleness);
        count_staleness(staleness_counts, s.staleness);
        if (s.trajectory.mixed_versions()) ++mixed_consumed;
        batch.push_back(std::move(s));
      }
      // What the manager may replace: trajectories taken, and those dropped as stale.
      consumed = taken + buffer->counts().dropped_stale;
      const TrainerState::Step next = state->next_step(batch.size(), buffer->held());
      if (next == TrainerState::Step::kFinish) break;
      if (next == TrainerState::Step::kWait) {
        if (batch.empty()) SLUICE_TRY(maybe_checkpoint(state->idle_flush_due(Clock::now())));
        wait_for(static_cast<double>(state->collect_wait().count()));
        idle_s += seconds(Clock::now() - wait0);
        continue;
      }
      idle_s += seconds(Clock::now() - wait0);
      SLUICE_TRY(train(batch));
      batch.clear();
      SLUICE_TRY(publish_next());
      SLUICE_TRY(maybe_checkpoint(false));
    }
    // A last partial batch is trained on too, so every trajectory is used.
    if (!batch.empty()) SLUICE_TRY(train(batch));
    if (cfg.eval_every > 0 && state->steps() % cfg.eval_every != 0) SLUICE_TRY(evaluate_now());
    if (!cfg.weights_path.empty()) SLUICE_TRY(policy->save_weights(cfg.weights_path));
    if (recorder) {
      recorder->sync();
      if (recorder->active())
        log::info("actor: batch record '{}': {} steps, {} bytes", cfg.batches_path, state->steps(),
                  recorder->bytes());
    }
    SLUICE_TRY(maybe_checkpoint(true));
    final_ack();
    return summary();
  }

  json summary() const {
    const auto& c = buffer->counts();
    double wall = seconds(Clock::now() - started);
    return json{{"wall_s", wall},
                {"start_offset_s", cfg.start_offset_s},
                {"steps", state->steps()},
                {"version", state->version()},
                {"trained_tokens", trained_tokens},
                {"trained_samples", trained_samples},
                {"tokens_per_s", wall > 0 ? static_cast<double>(trained_tokens) / wall : 0.0},
                {"idle_s", idle_s},
                {"train_s", train_s},
                {"publish_s", publish_s},
                {"actor_idle_frac", wall > 0 ? idle_s / wall : 0.0},
                {"staleness_mean",
                 trained_samples > 0 ? staleness_sum / static_cast<double>(trained_samples) : 0.0},
                {"staleness_max", staleness_max},
                {"staleness_p50", staleness_quantile(staleness_counts, 0.5)},
                {"staleness_p99", staleness_quantile(staleness_counts, 0.99)},
                {"max_staleness_bound", cfg.max_staleness},
                {"mixed_version_consumed", mixed_consumed},
                {"initial_accuracy", initial_accuracy},
                {"final_accuracy", last_accuracy},
                {"initial_accuracy_by_terms", initial_by_terms},
                {"final_accuracy_by_terms", last_by_terms},
                {"accepted", c.accepted},
                {"duplicates", c.duplicates},
                {"dropped_stale", c.dropped_stale},
                {"accepted_tokens", c.accepted_tokens},
                {"dropped_tokens", c.dropped_tokens},
                {"abandoned", c.abandoned},
                {"downweighted", c.downweighted},
                {"restarts", restarts},
                {"resumed_from_step", resumed_from_step ? json(*resumed_from_step) : json()},
                {"checkpoints", sequence},
                {"accepted_ids", state->consumed().listed()},
                {"trained_ids", state->consumed().trained_listed()},
                {"ids_complete", state->consumed().ids_complete()}};
  }
};

core::Result<std::unique_ptr<Trainer>> Trainer::create(core::EventLoop& loop, TrainerConfig config,
                                                       std::vector<std::string> environment) {
  SLUICE_TRY(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->cfg = std::move(config);
  impl->environment = std::move(environment);
  BufferOptions bo;
  bo.group_size = impl->cfg.group_size;
  bo.max_staleness = impl->cfg.max_staleness;
  bo.policy =
      impl->cfg.staleness_policy == "drop" ? StalenessPolicy::kDrop : StalenessPolicy::kDownweight;
  bo.stale_weight = impl->cfg.stale_weight;
  impl->buffer = std::make_unique<ExperienceBuffer>(bo);
  impl->state.emplace(impl->cfg, Clock::now());
  SLUICE_ASSIGN_OR_RETURN(core::Security security,
                          core::load_security(impl->cfg.security, "actor " + impl->cfg.actor_id));
  SLUICE_ASSIGN_OR_RETURN(impl->manager,
                          rollout::ManagerClient::create(loop, impl->cfg.manager, security,
                                                         Millis(impl->cfg.manager_call_ms)));
  core::TransferOptions to;
  to.environment = impl->environment;
  to.stream_reach = impl->cfg.store;  // the chunk server binds where the job's hosts reach it
  SLUICE_TRY(core::set_stream_security(to, impl->cfg.stream_encryption, impl->cfg.datacenter,
                                       security, "actor " + impl->cfg.actor_id));
  SLUICE_ASSIGN_OR_RETURN(impl->transfer, core::TransferEngine::create(loop, to));
  SLUICE_ASSIGN_OR_RETURN(impl->store,
                          weightstore::StoreClient::create(loop, impl->cfg.store, security));
  PublisherOptions po;
  po.model = impl->cfg.model;
  po.holder_id = impl->cfg.actor_id;
  po.chunk_bytes = impl->cfg.chunk_bytes;
  po.lease_ttl = Millis(impl->cfg.store_lease_ttl_ms);
  po.topology.datacenter = impl->cfg.datacenter;
  SLUICE_ASSIGN_OR_RETURN(impl->publisher,
                          Publisher::create(loop, *impl->transfer, *impl->store, po));
  if (impl->cfg.policy == "gpt") {
    SLUICE_ASSIGN_OR_RETURN(impl->policy, make_gpt_policy(impl->cfg.learner));
  } else {
    SimPolicyOptions so;
    so.weight_bytes = impl->cfg.weight_bytes;
    so.train_ms_fixed = impl->cfg.train_ms_fixed;
    so.train_ms_per_token = impl->cfg.train_ms_per_token;
    impl->policy = make_sim_policy(so);
  }
  if (impl->cfg.record_batches && !impl->cfg.batches_path.empty() &&
      impl->policy->learner() != nullptr) {
    impl->recorder = std::make_unique<BatchRecorder>(impl->cfg.batches_path);
  }
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
core::Result<nlohmann::json> Trainer::run() {
  auto out = impl_->run();
  // Relays and rollouts may be reading the last versions right now: the store stops naming this
  // process before it exits (see Publisher::close). Stopped by a signal, the launcher waits a
  // few seconds only.
  Millis bound = impl_->stopping.load() ? kPublisherCloseWaitStopped : kPublisherCloseWait;
  if (core::Status c = impl_->publisher->close(bound); !c.is_ok())
    log::warn("actor: {}", c.to_string());
  return out;
}
void Trainer::stop() {
  impl_->stopping = true;
}

}  // namespace sluice::actor
