#include "rollout/worker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "wire/messaging.hpp"
#include "core/metrics.hpp"
#include "wire/transfer.hpp"
#include "rollout/agent_env.hpp"
#include "rollout/command_env.hpp"
#include "rollout/kv_transfer.hpp"
#include "rollout/manager_client.hpp"
#include "rollout/protocol.hpp"
#include "rollout/worker_state.hpp"
#include "weightstore/client.hpp"
#include "weightstore/reader.hpp"

namespace sluice::rollout {

namespace log = core::log;
using core::Clock;
using core::Millis;
using nlohmann::json;

core::Status RolloutConfig::validate() const {
  if (engine != "sim" && engine != "model") {
    return core::invalid_argument(fmt::format("unknown engine '{}' (sim or model)", engine));
  }
  if (engine == "model") {
    SLUICE_TRY(gpt.validate().with_context("gpt"));
    SLUICE_TRY(task.validate().with_context("task"));
  }
  if (report_ms == 0) return core::invalid_argument("report_ms must be at least 1");
  if (pull_in_flight == 0) return core::invalid_argument("pull_in_flight must be at least 1");
  if (serve != "auto" && serve != "on" && serve != "off") {
    return core::invalid_argument(fmt::format("serve must be auto, on or off, not '{}'", serve));
  }
  if (max_held_finished == 0) return core::invalid_argument("max_held_finished must be at least 1");
  if (leave_timeout_ms == 0) return core::invalid_argument("leave_timeout_ms must be at least 1");
  for (const auto& h : join_read_from) {
    if (h.empty()) return core::invalid_argument("join_read_from names an empty holder id");
  }
  if (env_timeout_ms == 0) return core::invalid_argument("env_timeout_ms must be at least 1");
  if (!agent_listen.empty() && engine != "model") {
    return core::invalid_argument("agent_listen needs engine model");
  }
  const int drivers = (agent_listen.empty() ? 0 : 1) + (task.tool == "none" ? 0 : 1) +
                      (env_command.empty() ? 0 : 1);
  if (drivers > 1) {
    return core::invalid_argument(
        "agent_listen, task.tool and env_command each drive episodes: choose one");
  }
  if (!env_command.empty() && engine != "model") {
    return core::invalid_argument("env_command needs engine model");
  }
  SLUICE_TRY(env_latency.validate().with_context("env_latency"));
  if (manager_timeout_ms < report_ms) {
    return core::invalid_argument("manager_timeout_ms must be at least report_ms");
  }
  SLUICE_TRY(core::check_stream_encryption(stream_encryption, security.mode == "curve", "rollout"));
  return sim.validate();
}

void RolloutConfig::derive_report_timing(std::uint64_t heartbeat_timeout_ms) {
  if (report_timeout_ms == 0)
    report_timeout_ms = std::max<std::uint64_t>(1, heartbeat_timeout_ms / 4);
  if (report_retry_ms == 0) report_retry_ms = std::max<std::uint64_t>(1, heartbeat_timeout_ms / 8);
}

double sim_reward(const SequenceState& s) {
  return (core::chunk_checksum(s.trajectory_id.data(), s.trajectory_id.size()) & 1) ? 1.0 : 0.0;
}

namespace {

// The longest a reader's question for the latest version waits at the store for news.
constexpr Millis kRolloutLatestWait{1000};

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The environment of a rollout that runs episodes, or null (the agent endpoint is made by the
// worker, which lends it its queue).
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
    o.call_token = cfg.env_call_token;
    o.vocab = cfg.gpt.gpt.vocab;
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

}  // namespace

struct RolloutWorker::Impl {
  // Exported on the role's /metrics (core::process_metrics()).
  core::Counter& m_tokens =
      core::process_metrics().counter("sluice_rollout_tokens_generated_total", "tokens generated");
  core::Counter& m_finished = core::process_metrics().counter(
      "sluice_rollout_trajectories_finished_total", "trajectories finished here");
  core::Counter& m_loaded_bytes = core::process_metrics().counter(
      "sluice_rollout_weight_bytes_loaded_total", "weight bytes loaded into the engine");
  core::Gauge& m_version =
      core::process_metrics().gauge("sluice_rollout_version", "the version the engine runs");
  core::EventLoop* loop = nullptr;
  RolloutConfig cfg;
  std::unique_ptr<Engine> engine;
  Scorer scorer;
  std::vector<std::string> environment;
  core::Security security;  // this rollout's (loaded once at create)
  std::unique_ptr<ManagerClient> manager;
  std::unique_ptr<core::TransferEngine> transfer;
  std::unique_ptr<weightstore::StoreClient> store;
  // Holds the loaded version (and serves it to peers) and pulls the newest one in the background
  // while the old one's trajectories finish, so that the switch at the safe point is a swap, not
  // a wait. Created with the first pull; goes before the transfer engine and the store client.
  std::unique_ptr<weightstore::Reader> reader;
  std::unique_ptr<core::EventLoop::Timer> holder_beat;  // the reader's heartbeats to the store
  // KV caches exported over UCX, readable until cfg.kv_hold_ms has passed (the destination does
  // not say when it has read one). After `transfer`, so freed before it goes.
  core::RetiredBuffers kv_outbox;
  // When to report, what an unanswered report means, admission, pulls (rollout/worker_state.hpp).
  std::optional<WorkerState> ws;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::atomic<bool> stopping{false};

