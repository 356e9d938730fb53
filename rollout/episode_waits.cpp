#include "rollout/episode_waits.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "core/log.hpp"
#include "rollout/agent_env.hpp"
#include "rollout/command_env.hpp"

namespace sluice::rollout {

namespace log = core::log;
using core::Clock;
using core::Millis;

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The environment of a rollout that runs episodes, or null (the agent endpoint is made apart:
// it takes its work from the worker).
core::Result<std::unique_ptr<Environment>> make_environment(core::EventLoop& loop,
                                                            const RolloutConfig& cfg) {
  if (cfg.engine == "model" && cfg.task.tool != "none") {
    SLUICE_ASSIGN_OR_RETURN(rl::ArithmeticTask task, rl::ArithmeticTask::create(cfg.task));
    SLUICE_ASSIGN_OR_RETURN(rl::EnvLatency latency,
                            rl::EnvLatency::create(cfg.env_latency, cfg.task.seed));
    return make_task_environment(loop, task, latency);
  }
  if (!cfg.env_command.empty()) {
    CommandEnvOptions o;
    o.argv = cfg.env_command;
    o.cwd = cfg.env_workdir;
    o.rollout_id = cfg.rollout_id;
    o.call_token = cfg.env_call_token;
    o.vocab = cfg.gpt.gpt.vocab;
    o.max_line = static_cast<std::size_t>(cfg.env_max_line_bytes);
    // A program that takes nothing written to it for as long as an episode may wait is of no
    // more use to any episode.
    o.stall_timeout = Millis(cfg.env_timeout_ms);
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<CommandEnvironment> env,
                            CommandEnvironment::create(loop, std::move(o)));
    return std::unique_ptr<Environment>(std::move(env));
  }
  if (cfg.engine == "sim" && cfg.sim.turns > 1) {
    SLUICE_ASSIGN_OR_RETURN(rl::EnvLatency latency,
                            rl::EnvLatency::create(cfg.env_latency, cfg.sim.seed));
    return make_sim_environment(loop, kSimVocab - 1, kSimVocab, cfg.sim.env_tokens, latency);
  }
  return std::unique_ptr<Environment>();
}

// The agent endpoint, its URL written to agent_dir/agent-<rollout_id>.url (empty: nowhere).
core::Result<std::unique_ptr<Environment>> make_agent_endpoint(core::EventLoop& loop,
                                                               const RolloutConfig& cfg,
                                                               EpisodeWaits::Claim claim) {
  AgentHooks h;
  h.claim = std::move(claim);
  h.max_context = static_cast<std::uint64_t>(cfg.gpt.gpt.context);
  h.vocab = cfg.gpt.gpt.vocab;
  SLUICE_ASSIGN_OR_RETURN(std::string token, read_agent_token(cfg.agent_token_file));
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<AgentEnvironment> a,
      AgentEnvironment::create(loop, cfg.agent_listen, std::move(token), cfg.agent, h));
  const std::string url = a->url();
  log::info("rollout {}: agent endpoint at {}", cfg.rollout_id, url);
  if (!cfg.agent_dir.empty()) {
    const std::string path = cfg.agent_dir + "/agent-" + cfg.rollout_id + ".url";
    std::ofstream f(path + ".tmp");
    f << url << "\n";
    f.close();
    if (!f || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      return core::internal_error("rollout: cannot write " + path);
    }
  }
  return std::unique_ptr<Environment>(std::move(a));
}

}  // namespace

EpisodeWaits::EpisodeWaits(const RolloutConfig& cfg, WorkerStats& stats, WorkerMetrics& metrics)
    : rollout_id_(cfg.rollout_id),
      timeout_(cfg.env_timeout_ms),
      keep_kv_(cfg.env_keep_kv),
      stats_(&stats),
      metrics_(&metrics) {}

core::Result<std::unique_ptr<EpisodeWaits>> EpisodeWaits::create(core::EventLoop& loop,
                                                                 const RolloutConfig& cfg,
                                                                 WorkerStats& stats,
                                                                 WorkerMetrics& metrics,
                                                                 Claim claim) {
  std::unique_ptr<EpisodeWaits> w(new EpisodeWaits(cfg, stats, metrics));
  SLUICE_ASSIGN_OR_RETURN(w->env_, make_environment(loop, cfg));
  if (!cfg.agent_listen.empty()) {
    SLUICE_ASSIGN_OR_RETURN(w->env_, make_agent_endpoint(loop, cfg, std::move(claim)));
  }
  return w;
}

std::optional<SequenceState> EpisodeWaits::begin(SequenceState s) {
  // An agent's episodes begin when the agent takes them (its Claim). An episode that resets and
  // has no turn yet (it was waiting on its reset elsewhere) resets here again.
  if (env_ && !env_->claims_work() && s.generated.empty() && (!s.is_episode() || env_->resets())) {
    s.call_token = env_->call_token();
    if (env_->resets()) {
      call(std::move(s));
      return std::nullopt;
    }
  }
  return s;
}

