#include "rollout/worker.hpp"

#include <fmt/format.h>

#include <atomic>
#include <deque>
#include <thread>

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "core/messaging.hpp"
#include "core/transfer.hpp"
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
  if (manager_timeout_ms < report_ms) {
    return core::invalid_argument("manager_timeout_ms must be at least report_ms");
  }
  return sim.validate();
}

double sim_reward(const SequenceState& s) {
  return (core::chunk_checksum(s.trajectory_id.data(), s.trajectory_id.size()) & 1) ? 1.0 : 0.0;
}

namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

rl::Trajectory to_trajectory(const SequenceState& s, double reward, const std::string& rollout) {
  rl::Trajectory t;
  t.id = s.trajectory_id;
  t.prompt_id = s.prompt_id;
  t.versions = s.versions;
  t.version = s.versions.empty() ? 0 : s.versions.front();
  t.prompt_tokens = s.prompt_tokens;
  t.response_tokens = s.generated;
  t.logprobs = s.logprobs;
  t.reward = reward;
  t.rollout = rollout;
  return t;
}

}  // namespace

struct RolloutWorker::Impl {
  core::EventLoop* loop = nullptr;
  RolloutConfig cfg;
  std::unique_ptr<Engine> engine;
  Scorer scorer;
  std::vector<std::string> environment;
  std::unique_ptr<core::Client> manager;
  std::unique_ptr<core::TransferEngine> transfer;
  std::unique_ptr<weightstore::StoreClient> store;
  // Holds the loaded version (and serves it to peers) and pulls the newest one in the background
  // while the old one's trajectories finish, so that the switch at the safe point is a swap, not
  // a wait. Created with the first pull; goes before the transfer engine and the store client.
  std::unique_ptr<weightstore::Reader> reader;
  std::unique_ptr<core::EventLoop::Timer> holder_beat;  // the reader's heartbeats to the store
  std::uint64_t latest = 0;  // newest published version, as the manager last said
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  std::atomic<bool> stopping{false};

  std::deque<SequenceState> queue;  // assigned, not yet admitted
  std::vector<rl::Trajectory> finished;
  std::vector<SequenceState> exported;
  std::vector<SequenceState> refused;
  std::vector<SequenceState> returned;  // queued work handed back unstarted (see apply)
  std::uint64_t reports = 0;
  std::string state = "barrier";  // what the manager last said: run, barrier, idle
  bool done = false;
  Clock::time_point last_heard = Clock::now();