  std::deque<SequenceState> queue;  // assigned, not yet admitted
  // Episodes: their environment, and those waiting on it (by id), each with when it began to wait
  // and, once it came, the answer.
  std::unique_ptr<Environment> env;
  struct Waiting {
    SequenceState state;
    Clock::time_point since;
    std::optional<core::Result<EnvAnswer>> answer;
  };
  std::map<std::string, Waiting> waiting;
  bool answers_ready = false;
  std::vector<rl::Trajectory> finished;
  std::vector<SequenceState> exported;
  std::vector<SequenceState> refused;
  std::vector<SequenceState> returned;  // queued work handed back unstarted (see apply)
  std::uint64_t reports = 0;
  // This process's incarnation: the manager reclaims the work of an older process of this id.
  std::string incarnation =
      fmt::format("{:016x}", std::random_device{}() * 0x100000000ull ^ std::random_device{}());

  // Accounting, in seconds.
  const Clock::time_point created = Clock::now();  // the process's start (a joiner's join)
  // `created` on the wall clock (Unix seconds): a bench lines a joiner's times up with its own.
  const double created_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  double first_weights_s = -1, first_trajectory_s = -1;  // since `created` (-1: not yet)
  // The first request for weights (the reader's first pull): a joiner's first weights take
  // first_read_s from here, whatever its process start-up cost (-1: not yet).
  std::optional<Clock::time_point> first_pull;
  double first_read_s = -1;
  Clock::time_point started = Clock::now();
  double gen_s = 0, load_s = 0, barrier_s = 0, idle_s = 0, occupancy_s = 0, reprefill_s = 0;
  std::uint64_t tokens = 0, steps = 0, loads = 0, imported = 0, exported_count = 0;
  std::uint64_t reprefill_tokens = 0, kv_imported = 0, pulled_bytes = 0, pulled_same_host_bytes = 0;
  std::uint64_t checksum_failures = 0;  // chunks that failed verification (each read again)
  // KV caches sent over UCX, read over UCX, and whose read (or import) failed (re-prefilled).
  std::uint64_t kv_published = 0;
  KvReadStats kv_reads;
  // Versions the store acknowledged this rollout as a holder of (it served them to peers).
  std::uint64_t served_versions = 0, last_served = 0;
  std::uint64_t refused_version = 0;  // imports of another version (never expected)
  std::uint64_t abandoned = 0;        // trajectories stopped because they could not be trained
  // Episodes: seconds spent waiting on the environment (summed over episodes), calls answered,
  // episodes the environment failed (an error or past env_timeout_ms), calls whose KV cache was
  // used again, and those re-prefilled (and their tokens).
  double env_wait_s = 0;
  std::uint64_t env_calls = 0, env_failed = 0, env_kv_kept = 0, env_reprefills = 0;
  std::uint64_t env_reprefill_tokens = 0;
  core::Counter& m_env_wait = core::process_metrics().counter(
      "sluice_rollout_env_wait_seconds_total", "seconds episodes waited on their environment");
  core::Counter& m_env_calls = core::process_metrics().counter("sluice_rollout_env_calls_total",
                                                               "environment calls answered");
  core::Counter& m_env_failed = core::process_metrics().counter(
      "sluice_rollout_env_failed_total", "episodes ended by an environment error or time-out");
  core::Gauge& m_env_waiting = core::process_metrics().gauge(
      "sluice_rollout_env_waiting", "episodes waiting on their environment now");