void EpisodeWaits::call(SequenceState s) {
  const std::string id = s.trajectory_id;
  if (!keep_kv_) s.kv.reset();
  Waiting& w = waiting_[id];
  w.state = std::move(s);
  w.since = Clock::now();
  w.answer.reset();
  metrics_->env_waiting.set(static_cast<double>(waiting_.size()));
  std::weak_ptr<bool> guard = alive_;
  env_->answer(w.state, [this, guard, id](core::Result<EnvAnswer> a) {
    if (guard.expired()) return;
    auto it = waiting_.find(id);
    if (it == waiting_.end()) return;
    it->second.answer = std::move(a);
    answers_ready_ = true;
  });
}

void EpisodeWaits::count_faults() {
  if (!env_) return;
  const EnvFaults f = env_->faults();
  auto add = [](std::uint64_t now, std::uint64_t& seen, std::uint64_t& stat, core::Counter& c) {
    if (now <= seen) return;
    stat += now - seen;
    c.inc(static_cast<double>(now - seen));
    seen = now;
  };
  add(f.overlong, faults_.overlong, stats_->env_overlong_lines, metrics_->env_overlong_lines);
  add(f.stalled, faults_.stalled, stats_->env_stalled, metrics_->env_stalled);
  add(f.garbage, faults_.garbage, stats_->env_garbage, metrics_->env_garbage);
}

void EpisodeWaits::retain(const std::set<std::string>& live) {
  if (!env_) return;
  env_->retain(live);
  count_faults();
}

std::vector<EpisodeWaits::Outcome> EpisodeWaits::take_answers(Clock::time_point now) {
  std::vector<Outcome> out;
  answers_ready_ = false;
  count_faults();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Waiting& w = it->second;
    const bool late = now - w.since > timeout_;
    if (!w.answer && !late) {
      ++it;
      continue;
    }
    const double waited = seconds(now - w.since);
    stats_->env_wait_s += waited;
    metrics_->env_wait.inc(waited);
    SequenceState s = std::move(w.state);
    std::optional<core::Result<EnvAnswer>> answer = std::move(w.answer);
    it = waiting_.erase(it);
    if (!answer) {
      env_->cancel(s.trajectory_id);
      env_->close(s.trajectory_id);
      fail(s, fmt::format("no answer in {} ms", timeout_.count()));
      out.push_back({Outcome::Kind::kFailed, std::move(s), std::nullopt});
      continue;
    }
    if (!answer->is_ok()) {
      env_->close(s.trajectory_id);
      fail(s, answer->status().to_string());
      out.push_back({Outcome::Kind::kFailed, std::move(s), std::nullopt});
      continue;
    }
    ++stats_->env_calls;
    metrics_->env_calls.inc();
    const EnvAnswer& a = answer->value();
    const bool model_turn =
        std::find(s.loss_mask.begin(), s.loss_mask.end(), std::uint8_t{1}) != s.loss_mask.end();
    const bool no_room = s.generated.size() + a.tokens.size() >= s.max_new_tokens;
    if (!model_turn && (a.done || no_room)) {
      env_->close(s.trajectory_id);
      fail(s, "ended it before the model's first turn");
      out.push_back({Outcome::Kind::kFailed, std::move(s), std::nullopt});
      continue;
    }
    // No turns left, or no room for the answer and one more token: the episode ends here.
    if (a.done || no_room) {
      env_->close(s.trajectory_id);
      out.push_back({Outcome::Kind::kFinished, std::move(s), a.reward});
      continue;
    }
    record_environment(s, a.tokens);
    s.turn_limit = a.turn_limit;
    s.stop = a.stop;
    // Its KV cache goes with it; admission decides whether it still serves.
    out.push_back({Outcome::Kind::kNextTurn, std::move(s), std::nullopt});
  }
  metrics_->env_waiting.set(static_cast<double>(waiting_.size()));
  return out;
}

void EpisodeWaits::fail(SequenceState& s, const std::string& why) {
  ++stats_->env_failed;
  metrics_->env_failed.inc();
  log::warn("rollout {}: episode {} ended: its environment {}", rollout_id_, s.trajectory_id, why);
  s.kv.reset();
}

std::vector<std::string> EpisodeWaits::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, w] : waiting_)
    out.push_back(id);
  return out;
}

void EpisodeWaits::append_states(std::vector<SequenceState>& out) const {
  for (const auto& [id, w] : waiting_) {
    out.push_back(w.state);
    out.back().kv.reset();
  }
}

std::optional<SequenceState> EpisodeWaits::take(const std::string& id) {
  auto w = waiting_.find(id);
  if (w == waiting_.end()) return std::nullopt;
  env_->cancel(id);
  env_->close(id);
  SequenceState s = std::move(w->second.state);
  waiting_.erase(w);
  s.kv.reset();
  return s;
}

std::vector<SequenceState> EpisodeWaits::release() {
  std::vector<SequenceState> out;
  for (auto& [id, w] : waiting_) {
    w.state.kv.reset();
    out.push_back(std::move(w.state));
  }
  if (env_) drop();
  return out;
}

void EpisodeWaits::drop() {
  for (const auto& [id, w] : waiting_) {
    env_->cancel(id);
    env_->close(id);
  }
  waiting_.clear();
  metrics_->env_waiting.set(0);
}

}  // namespace sluice::rollout
