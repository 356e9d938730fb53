#include "actor/trainer.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "actor/gpt_policy.hpp"
#include "actor/policy.hpp"
#include "actor/publisher.hpp"
#include "actor/sim_policy.hpp"
#include "core/log.hpp"
#include "core/messaging.hpp"
#include "core/transfer.hpp"
#include "core/units.hpp"
#include "weightstore/client.hpp"

namespace sluice::actor {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

core::Status TrainerConfig::validate() const {
  if (batch_trajectories == 0) return core::invalid_argument("batch_trajectories must be >= 1");
  if (group_size == 0 || batch_trajectories % group_size != 0) {
    return core::invalid_argument(
        fmt::format("batch_trajectories ({}) must be a multiple of group_size ({})",
                    batch_trajectories, group_size));
  }
  if (policy != "sim" && policy != "gpt") {
    return core::invalid_argument(fmt::format("policy must be sim or gpt, not '{}'", policy));
  }
  if (policy == "gpt") SLUICE_TRY(learner.validate().with_context("learner"));
  if (staleness_policy != "drop" && staleness_policy != "downweight") {
    return core::invalid_argument(
        fmt::format("staleness_policy must be drop or downweight, not '{}'", staleness_policy));
  }
  if (weight_bytes < 16) return core::invalid_argument("weight_bytes must be at least 16");
  if (chunk_bytes == 0) return core::invalid_argument("chunk_bytes must be at least 1");
  if (train_ms_per_token < 0 || train_ms_fixed < 0) {
    return core::invalid_argument("training times must not be negative");
  }
  return {};
}

namespace {
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

struct Trainer::Impl {
  core::EventLoop* loop = nullptr;
  TrainerConfig cfg;
  std::vector<std::string> environment;
  std::unique_ptr<core::Client> manager;
  std::unique_ptr<core::TransferEngine> transfer;
  std::unique_ptr<weightstore::StoreClient> store;
  std::unique_ptr<Publisher> publisher;
  std::unique_ptr<ExperienceBuffer> buffer;
  std::unique_ptr<Policy> policy;
  std::unique_ptr<std::ofstream> metrics;  // metrics.jsonl, one line per step
  std::atomic<bool> stopping{false};

  std::uint64_t version = 0;
  std::vector<std::string> ack;
  std::vector<std::string> accepted_ids;
  bool manager_done = false;
  Clock::time_point last_heard = Clock::now();

  // Accounting.
  Clock::time_point started;
  double idle_s = 0, train_s = 0, publish_s = 0;
  std::uint64_t steps = 0, trained_tokens = 0, trained_samples = 0, consumed = 0, taken = 0;
  double staleness_sum = 0;
  std::uint64_t staleness_max = 0, mixed_consumed = 0;

  core::Status publish_next() {
    ++version;
    auto t0 = Clock::now();
    auto m = publisher->publish(version, policy->tensors());
    publish_s += seconds(Clock::now() - t0);
    if (!m.is_ok()) return m.status().with_context(fmt::format("publish version {}", version));
    auto r = manager->call(
        core::Message("mgr.published", json{{"version", version}, {"consumed", consumed}}),
        Millis(5000));
    if (!r.is_ok()) {
      log::warn("actor: telling the manager about version {} failed: {}", version,
                r.status().to_string());
    }
    return {};
  }

  core::Status collect() {
    publisher->heartbeat();
    json body{{"ack", ack}, {"consumed", consumed}, {"max", 512}};
    auto r = manager->call(core::Message("mgr.collect", body), Millis(5000));
    if (!r.is_ok()) {
      if (seconds(Clock::now() - last_heard) * 1000 > static_cast<double>(cfg.manager_timeout_ms)) {
        return core::unavailable(fmt::format("actor: manager {} silent for {} ms: {}", cfg.manager,
                                             cfg.manager_timeout_ms, r.status().to_string()));
      }
      return {};
    }
    last_heard = Clock::now();
    ack.clear();
    manager_done = r->body.value("done", false);
    for (const auto& j : r->body.at("trajectories")) {
      SLUICE_ASSIGN_OR_RETURN(rl::Trajectory t, rl::Trajectory::from_json(j));
      ack.push_back(t.id);
      std::string id = t.id;
      auto st = buffer->add(std::move(t));
      if (st.is_ok()) accepted_ids.push_back(std::move(id));
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
    SLUICE_ASSIGN_OR_RETURN(json stats, policy->train(batch, [this](double ms) { wait_for(ms); }));
    train_s += seconds(Clock::now() - t0);
    trained_tokens += tokens;
    trained_samples += batch.size();
    ++steps;
    if (cfg.eval_every > 0 && steps % cfg.eval_every == 0) {
      SLUICE_ASSIGN_OR_RETURN(json ev, policy->evaluate());
      stats.update(ev);
      if (ev.contains("accuracy")) last_accuracy = ev["accuracy"].get<double>();
      last_by_terms = ev.value("accuracy_by_terms", json());
    }
    double since = std::max(1e-9, seconds(Clock::now() - started));
    stats["t"] = since + cfg.start_offset_s;
    stats["step"] = steps;
    stats["version"] = version + 1;
    stats["tokens_per_s"] = static_cast<double>(trained_tokens) / since;
    stats["staleness_mean"] = batch.empty() ? 0.0 : stale / static_cast<double>(batch.size());
    stats["samples"] = trained_samples;
    if (metrics) *metrics << stats.dump() << std::endl;
    log::info("actor: step {}: {}", steps, stats.dump());
    return {};
  }
  double last_accuracy = -1, initial_accuracy = -1;
  json last_by_terms, initial_by_terms;  // the evaluations' accuracy_by_terms (null: none)

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
    ev["step"] = steps;
    ev["version"] = version;
    ev["samples"] = trained_samples;
    if (metrics) *metrics << ev.dump() << std::endl;
    log::info("actor: held-out evaluation after {} steps: {}", steps, ev.dump());
    return {};
  }