  json stats() const {
    // Time counts from the first version loaded: waiting for the job's first weights is start-up.
    double wall = engine->version() > 0 ? seconds(Clock::now() - started) : 0.0;
    return json{{"wall_s", wall},
                {"gen_s", gen_s},
                {"load_s", load_s},
                {"barrier_s", barrier_s},
                {"idle_s", idle_s},
                {"occupancy_s", occupancy_s},
                {"tokens", tokens},
                {"steps", steps},
                {"loads", loads},
                {"imported", imported},
                {"exported", exported_count},
                {"reprefill_tokens", reprefill_tokens},
                {"kv_imported", kv_imported},
                {"kv_published", kv_published},
                {"kv_fetched", kv_reads.fetched},
                {"kv_fetched_bytes", kv_reads.fetched_bytes},
                {"kv_read_failed", kv_reads.read_failed},
                {"reprefill_s", reprefill_s},
                {"pulled_bytes", pulled_bytes},
                {"checksum_failures", checksum_failures},
                {"pulled_same_host_bytes", pulled_same_host_bytes},
                {"served_versions", served_versions},
                {"refused_version", refused_version},
                {"abandoned", abandoned},
                {"env_wait_s", env_wait_s},
                {"env_calls", env_calls},
                {"env_failed", env_failed},
                {"env_kv_kept", env_kv_kept},
                {"env_reprefills", env_reprefills},
                {"env_reprefill_tokens", env_reprefill_tokens},
                {"created_unix", created_unix},
                {"first_weights_s", first_weights_s},
                {"first_read_s", first_read_s},
                {"first_trajectory_s", first_trajectory_s},
                {"max_sequences", engine->capacity().max_sequences}};
  }

  // A report waits for its reply this long.
  Millis report_timeout() const { return Millis(cfg.effective_report_timeout_ms()); }

  core::Status report() {
    kv_outbox.sweep();
    if (reader && reader->serving() && reader->current_version() != last_served) {
      last_served = reader->current_version();
      ++served_versions;
    }
    ReportRequest req;
    req.id = cfg.rollout_id;
    req.incarnation = incarnation;
    req.version = engine->version();
    req.staged = std::max(reader ? reader->staged_version() : 0, engine->version());
    req.capacity = engine->capacity();
    for (const auto& a : engine->active_sequences())
      req.active.push_back({a.trajectory_id, a.kv_tokens});
    for (const auto& s : queue)
      req.queued.push_back(s.trajectory_id);
    for (const auto& [id, w] : waiting)
      req.waiting.push_back(id);
    // Copies: what is sent stays held until the manager answers. A bounded prefix: after an
    // outage thousands may be held, more than one message carries (the rest go next time).
    const std::size_t sent_finished = fitting_prefix(finished);
    req.finished.assign(finished.begin(),
                        finished.begin() + static_cast<std::ptrdiff_t>(sent_finished));
    req.exported = exported;
    req.refused = refused;
    req.returned = returned;
    if (cfg.partial_every > 0 && reports % cfg.partial_every == 0) {
      req.partial = engine->snapshot();
      // An episode waiting on its environment resumes elsewhere at its call.
      for (const auto& [id, w] : waiting) {
        req.partial.push_back(w.state);
        req.partial.back().kv.reset();
      }
    }
    ++reports;
    req.stats = stats();
    bool answered = false;
    auto reply = manager->report(req, report_timeout(), &answered);
    if (!answered) {
      bool first = false;
      core::Status silent = ws->report_failed(Clock::now(), &first);
      if (!silent.is_ok()) {
        return core::unavailable(fmt::format("rollout {}: manager {} {}: {}", cfg.rollout_id,
                                             cfg.manager, silent.message(),
                                             reply.status().to_string()));
      }
      if (first) {
        log::warn(
            "rollout {}: report failed (holding {} finished trajectories until the manager "
            "answers): {}",
            cfg.rollout_id, finished.size(), reply.status().to_string());
      }
      return {};  // keep what we have; it goes with the next report
    }
    if (ws->report_answered(Clock::now())) {
      log::info("rollout {}: the manager answers again ({} finished trajectories re-reported)",
                cfg.rollout_id, finished.size());
    }
    finished.erase(finished.begin(), finished.begin() + static_cast<std::ptrdiff_t>(sent_finished));
    exported.clear();
    refused.clear();
    returned.clear();
    SLUICE_ASSIGN_OR_RETURN(ReportReply r, std::move(reply));
    return apply(std::move(r));
  }