  // Accounting, in seconds.
  Clock::time_point started = Clock::now();
  double gen_s = 0, load_s = 0, barrier_s = 0, idle_s = 0, occupancy_s = 0, reprefill_s = 0;
  std::uint64_t tokens = 0, steps = 0, loads = 0, imported = 0, exported_count = 0;
  std::uint64_t reprefill_tokens = 0, pulled_bytes = 0, pulled_same_host_bytes = 0;
  // Versions the store acknowledged this rollout as a holder of (it served them to peers).
  std::uint64_t served_versions = 0, last_served = 0;
  std::uint64_t refused_version = 0;  // imports of another version (never expected)

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
                {"reprefill_s", reprefill_s},
                {"pulled_bytes", pulled_bytes},
                {"pulled_same_host_bytes", pulled_same_host_bytes},
                {"served_versions", served_versions},
                {"refused_version", refused_version},
                {"max_sequences", engine->capacity().max_sequences}};
  }

  core::Status report() {
    if (reader && reader->serving() && reader->current_version() != last_served) {
      last_served = reader->current_version();
      ++served_versions;
    }
    json active = json::array();
    for (const auto& [id, kv] : engine->active_sequences())
      active.push_back(json::array({id, kv}));
    json queued = json::array();
    for (const auto& s : queue)
      queued.push_back(s.trajectory_id);
    json fin = json::array();
    for (const auto& t : finished)
      fin.push_back(t.to_json());
    json exp = json::array();
    for (const auto& s : exported)
      exp.push_back(s.to_json());
    json ref = json::array();
    for (const auto& s : refused)
      ref.push_back(s.to_json());
    json ret = json::array();
    for (const auto& s : returned)
      ret.push_back(s.to_json());
    json partial = json::array();
    if (cfg.partial_every > 0 && reports % cfg.partial_every == 0) {
      for (const auto& s : engine->snapshot())
        partial.push_back(s.to_json());
    }
    ++reports;
    Capacity cap = engine->capacity();
    json body{
        {"id", cfg.rollout_id},
        {"version", engine->version()},
        {"loading", false},
        {"staged", std::max(reader ? reader->staged_version() : 0, engine->version())},
        {"capacity", {{"max_sequences", cap.max_sequences}, {"max_kv_tokens", cap.max_kv_tokens}}},
        {"active", std::move(active)},
        {"queued", std::move(queued)},
        {"finished", std::move(fin)},
        {"exported", std::move(exp)},
        {"refused", std::move(ref)},
        {"returned", std::move(ret)},
        {"partial", std::move(partial)},
        {"stats", stats()}};
    auto reply = manager->call(core::Message("mgr.report", std::move(body)),
                               Millis(std::max<std::uint64_t>(1000, cfg.report_ms * 40)));
    if (!reply.is_ok()) {
      if (seconds(Clock::now() - last_heard) * 1000 > static_cast<double>(cfg.manager_timeout_ms)) {
        return core::unavailable(fmt::format("rollout {}: manager {} silent for {} ms: {}",
                                             cfg.rollout_id, cfg.manager, cfg.manager_timeout_ms,
                                             reply.status().to_string()));
      }
      log::warn("rollout {}: report failed: {}", cfg.rollout_id, reply.status().to_string());
      return {};  // keep what we have; it goes with the next report
    }
    last_heard = Clock::now();
    finished.clear();
    exported.clear();
    refused.clear();
    returned.clear();
    return apply(reply->body);
  }

  core::Status apply(const json& r) {
    if (r.value("rejoin", false)) {
      // The manager declared this rollout dead and handed its work out again.
      log::warn("rollout {}: the manager declared it dead; dropping its work and rejoining",
                cfg.rollout_id);
      engine->export_all();
      queue.clear();
      return {};
    }
    done = r.value("done", false);
    state = r.value("state", std::string("run"));
    if (r.value("unqueue", false)) {
      // Work not started here goes back to the manager, to start on a newer version elsewhere.
      for (auto& s : queue)
        returned.push_back(std::move(s));
      queue.clear();
    }
    for (const auto& e : r.value("export", json::array())) {
      auto s = engine->export_sequence(e.get<std::string>());
      if (s.is_ok()) {
        ++exported_count;
        exported.push_back(std::move(s).value());
      }
    }
    for (const auto& i : r.value("import", json::array())) {
      SLUICE_ASSIGN_OR_RETURN(SequenceState s, SequenceState::from_json(i));
      std::uint64_t v = s.versions.empty() ? engine->version() : s.versions.back();
      // A migrated sequence continues only on the version that generated it.
      if (v != engine->version() || !engine->can_admit(s.kv_tokens())) {
        if (v != engine->version()) ++refused_version;
        refused.push_back(std::move(s));
        continue;
      }
      std::uint64_t kv = s.kv_tokens();
      bool migrated = !s.generated.empty();
      auto st = engine->admit(std::move(s));
      if (!st.is_ok()) return st.with_context("import");
      if (migrated) {
        ++imported;
        reprefill_tokens += kv;
        reprefill_s +=
            static_cast<double>(kv) * cfg.sim.prefill_ms_per_token * cfg.sim.time_scale / 1000.0;
      }
    }
    for (const auto& a : r.value("assign", json::array())) {
      SLUICE_ASSIGN_OR_RETURN(SequenceState s, SequenceState::from_json(a));
      queue.push_back(std::move(s));
    }
    latest = std::max(latest, r.value("latest", std::uint64_t{0}));
    SLUICE_TRY(prefetch());
    std::uint64_t load = r.value("load", std::uint64_t{0});
    if (load > engine->version()) {
      SLUICE_TRY(load_version(load, r.value("allow_active", false)));
    }
    return {};
  }

  bool serve_peers() const {
    if (cfg.serve == "on") return true;
    if (cfg.serve == "off") return false;
    // The UCX version check that covers both 1.13 faults (see RolloutConfig::serve).
    return core::tcp_holder_survives_reader_death();
  }

  core::Status ensure_reader() {
    if (reader) return {};
    core::TransferOptions to;
    to.environment = environment;
    SLUICE_ASSIGN_OR_RETURN(transfer, core::TransferEngine::create(*loop, to));
    SLUICE_ASSIGN_OR_RETURN(store, weightstore::StoreClient::create(*loop, cfg.store));
    weightstore::ReaderOptions ro;
    ro.model = cfg.model;
    ro.holder_id = cfg.rollout_id;
    ro.topology = weightstore::Topology{cfg.host, cfg.rack, cfg.datacenter};
    ro.serve = serve_peers();
    ro.read.max_in_flight_per_source = cfg.pull_in_flight;
    ro.local_wait = Millis(cfg.local_wait_ms);
    // A rollout stops within seconds when its job ends; its peers fail over if it goes sooner.
    ro.drain_timeout = Millis(2000);
    ro.request_timeout = Millis(2000);
    SLUICE_ASSIGN_OR_RETURN(reader, weightstore::Reader::create(*loop, *transfer, *store, ro));
    log::info("rollout {}: {} its loaded version to peers", cfg.rollout_id,
              ro.serve ? "serves" : "does not serve");
    if (ro.serve) {
      holder_beat = loop->every(Millis(1000), [this] { reader->heartbeat(); });
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
    if (latest <= engine->version() || latest <= held()) return {};
    SLUICE_TRY(ensure_reader());
    if (reader->pulling()) return {};
    log::debug("rollout {}: pulling version {} in the background", cfg.rollout_id, latest);
    std::weak_ptr<bool> guard = alive;
    std::uint64_t before = reader->staged_version();
    reader->pull_latest([this, guard, before](core::Result<std::uint64_t> v) {
      if (guard.expired()) return;
      if (!v.is_ok()) {
        // Not fatal: the version may have been retired meanwhile; a newer one follows.
        log::warn("rollout {}: background pull failed: {}", cfg.rollout_id, v.status().to_string());
        return;
      }
      if (reader->staged_version() > before) {
        pulled_bytes += reader->last_stats().bytes;
        pulled_same_host_bytes += reader->last_same_host_bytes();
      }
    });
    return {};
  }

  // Switches to `version` (or a newer staged one): a swap when the background pull has it, else
  // a wait for the pull, counted as weight stall.
  core::Status load_version(std::uint64_t version, bool allow_active) {
    auto t0 = Clock::now();
    latest = std::max(latest, version);
    auto deadline = Clock::now() + Millis(30000);
    while (held() < version && Clock::now() < deadline && !stopping.load()) {
      SLUICE_TRY(prefetch());
      loop->run_until([&] { return !reader || !reader->pulling(); }, Millis(50));
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
        barrier_s = idle_s = 0;
        t0 = started;
      }
      ++loads;
      log::debug("rollout {}: loaded version {}", cfg.rollout_id, v);
    }
    load_s += seconds(Clock::now() - t0);
    return {};
  }

  // Lets modelled time pass while the loop runs (background pulls progress meanwhile).
  void wait_until(Clock::time_point t) {
    while (true) {
      auto left = t - Clock::now();
      if (left <= Clock::duration::zero()) return;
      auto ms = std::chrono::duration_cast<Millis>(left);
      loop->run_until([] { return false; }, std::max(ms, Millis(1)));
    }
  }

  void admit_queued() {
    while (!queue.empty() && engine->can_admit(queue.front().kv_tokens())) {
      SequenceState s = std::move(queue.front());
      queue.pop_front();
      auto st = engine->admit(std::move(s));
      if (!st.is_ok()) {
        log::warn("rollout {}: admit failed: {}", cfg.rollout_id, st.to_string());
        break;
      }
    }
  }

  core::Status run() {
    auto next_report = Clock::now();
    auto clock = Clock::now();  // where modelled time has got to
    while (!stopping.load() && !loop->stopped()) {
      auto now = Clock::now();
      if (now >= next_report) {
        SLUICE_TRY(report());
        if (done) break;
        next_report = Clock::now() + Millis(cfg.report_ms);
        clock = std::max(clock, Clock::now());
      }
      admit_queued();
      if (engine->active() > 0) {
        StepResult res = engine->step();
        ++steps;
        tokens += res.tokens;
        double step_s = res.wait_s;
        auto before = Clock::now();
        clock += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(step_s));
        if (clock > before) wait_until(clock);
        double took = std::max(step_s, seconds(Clock::now() - before));
        gen_s += took;
        occupancy_s += took * res.batch / engine->capacity().max_sequences;
        for (auto& s : res.finished) {
          double reward = scorer ? scorer(s) : 0.0;
          finished.push_back(to_trajectory(s, reward, cfg.rollout_id));
        }
        // Finished work and exports go out at once: the manager may be waiting for them.
        if (!res.finished.empty() && engine->active() == 0 && queue.empty()) {
          next_report = Clock::now();
        }
      } else {
        auto until = next_report;
        auto before = Clock::now();
        wait_until(until);
        double idle = seconds(Clock::now() - before);
        if (state == "barrier") {
          barrier_s += idle;
        } else {
          idle_s += idle;
        }
        clock = Clock::now();
      }
    }
    if (done) log::info("rollout {}: the job is done", cfg.rollout_id);
    if (reader) {
      holder_beat.reset();
      if (done && !stopping.load() && !loop->stopped()) {
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
  impl->engine = std::move(engine);
  impl->scorer = std::move(scorer);
  impl->environment = std::move(environment);
  SLUICE_ASSIGN_OR_RETURN(impl->manager, core::Client::create(loop, impl->cfg.manager));
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
