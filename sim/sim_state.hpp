// The simulator's state, shared by its implementation files (simulator.cpp: the event loop, the
// actor and the results; sim_rollout.cpp: the rollouts). Not a public header.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "actor/experience_buffer.hpp"
#include "rl/env_latency.hpp"
#include "rollout/manager_state.hpp"
#include "rollout/sim_engine.hpp"
#include "sim/mode_result.hpp"
#include "sim/steady.hpp"
#include "sim/weights.hpp"

namespace sluice::sim {

enum class Ev {
  kEngine,
  kReport,
  kPulled,
  kLoaded,
  kCollect,
  kTrained,
  kPublished,
  kRepack,
  kSample,
  kEnvAnswer
};

struct Event {
  double t = 0;
  std::uint64_t seq = 0;  // ties break by order of scheduling: deterministic
  Ev kind = Ev::kEngine;
  std::uint32_t who = 0;    // rollout index
  std::uint64_t token = 0;  // a rollout's engine events: stale unless equal to its current one
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// One running sequence. Its tokens are not kept while it runs: generated(S) is worked out from
// the rollout's decode-step counter S.
struct Seq {
  rollout::SequenceState st;  // `generated` and `logprobs` as at admission
  std::uint64_t target = 0;   // generated tokens at which it finishes (an episode: its turn)
  double s0 = 0;              // the rollout's S at admission
  bool last_turn = true;      // an episode's turn that ends it (not with a call)
};

// A time the engine does not decode: prefilling (counted as generating) or loading weights.
struct Block {
  double until = 0;
  bool loading = false;
};

struct SimRollout {
  std::string id;
  std::uint32_t index = 0, host = 0;
  double t0 = 0, t1 = 0, prefill = 0;  // seconds
  double slow = 1;  // the CPU model's factor on decode steps (1: off or not short of CPU)
  rollout::Capacity cap;
  // Engine.
  std::vector<Seq> active;
  std::deque<rollout::SequenceState> queue;
  std::deque<Block> blocks;
  double S = 0;      // decode steps done (fractional: steps are modelled as a fluid)
  double clock = 0;  // time up to which S and the accounting are brought
  std::uint64_t engine_token = 0;
  // Versions.
  std::uint64_t version = 0, staged = 0, latest = 0;
  std::uint64_t pulling = 0;    // version being pulled (0: none)
  std::uint64_t switching = 0;  // version being switched to (0: none)
  bool allow_active = false;
  // Towards the manager.
  std::vector<rl::Trajectory> finished;
  std::vector<rollout::SequenceState> exported, refused, returned;
  std::string state = "barrier";
  bool done = false;
  bool report_pending = false;
  double report_at = 0;
  std::uint64_t report_token = 0;
  bool load_after_pull = false;  // a load waits for the pull in progress
  double pull_done = 0;          // the host's relay holds the version being pulled
  double load_asked = 0;         // when the waiting load was asked for
  // As the last report told the manager (the global-update modes wake others on a change).
  std::uint64_t reported_version = 0;
  bool reported_work = false;
  double phase = 0;  // report ticks at phase + k x report_ms
  // Accounting (seconds).
  double first_load = -1, gen_s = 0, load_s = 0, barrier_s = 0, idle_s = 0, occ_s = 0;
  double reprefill_s = 0;
  std::uint64_t tokens = 0, loads = 0;
  // Episodes waiting on their environment (out of the engine), by the token of their answer's
  // event, each with the version its KV cache was made by (kept while the weights stay).
  struct Waiting {
    rollout::SequenceState st;
    double since = 0;
  };
  std::map<std::uint64_t, Waiting> waiting;
  std::uint64_t next_wait = 0;
  double env_wait_s = 0;
  std::uint64_t env_calls = 0, env_kv_kept = 0, env_reprefills = 0;

  double nominal_step_s() const { return t0 + t1 * static_cast<double>(active.size()); }
  double step_s() const { return nominal_step_s() * slow; }
  bool in_load() const { return switching != 0; }
  std::uint64_t kv_used() const;
  std::uint64_t generated(const Seq& q) const;
};

// Appends a time the rollout does not decode (a prefill, or a load when `loading`), `dur` seconds
// from `t` or from the end of the blocks before it.
void add_block(SimRollout& r, double t, double dur, bool loading);

class Sim {
 public:
  Sim(const SimInput& in, std::string label, rollout::Mode mode, bool repack,
      const Progress& progress);
  core::Status init();
  core::Result<ModeResult> run();