  core::Status apply(ReportReply r) {
    if (!ws->take_reply(r)) {
      // The manager declared this rollout dead and handed its work out again.
      log::warn("rollout {}: the manager declared it dead; dropping its work and rejoining",
                cfg.rollout_id);
      engine->export_all();
      queue.clear();
      drop_waiting();
      return {};
    }
    if (r.unqueue) {
      // Work not started here goes back to the manager, to start on a newer version elsewhere.
      for (auto& s : queue)
        returned.push_back(std::move(s));
      queue.clear();
    }
    for (const auto& e : r.abandon)
      abandon(e);
    abandon_stale();
    for (const auto& e : r.export_ids) {
      const bool with_kv =
          std::find(r.export_kv.begin(), r.export_kv.end(), e) != r.export_kv.end();
      auto s = with_kv ? engine->export_sequence_with_kv(e) : engine->export_sequence(e);
      if (s.is_ok()) {
        ++exported_count;
        exported.push_back(std::move(s).value());
        if (exported.back().kv) publish_moved_kv(exported.back());
      }
    }
    for (auto& s : r.import) {
      std::uint64_t v = s.versions.empty() ? engine->version() : s.versions.back();
      // A migrated sequence continues on the version that generated it, or on this newer one
      // when the manager says no rollout runs its own any more.
      const bool continues = std::find(r.continue_ids.begin(), r.continue_ids.end(),
                                       s.trajectory_id) != r.continue_ids.end();
      if (!WorkerState::admits_import(v, engine->version(), continues,
                                      engine->can_admit(s.kv_tokens()))) {
        if (v != engine->version()) ++refused_version;
        s.kv.reset();  // wherever it goes next, it is re-prefilled
        s.kv_ref.reset();
        refused.push_back(std::move(s));
        continue;
      }
      if (s.kv_ref) fetch_moved_kv(s);
      std::uint64_t kv = s.kv_tokens();
      // A sequence that brought its KV cache is not re-prefilled.
      bool migrated = !s.generated.empty() && !s.kv;
      core::Status st;
      if (s.kv) {
        // A cache the engine refuses (another shape: never expected) costs a re-prefill, not the
        // sequence.
        std::optional<KvState> cache = std::move(s.kv);
        s.kv.reset();
        SequenceState plain = s;
        s.kv = std::move(cache);
        st = engine->admit(std::move(s));
        if (st.is_ok()) {
          ++kv_imported;
        } else {
          ++kv_reads.read_failed;
          log::warn("rollout {}: KV cache of {} refused, re-prefilling: {}", cfg.rollout_id,
                    plain.trajectory_id, st.to_string());
          migrated = !plain.generated.empty();
          st = engine->admit(std::move(plain));
        }
      } else {
        st = engine->admit(std::move(s));
      }
      if (!st.is_ok()) return st.with_context("import");
      if (migrated) {
        ++imported;
        reprefill_tokens += kv;
        reprefill_s +=
            static_cast<double>(kv) * cfg.sim.prefill_ms_per_token * cfg.sim.time_scale / 1000.0;
      }
    }
    for (auto& s : r.assign) {
      // With an environment, new work runs as episodes (an agent's, once the agent takes it).
      if (env && !env->claims_work() && s.generated.empty() && !s.is_episode()) {
        s.call_token = env->call_token();
        // One that resets first: the episode waits on its environment before its first turn.
        if (env->resets()) {
          call_environment(std::move(s));
          continue;
        }
      }
      queue.push_back(std::move(s));
    }
    SLUICE_TRY(prefetch());
    if (r.load > engine->version()) SLUICE_TRY(load_version(r.load, r.allow_active));
    return {};
  }

  // Sends an exported sequence's KV cache over UCX: the state carries a reference to a buffer
  // kept here for cfg.kv_hold_ms. Without a transfer engine (or when allocating fails) the cache
  // travels inline.
  void publish_moved_kv(SequenceState& s) {
    if (!cfg.kv_ucx || !transfer) return;
    auto p = publish_kv(*transfer, *s.kv, KvOwner{cfg.rollout_id, s.trajectory_id});
    if (!p.is_ok()) {
      log::warn("rollout {}: KV cache of {} goes inline: {}", cfg.rollout_id, s.trajectory_id,
                p.status().to_string());
      return;
    }
    s.kv_ref = std::move(p->ref);
    s.kv.reset();
    kv_outbox.add(std::move(p->buffer));
    ++kv_published;
  }

  // Reads a migrated sequence's KV cache from its source. On any failure the sequence goes on
  // without it (re-prefilled): it is never lost.
  void fetch_moved_kv(SequenceState& s) {
    const std::string id = s.trajectory_id;
    core::Status st = fetch_kv_of(transfer.get(), *engine, s, cfg.rollout_id,
                                  Millis(cfg.kv_read_timeout_ms), kv_reads);
    if (!st.is_ok()) {
      log::warn("rollout {}: KV cache of {} not read, re-prefilling: {}", cfg.rollout_id, id,
                st.to_string());
    }
  }

  // ---- episodes ----

  core::Status start_agent_endpoint() {
    AgentHooks h;
    h.claim = [this] { return claim_for_agent(); };
    h.max_context = static_cast<std::uint64_t>(cfg.gpt.gpt.context);
    h.vocab = cfg.gpt.gpt.vocab;
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<AgentEnvironment> a,
                            AgentEnvironment::create(*loop, cfg.agent_listen, cfg.agent_token, h));
    const std::string url = a->url();
    env = std::move(a);
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
    return {};
  }

  // A model turn ended with a call: the sequence waits on the environment, out of the engine.
  void call_environment(SequenceState s) {
    const std::string id = s.trajectory_id;
    if (!cfg.env_keep_kv) s.kv.reset();
    Waiting& w = waiting[id];
    w.state = std::move(s);
    w.since = Clock::now();
    w.answer.reset();
    m_env_waiting.set(static_cast<double>(waiting.size()));
    std::weak_ptr<bool> guard = alive;
    env->answer(w.state, [this, guard, id](core::Result<EnvAnswer> a) {
      if (guard.expired()) return;
      auto it = waiting.find(id);
      if (it == waiting.end()) return;
      it->second.answer = std::move(a);
      answers_ready = true;
    });
  }

