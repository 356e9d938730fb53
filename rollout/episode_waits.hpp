// A rollout's episodes while they wait on its Environment (rollout/environment.hpp). A sequence
// whose model turn ends with a call leaves the engine and waits here, holding no slot, until the
// environment answers (or fails, or stays silent past env_timeout_ms); take_answers() then says
// what becomes of each: its next turn (the answer's tokens appended, its KV cache kept when
// env_keep_kv), its end with the environment's reward, or its end as failed (counted and logged
// here; the worker sends it back abandoned). Whenever an episode ends or leaves, its environment
// is told (Environment::close), so that it frees what it holds; retain() catches those that
// ended in the engine.
//
// The environment is the one the configuration names: the tool task's calculator, the simulated
// workload's, a program (env_command) or the agent endpoint (agent_listen), which takes its work
// from the worker through a Claim. None: the rollout runs no episodes.
//
// Thread safety: one thread, the worker's; the environment answers on the worker's event loop.
// Not copyable or movable (an answer's callback holds `this`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "rollout/engine.hpp"
#include "rollout/environment.hpp"
#include "rollout/worker_config.hpp"
#include "rollout/worker_stats.hpp"

namespace sluice::rollout {

class EpisodeWaits {
 public:
  // The agent endpoint takes an unstarted sequence to run as its episode (none: nothing to take).
  using Claim = std::function<std::optional<SequenceState>()>;

  // What became of an episode whose wait ended.
  struct Outcome {
    enum class Kind {
      kNextTurn,  // answered: its next turn, at the front of the queue (with its KV cache)
      kFinished,  // the episode ended: scored with `reward`, else by the rollout's scorer
      kFailed,    // the environment failed or was silent: sent back abandoned
    };
    Kind kind;
    SequenceState state;
    std::optional<double> reward;
  };

  // `cfg` must have passed validate(); `stats` and `metrics` must outlive it. With agent_listen
  // it serves the agent endpoint and writes its URL to agent_dir. Errors: the environment could
  // not be made (a bad task, a program that does not start, an address in use, an unwritable
  // agent_dir).
  static core::Result<std::unique_ptr<EpisodeWaits>> create(core::EventLoop& loop,
                                                            const RolloutConfig& cfg,
                                                            WorkerStats& stats,
                                                            WorkerMetrics& metrics, Claim claim);
  EpisodeWaits(const EpisodeWaits&) = delete;
  EpisodeWaits& operator=(const EpisodeWaits&) = delete;

  // The environment (null: the rollout runs no episodes).
  Environment* environment() const { return env_.get(); }

  // New work assigned to this rollout. Under an environment that is not the agent's, a sequence
  // not yet started becomes an episode (its call token set), and one whose environment resets
  // first waits here before its first turn (nothing returned). Else returned, to be queued.
  std::optional<SequenceState> begin(SequenceState s);
  // A model turn ended with a call (or an episode that resets begins): `s` waits on the
  // environment, out of the engine, from now. Needs an environment.
  void call(SequenceState s);
  // Whether an answer came since the last take_answers().
  bool answers_ready() const { return answers_ready_; }
  bool empty() const { return waiting_.empty(); }
  // The episodes whose environment answered, failed, or stayed silent past env_timeout_ms at
  // `now`, in the order of their ids; the rest go on waiting.
  std::vector<Outcome> take_answers(core::Clock::time_point now);

  // The ids waiting, for a report.
  std::vector<std::string> ids() const;
  // Copies of the waiting states without their KV caches (a partial state: each resumes
  // elsewhere at its call).
  void append_states(std::vector<SequenceState>& out) const;
  // Takes `id` out (its call cancelled, its KV cache dropped), if it waits here.
  std::optional<SequenceState> take(const std::string& id);
  // Takes every waiting state out as append_states() copies it, and cancels their calls.
  std::vector<SequenceState> release();
  // Drops every waiting episode (the manager handed them out again) and cancels their calls.
  void drop();
  // `live`: every episode running, queued or waiting here. The environment closes the others it
  // still holds (those that ended or left without passing through here).
  void retain(const std::set<std::string>& live);

 private:
  struct Waiting {
    SequenceState state;
    core::Clock::time_point since;
    std::optional<core::Result<EnvAnswer>> answer;  // once it came
  };

  EpisodeWaits(const RolloutConfig& cfg, WorkerStats& stats, WorkerMetrics& metrics);
  void fail(SequenceState& s, const std::string& why);
  // Adds the environment's faults since the last call to the stats and metrics.
  void count_faults();

  std::string rollout_id_;
  core::Millis timeout_;
  bool keep_kv_;
  WorkerStats* stats_;
  WorkerMetrics* metrics_;
  std::unique_ptr<Environment> env_;
  std::map<std::string, Waiting> waiting_;  // by trajectory id
  EnvFaults faults_;                        // the environment's, counted so far
  bool answers_ready_ = false;
  // Expires first, so an answer delivered while the rest goes finds it gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sluice::rollout