 private:
  // Event queue.
  void at(double t, Ev kind, std::uint32_t who = 0, std::uint64_t token = 0);
  double next_tick(const SimRollout& r, double t) const;
  rollout::Clock::time_point tp(double t) const;

  // Rollouts (sim_rollout.cpp).
  void advance(SimRollout& r, double t);
  void reschedule_engine(SimRollout& r, double t);
  void finish_done_sequences(SimRollout& r, double t);
  void admit_queued(SimRollout& r, double t);
  void admit(SimRollout& r, rollout::SequenceState s, double t);
  rollout::SequenceState take_out(SimRollout& r, std::size_t k);
  void on_engine(SimRollout& r, double t);
  void on_report(SimRollout& r, double t);
  void apply(SimRollout& r, rollout::ReportReply reply, double t);
  void prefetch(SimRollout& r, double t);
  void request_load(SimRollout& r, std::uint64_t v, bool allow_active, double t);
  void on_pulled(SimRollout& r, double t);
  void on_loaded(SimRollout& r, double t);
  void want_report(SimRollout& r, double t, bool now = false);
  void after_report(SimRollout& r, double t);
  // Episodes: a turn's end (the call), and its environment's answer.
  void call_environment(SimRollout& r, rollout::SequenceState s, double t);
  void on_env_answer(SimRollout& r, std::uint64_t token, double t);
  // An episode's turn: the generated tokens at which it ends, and whether it is the last.
  std::pair<std::uint64_t, bool> turn_end(const rollout::SequenceState& s) const;

  // The CPU model (simulator.cpp): demand in cores, the slowdown it gives, and bringing every
  // rollout's decode speed to it.
  double cpu_demand() const;
  double cpu_slowdown() const;
  void update_cpu(double t);

  // The manager's changes that may change other rollouts' replies.
  void observe_manager(double t);
  void wake(double t, bool only_with_room);

  // The actor (simulator.cpp).
  void on_collect(double t);
  void on_trained(double t);
  void publish(double t);
  void on_published(double t);
  void want_collect(double t);

  ModeResult results(double end) const;

  SimInput in_;
  std::string label_;
  rollout::Mode mode_;
  bool repack_;
  Progress progress_;
  std::unique_ptr<rollout::ManagerState> mgr_;
  std::unique_ptr<rollout::LengthSampler> lengths_;
  std::optional<rl::EnvLatency> env_latency_;  // episodes (engine.turns > 1)
  std::vector<SimRollout> rollouts_;
  Placement placement_;
  std::vector<RelayTimes> relay_;                 // per host: times after a publish
  std::map<std::uint64_t, double> published_at_;  // version -> publish time
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::uint64_t seq_ = 0, n_events_ = 0, n_reports_ = 0;
  double report_s_ = 0.025;
  double cpu_slow_ = 1;  // the CPU model's slowdown as last applied

  // What the manager looked like after the last call (observe_manager).
  struct Seen {
    std::uint64_t latest = 0, finished = 0, returned = 0, move_failures = 0, restarted = 0,
                  plans = 0, moved_kv = 0, lost = 0, abandoned = 0, acked = 0;
  } seen_;
  bool global_ = false;
  // sync-colocated: trainer and rollouts share GPUs; no staging, relay or pull of a version.
  bool colocated_ = false;
  // partial-broadcast: each version reaches every rollout by one broadcast from the trainer,
  // during which the trainer and every rollout pause (no relays, no pulls, no manager-told loads).
  bool broadcast_ = false;
  double broadcast_s() const;

  // Actor.
  std::unique_ptr<actor::ExperienceBuffer> buffer_;
  std::uint64_t version_ = 0, taken_ = 0, consumed_ = 0;
  std::uint64_t mgr_consumed_ = 0;  // the consumed count the manager last heard
  std::vector<std::string> ack_, have_;
  std::vector<actor::Sample> batch_;
  bool actor_busy_ = false, collect_pending_ = false, manager_done_ = false, actor_done_ = false;
  double collect_at_ = 0, actor_idle_s_ = 0, idle_since_ = 0;
  std::uint64_t trained_tokens_ = 0, staleness_max_ = 0, mixed_ = 0, samples_ = 0;
  double staleness_sum_ = 0;
  actor::StalenessCounts staleness_counts_;  // trained samples by staleness
  std::vector<StepEnd> step_ends_;           // (time, tokens) per batch
  std::map<std::string, std::uint32_t> trained_ids_;
  std::uint64_t regressions_ = 0;
  double last_progress_ = 0;  // simulated time of the last finish, load or training step
  bool final_batch_ = false;
  core::Status fatal_;
};

}  // namespace sluice::sim