  // Episodes whose environment answered (or failed, or timed out): back to the queue's front for
  // their next turn, or finished.
  void take_answers() {
    answers_ready = false;
    const auto now = Clock::now();
    for (auto it = waiting.begin(); it != waiting.end();) {
      Waiting& w = it->second;
      const bool late = now - w.since > Millis(cfg.env_timeout_ms);
      if (!w.answer && !late) {
        ++it;
        continue;
      }
      const double waited = seconds(now - w.since);
      env_wait_s += waited;
      m_env_wait.inc(waited);
      SequenceState s = std::move(w.state);
      std::optional<core::Result<EnvAnswer>> answer = std::move(w.answer);
      it = waiting.erase(it);
      if (!answer) {
        env->cancel(s.trajectory_id);
        end_failed_episode(std::move(s), fmt::format("no answer in {} ms", cfg.env_timeout_ms));
        continue;
      }
      if (!answer->is_ok()) {
        end_failed_episode(std::move(s), answer->status().to_string());
        continue;
      }
      ++env_calls;
      m_env_calls.inc();
      const EnvAnswer& a = answer->value();
      const bool model_turn =
          std::find(s.loss_mask.begin(), s.loss_mask.end(), std::uint8_t{1}) != s.loss_mask.end();
      const bool no_room = s.generated.size() + a.tokens.size() >= s.max_new_tokens;
      if (!model_turn && (a.done || no_room)) {
        end_failed_episode(std::move(s), "ended it before the model's first turn");
        continue;
      }
      // No turns left, or no room for the answer and one more token: the episode ends here.
      if (a.done || no_room) {
        finish_sequence(std::move(s), a.reward);
        continue;
      }
      record_environment(s, a.tokens);
      s.turn_limit = a.turn_limit;
      // Its KV cache goes with it; admission decides whether it still serves.
      queue.push_front(std::move(s));
    }
    m_env_waiting.set(static_cast<double>(waiting.size()));
  }

  void end_failed_episode(SequenceState s, const std::string& why) {
    ++env_failed;
    m_env_failed.inc();
    log::warn("rollout {}: episode {} ended: its environment {}", cfg.rollout_id, s.trajectory_id,
              why);
    s.kv.reset();
    finish_abandoned(std::move(s));
  }

  // The agent takes the first unstarted sequence: it becomes an episode waiting on the agent.
  std::optional<SequenceState> claim_for_agent() {
    auto it = std::find_if(queue.begin(), queue.end(),
                           [](const SequenceState& s) { return !s.is_episode(); });
    if (it == queue.end() || !ws->may_admit(finished.size())) return std::nullopt;
    SequenceState s = std::move(*it);
    queue.erase(it);
    s.call_token = env->call_token();
    SequenceState copy = s;
    call_environment(std::move(s));
    return copy;
  }

  void drop_waiting() {
    for (const auto& [id, w] : waiting)
      env->cancel(id);
    waiting.clear();
    m_env_waiting.set(0);
  }

  void finish_sequence(SequenceState s, std::optional<double> given = std::nullopt) {
    s.kv.reset();
    double reward = given ? *given : scorer ? scorer(s) : 0.0;
    m_finished.inc();
    finished.push_back(to_trajectory(s, reward, cfg.rollout_id));
  }

  // Stops a trajectory queued or running here and sends it back marked abandoned.
  void abandon(const std::string& id) {
    if (auto w = waiting.find(id); w != waiting.end()) {
      env->cancel(id);
      SequenceState s = std::move(w->second.state);
      waiting.erase(w);
      s.kv.reset();
      finish_abandoned(std::move(s));
      return;
    }
    auto q = std::find_if(queue.begin(), queue.end(),
                          [&](const SequenceState& s) { return s.trajectory_id == id; });
    if (q != queue.end()) {
      SequenceState s = std::move(*q);
      queue.erase(q);
      finish_abandoned(std::move(s));
      return;
    }
    auto s = engine->export_sequence(id);
    if (s.is_ok()) finish_abandoned(std::move(s).value());  // else it finished meanwhile
  }

  void finish_abandoned(SequenceState s) {
    rl::Trajectory t = to_trajectory(s, 0.0, cfg.rollout_id);
    t.abandoned = true;
    ++abandoned;
    m_finished.inc();
    finished.push_back(std::move(t));
  }

  // Running trajectories first generated by a version older than the manager's abandon_before.
  void abandon_stale() {
    if (ws->abandon_before() == 0 || engine->active() == 0) return;
    for (const auto& id :
         WorkerState::stale(engine->active_sequences(), engine->version(), ws->abandon_before()))
      abandon(id);
  }