  core::Result<json> run() {
    if (!cfg.metrics_path.empty()) {
      metrics = std::make_unique<std::ofstream>(cfg.metrics_path, std::ios::app);
    }
    SLUICE_TRY(policy->prepare([this] { loop->run_until([] { return false; }, Millis(1)); }));
    started = Clock::now();
    if (cfg.eval_every > 0) SLUICE_TRY(evaluate_now());
    SLUICE_TRY(publish_next());  // version 1: the initial weights
    std::vector<Sample> batch;
    while (!stopping.load() && !loop->stopped()) {
      if (cfg.steps > 0 && steps >= cfg.steps) break;
      auto wait0 = Clock::now();
      SLUICE_TRY(collect());
      std::size_t need = cfg.batch_trajectories - batch.size();
      auto got = buffer->take(need, version);
      for (auto& s : got) {
        ++taken;
        staleness_sum += static_cast<double>(s.staleness);
        staleness_max = std::max(staleness_max, s.staleness);
        if (s.trajectory.mixed_versions()) ++mixed_consumed;
        batch.push_back(std::move(s));
      }
      // What the manager may replace: trajectories taken, and those dropped as stale.
      consumed = taken + buffer->counts().dropped_stale;
      if (batch.size() < cfg.batch_trajectories) {
        if (manager_done && buffer->held() == 0) break;
        wait_for(static_cast<double>(cfg.collect_ms));
        idle_s += seconds(Clock::now() - wait0);
        continue;
      }
      idle_s += seconds(Clock::now() - wait0);
      SLUICE_TRY(train(batch));
      batch.clear();
      SLUICE_TRY(publish_next());
    }
    // A last partial batch is trained on too, so every trajectory is used.
    if (!batch.empty()) SLUICE_TRY(train(batch));
    if (cfg.eval_every > 0 && steps % cfg.eval_every != 0) SLUICE_TRY(evaluate_now());
    if (!cfg.weights_path.empty()) SLUICE_TRY(policy->save_weights(cfg.weights_path));
    // Acknowledge what was received last.
    if (!ack.empty()) {
      manager
          ->call(
              core::Message("mgr.collect", json{{"ack", ack}, {"consumed", consumed}, {"max", 0}}),
              Millis(2000))
          .ignore();
    }
    return summary();
  }

  json summary() const {
    const auto& c = buffer->counts();
    double wall = seconds(Clock::now() - started);
    return json{{"wall_s", wall},
                {"steps", steps},
                {"version", version},
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
                {"max_staleness_bound", cfg.max_staleness},
                {"mixed_version_consumed", mixed_consumed},
                {"initial_accuracy", initial_accuracy},
                {"final_accuracy", last_accuracy},
                {"initial_accuracy_by_terms", initial_by_terms},
                {"final_accuracy_by_terms", last_by_terms},
                {"accepted", c.accepted},
                {"duplicates", c.duplicates},
                {"dropped_stale", c.dropped_stale},
                {"abandoned", c.abandoned},
                {"downweighted", c.downweighted},
                {"accepted_ids", accepted_ids}};
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
  SLUICE_ASSIGN_OR_RETURN(impl->manager, core::Client::create(loop, impl->cfg.manager));
  core::TransferOptions to;
  to.environment = impl->environment;
  SLUICE_ASSIGN_OR_RETURN(impl->transfer, core::TransferEngine::create(loop, to));
  SLUICE_ASSIGN_OR_RETURN(impl->store, weightstore::StoreClient::create(loop, impl->cfg.store));
  PublisherOptions po;
  po.model = impl->cfg.model;
  po.holder_id = impl->cfg.actor_id;
  po.chunk_bytes = impl->cfg.chunk_bytes;
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
  return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
core::Result<nlohmann::json> Trainer::run() {
  auto out = impl_->run();
  // Relays and rollouts may be reading the last versions right now: the store stops naming this
  // process before it exits (see Publisher::close). Stopped by a signal, the launcher waits a
  // few seconds only.
  Millis bound = impl_->stopping.load() ? Millis(1000) : Millis(5000);
  if (core::Status c = impl_->publisher->close(bound); !c.is_ok())
    log::warn("actor: {}", c.to_string());
  return out;
}
void Trainer::stop() {
  impl_->stopping = true;
}

}  // namespace sluice::actor