  bool serve_peers() const {
    if (cfg.serve == "on") return true;
    if (cfg.serve == "off") return false;
    // The UCX version check that covers the 1.13 faults (see RolloutConfig::serve).
    auto v = core::ucx_version();
    return v.major > 1 || (v.major == 1 && v.minor > 13);
  }

  core::Status ensure_reader() {
    if (reader) return {};
    core::TransferOptions to;
    to.environment = environment;
    to.stream_reach = cfg.store;  // the chunk server binds where the job's hosts reach it
    SLUICE_TRY(core::set_stream_security(to, cfg.stream_encryption, cfg.datacenter, security,
                                         "rollout " + cfg.rollout_id));
    SLUICE_ASSIGN_OR_RETURN(transfer, core::TransferEngine::create(*loop, to));
    SLUICE_ASSIGN_OR_RETURN(store, weightstore::StoreClient::create(*loop, cfg.store, security));
    weightstore::ReaderOptions ro;
    ro.model = cfg.model;
    ro.holder_id = cfg.rollout_id;
    ro.topology = cfg.topology();
    ro.serve = serve_peers();
    ro.read.max_in_flight_per_source = cfg.pull_in_flight;
    ro.read.max_total_bytes = cfg.max_version_bytes;
    ro.local_wait = Millis(cfg.local_wait_ms);
    ro.only_from = cfg.join_read_from;
    ro.only_from_first = true;
    ro.local_wait_first = cfg.local_wait_first;
    // A served copy is freed when the store says its leases drained, or one lease ttl after a
    // restarted store first said it does not know it: never on a timer of its own while a lease
    // may be live (close() at the end of the job waits a bounded time, then the process goes).
    ro.drain_timeout = Millis(0);
    ro.lease_ttl = Millis(cfg.store_lease_ttl_ms);
    ro.request_timeout = kRolloutStoreRequestTimeout;
    // A question for the latest version that has no news yet (the store has not committed what
    // the manager named, or a nearby copy was just declined) waits at the store for it: across
    // datacenters each question crosses the WAN.
    ro.latest_wait = kRolloutLatestWait;
    SLUICE_ASSIGN_OR_RETURN(reader, weightstore::Reader::create(*loop, *transfer, *store, ro));
    log::info("rollout {}: {} its loaded version to peers", cfg.rollout_id,
              ro.serve ? "serves" : "does not serve");
    if (ro.serve) {
      holder_beat =
          loop->every(weightstore::kHolderHeartbeatPeriod, [this] { reader->heartbeat(); });
    }
    return {};
  }

  // The newest version held or staged (0: none).
  std::uint64_t held() const {
    return reader ? std::max(reader->staged_version(), reader->current_version()) : 0;
  }

  // Starts pulling the latest version in the background when the manager has named one newer
  // than what is loaded or staged.
  core::Status prefetch() {
    if (!ws->should_pull(engine->version(), held(), reader && reader->pulling())) return {};
    SLUICE_TRY(ensure_reader());
    log::debug("rollout {}: pulling version {} in the background", cfg.rollout_id, ws->latest());
    std::weak_ptr<bool> guard = alive;
    std::uint64_t before = reader->staged_version();
    if (!first_pull) first_pull = Clock::now();
    reader->pull_latest([this, guard, before](core::Result<std::uint64_t> v) {
      if (guard.expired()) return;
      if (!v.is_ok()) {
        // Not fatal: the version may have been retired meanwhile; a newer one follows.
        log::warn("rollout {}: background pull failed: {}", cfg.rollout_id, v.status().to_string());
        return;
      }
      if (reader->staged_version() > before) {
        pulled_bytes += reader->last_stats().bytes;
        checksum_failures += reader->last_stats().checksum_failures;
        pulled_same_host_bytes += reader->last_same_host_bytes();
      }
    });
    return {};
  }

  // Switches to `version` (or a newer staged one): a swap when the background pull has it, else
  // a wait for the pull, counted as weight stall.
  core::Status load_version(std::uint64_t version, bool allow_active) {
    auto t0 = Clock::now();
    ws->latest_named(version);
    while (held() < version && ws->load_waits(t0, Clock::now()) && !stopping.load()) {
      SLUICE_TRY(prefetch());
      loop->run_until([&] { return !reader || !reader->pulling(); }, kLoadVersionPoll);
    }
    if (held() < version) {
      load_s += seconds(Clock::now() - t0);
      log::warn("rollout {}: version {} could not be pulled yet", cfg.rollout_id, version);
      return {};
    }
    // The engine copies the weights, so the reader may swap first: from here it holds (and
    // serves) the new version and retires the old one.
    if (reader->staged_version() > reader->current_version()) {
      auto sw = reader->swap();
      if (!sw.is_ok()) {
        load_s += seconds(Clock::now() - t0);
        log::warn("rollout {}: swap to version {} failed: {}", cfg.rollout_id, version,
                  sw.status().to_string());
        return {};
      }
    }
    std::uint64_t v = reader->current_version();
    std::span<const std::uint8_t> bytes = reader->current_bytes();
    auto st = engine->load_weights(v, bytes.data(), bytes.size(), allow_active);
    if (!st.is_ok()) {
      log::warn("rollout {}: load of version {} refused: {}", cfg.rollout_id, v, st.to_string());
    } else {
      if (engine->version() == v && loads == 0) {
        // The first weights: the accounting starts here.
        started = Clock::now();
        first_weights_s = seconds(started - created);
        if (first_pull) first_read_s = seconds(started - *first_pull);
        barrier_s = idle_s = 0;
        t0 = started;
      }
      ++loads;
      m_version.set(static_cast<double>(engine->version()));
      m_loaded_bytes.inc(static_cast<double>(bytes.size()));
      log::debug("rollout {}: loaded version {}", cfg.rollout_id, v);
    }
    load_s += seconds(Clock::now() - t0);
    return {};
  }

  // Lets modelled time pass while the loop runs (background pulls progress meanwhile).
  void wait_until(Clock::time_point t) {
    loop->run_until([] { return false; }, t);
  }

  void admit_queued() {
    // Holding as many finished trajectories as it may (the manager is away): new work waits.
    if (!ws->may_admit(finished.size())) return;
    while (!queue.empty() && engine->can_admit(queue.front().kv_tokens())) {
      // Under an agent, work starts when the agent takes it (claim_for_agent).
      if (env && env->claims_work() && !queue.front().is_episode()) break;
      SequenceState s = std::move(queue.front());
      queue.pop_front();
      // An episode back from its environment: its KV cache serves only the weights it was made
      // with (they may have changed while it queued), else it is re-prefilled.
      if (s.is_episode() && !s.generated.empty()) {
        if (s.kv && s.kv->version != engine->version()) s.kv.reset();
        if (s.kv) {
          ++env_kv_kept;
        } else {
          ++env_reprefills;
          env_reprefill_tokens += s.kv_tokens();
        }
      }
      // What is admitted without its cache when the engine refuses it, and handed back when the
      // engine refuses it even so: never lost.
      std::optional<KvState> kv = std::move(s.kv);
      s.kv.reset();
      SequenceState plain = s;
      s.kv = std::move(kv);
      auto st = engine->admit(std::move(s));
      if (!st.is_ok() && plain.is_episode()) st = engine->admit(plain);
      if (!st.is_ok()) {
        log::warn("rollout {}: admit of {} failed, handing it back: {}", cfg.rollout_id,
                  plain.trajectory_id, st.to_string());
        (plain.generated.empty() ? returned : exported).push_back(std::move(plain));
        break;
      }
    }
  }

  // Stopped by a signal: one last report hands back the work held here. Nothing is lost either
  // way: were it not answered, the manager's heartbeat expiry reclaims the same work (from the
  // partial-response pool), as it does for a rollout killed with SIGKILL.
  void leave() {
    ReportRequest req;
    req.id = cfg.rollout_id;
    req.incarnation = incarnation;
    req.leaving = true;
    req.version = engine->version();
    req.staged = std::max(reader ? reader->staged_version() : 0, engine->version());
    req.capacity = engine->capacity();
    req.finished = finished;
    req.exported = exported;
    // This process is going, and its KV buffers with it: the destinations re-prefill.
    for (auto& s : req.exported)
      s.kv_ref.reset();
    req.refused = refused;
    req.returned = returned;
    for (auto& s : queue)
      req.returned.push_back(std::move(s));
    queue.clear();
    // Nothing generated yet: back to the pool's front; else resumed on a rollout of its version.
    for (auto& s : engine->export_all()) {
      (s.generated.empty() ? req.returned : req.exported).push_back(std::move(s));
    }
    // Episodes waiting on their environment resume elsewhere at their call.
    for (auto& [id, w] : waiting) {
      w.state.kv.reset();
      req.exported.push_back(std::move(w.state));
    }
    if (env) drop_waiting();
    req.stats = stats();
    const std::size_t in_flight = req.exported.size(), unstarted = req.returned.size();
    bool answered = false;
    auto reply = manager->report(req, Millis(cfg.leave_timeout_ms), &answered);
    if (!answered) {
      log::warn(
          "rollout {}: leaving, the manager did not take back {} in-flight and {} queued "
          "trajectories ({}); it reclaims them when this rollout's heartbeats stop",
          cfg.rollout_id, in_flight, unstarted, reply.status().to_string());
      return;
    }
    finished.clear();
    exported.clear();
    refused.clear();
    returned.clear();
    log::info("rollout {}: left the job, handing back {} in-flight and {} queued trajectories",
              cfg.rollout_id, in_flight, unstarted);
  }

  core::Status run() {
    auto clock = Clock::now();  // where modelled time has got to
    while (!stopping.load() && !loop->stopped()) {
      auto now = Clock::now();
      if (ws->report_due(now)) {
        SLUICE_TRY(report());
        if (ws->done()) break;
        ws->schedule_report(Clock::now());
        clock = std::max(clock, Clock::now());
      }
      if (answers_ready || !waiting.empty()) take_answers();
      admit_queued();
      if (engine->active() > 0) {
        StepResult res = engine->step();
        ++steps;
        tokens += res.tokens;
        m_tokens.inc(static_cast<double>(res.tokens));
        double step_s = res.wait_s;
        auto before = Clock::now();
        clock += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(step_s));
        if (clock > before) wait_until(clock);
        double took = std::max(step_s, seconds(Clock::now() - before));
        gen_s += took;
        occupancy_s += took * res.batch / engine->capacity().max_sequences;
        if (!res.finished.empty() && first_trajectory_s < 0) {
          first_trajectory_s = seconds(Clock::now() - created);
        }
        for (auto& s : res.finished) {
          if (env && s.awaits_environment()) {
            call_environment(std::move(s));
          } else {
            finish_sequence(std::move(s));
          }
        }
        // Finished work and exports go out at once: the manager may be waiting for them.
        if (!res.finished.empty() && engine->active() == 0 && queue.empty()) {
          ws->report_at_once(Clock::now());
        }
      } else {
        auto until = ws->next_report();
        auto before = Clock::now();
        // An environment's answer ends the wait early: the episode's next turn can start.
        loop->run_until([this] { return answers_ready; }, until);
        double idle = seconds(Clock::now() - before);
        if (ws->manager_state() == "barrier") {
          barrier_s += idle;
        } else {
          idle_s += idle;
        }
        clock = Clock::now();
      }
    }
    if (ws->done()) log::info("rollout {}: the job is done", cfg.rollout_id);
    if (!ws->done() && stopping.load()) leave();
    if (reader) {
      holder_beat.reset();
      if (ws->done() && !stopping.load() && !loop->stopped()) {
        // The job ended: peers still reading this rollout's copy finish first (bounded by the
        // drain timeout). Stopped by a signal instead, the rollout must exit at once (its
        // launcher waits 3 s before it kills): the reader's destructor unpublishes without
        // waiting, and readers of the copy fail over to another source.
        core::Status closed = reader->close();
        if (!closed.is_ok()) log::warn("rollout {}: {}", cfg.rollout_id, closed.to_string());
      }
    }
    return {};
  }
};

core::Result<std::unique_ptr<RolloutWorker>> RolloutWorker::create(
    core::EventLoop& loop, RolloutConfig config, std::unique_ptr<Engine> engine, Scorer scorer,
    std::vector<std::string> environment) {
  SLUICE_TRY(config.validate());
  if (!engine) return core::invalid_argument("rollout: no engine");
  auto impl = std::make_unique<Impl>();
  impl->loop = &loop;
  impl->cfg = std::move(config);
  impl->ws.emplace(impl->cfg, Clock::now());
  impl->engine = std::move(engine);
  impl->scorer = std::move(scorer);
  impl->environment = std::move(environment);
  impl->kv_outbox = core::RetiredBuffers(Millis(impl->cfg.kv_hold_ms));
  SLUICE_ASSIGN_OR_RETURN(impl->env, make_environment(loop, impl->cfg));
  if (!impl->cfg.agent_listen.empty()) SLUICE_TRY(impl->start_agent_endpoint());
  SLUICE_ASSIGN_OR_RETURN(
      impl->security, core::load_security(impl->cfg.security, "rollout " + impl->cfg.rollout_id));
  // The manager takes a rollout's reports only under its authenticated identity.
  if (impl->security.curve() && impl->cfg.rollout_id != impl->security.identity) {
    return core::invalid_argument(
        "rollout_id '" + impl->cfg.rollout_id + "' is not the identity of its key file (" +
        impl->security.identity + "): set rollout.rollout_id=" + impl->security.identity);
  }
  SLUICE_ASSIGN_OR_RETURN(
      impl->manager,
      ManagerClient::create(loop, impl->cfg.manager, impl->security, impl->report_timeout()));
  return std::unique_ptr<RolloutWorker>(new RolloutWorker(std::move(impl)));
}

RolloutWorker::RolloutWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RolloutWorker::~RolloutWorker() {
  *impl_->alive = false;
}
core::Status RolloutWorker::run() {
  return impl_->run();
}
void RolloutWorker::stop() {
  impl_->stopping = true;
}

}  // namespace sluice::rollout
