// What answers an episode's calls. A rollout that runs episodes (SequenceState::call_token set)
// holds one Environment: when a model turn ends with its call, the sequence leaves the engine, the
// environment answers, and the sequence comes back with the answer's tokens appended (never
// trained on) for its next turn. Meanwhile its slot serves other work.
//
// Two environments are built in, both answering after a latency drawn per (episode, turn) from
// rl::EnvLatency, on a loop timer:
// - the tool task's calculator (rl::ArithmeticTask with tool "calc"), for the model engine;
// - the simulated workload's, for the sim engine: env_tokens pseudo-random tokens.
//
// Thread safety: one thread (the rollout's event loop).
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
#include "rl/env_latency.hpp"
#include "rl/task.hpp"
#include "rollout/engine.hpp"

namespace sluice::rollout {

struct EnvAnswer {
  std::vector<std::int32_t> tokens;  // appended to the episode
  // The episode ends here: at its call, unanswered (its last allowed turn called), or as an
  // agent ended it, with the agent's reward (unset: the rollout's scorer gives it).
  bool done = false;
  std::optional<double> reward;
  // The next turn also ends after this many generated tokens in all (0: only at the call).
  std::uint64_t turn_limit = 0;
  // And at these stop sequences (rollout/engine.hpp), counted from its start.
  TurnStop stop;
};

// What went wrong with an environment in another process, counted since it was made (the
// rollout adds these to its stats and metrics).
struct EnvFaults {
  std::uint64_t garbage = 0;   // answers dropped as malformed or naming no pending episode
  std::uint64_t overlong = 0;  // lines longer than the limit (each ended the pending episodes)
  std::uint64_t stalled = 0;   // processes stopped because they took nothing written to them
};

class Environment {
 public:
  using Done = std::function<void(core::Result<EnvAnswer>)>;
  virtual ~Environment() = default;
  // The token that ends a model turn with a call.
  virtual std::int32_t call_token() const = 0;
  // Starts answering the call that ends `s`'s last turn. `done` runs once, later, from the event
  // loop (never inside answer()); an error ends the episode. cancel() drops a pending answer
  // (its `done` never runs).
  virtual void answer(const SequenceState& s, Done done) = 0;
  virtual void cancel(const std::string& trajectory_id) = 0;
  // The episode ended here or left this rollout (finished, failed, moved, handed back): what the
  // environment holds for it may go. Nothing is pending for it (cancel() came first). An
  // episode that comes back later starts again from the environment's point of view.
  virtual void close(const std::string& /*trajectory_id*/) {}
  // Every episode not in `live` (the ids running, queued or waiting here) has ended or left:
  // the environment closes those it still holds (one that ended in the engine, without a call).
  virtual void retain(const std::set<std::string>& /*live*/) {}
  // The episode `s` is over here without a call: it reached max_new_tokens or the model's context
  // (`finished`: it goes to the actor), or it was abandoned, handed back or moved to another
  // rollout (`why` says which). An environment holding a request that waits on the episode's
  // turn answers it. Default: nothing (none is held).
  virtual void ended(const SequenceState& /*s*/, bool /*finished*/, const std::string& /*why*/) {}
  // Answers pending.
  virtual std::size_t pending() const = 0;
  virtual EnvFaults faults() const { return {}; }
  // Whether episodes start only when the environment takes them (an agent over HTTP): the
  // rollout then admits no new work of its own.
  virtual bool claims_work() const { return false; }
  // Whether an episode starts with the environment's answer to its prompt (a reset): the rollout
  // then hands it each new episode (no model token yet) before the first turn.
  virtual bool resets() const { return false; }
};

// An environment whose answer is a function of the episode so far, delivered after the drawn
// latency.
class TimedEnvironment : public Environment {
 public:
  using Compute = std::function<core::Result<EnvAnswer>(const SequenceState&)>;
  TimedEnvironment(core::EventLoop& loop, rl::EnvLatency latency, std::int32_t call_token,
                   Compute compute)
      : loop_(&loop), latency_(latency), call_token_(call_token), compute_(std::move(compute)) {}
  std::int32_t call_token() const override { return call_token_; }
  void answer(const SequenceState& s, Done done) override;
  void cancel(const std::string& trajectory_id) override { timers_.erase(trajectory_id); }
  std::size_t pending() const override { return timers_.size(); }

 private:
  core::EventLoop* loop_;
  rl::EnvLatency latency_;
  std::int32_t call_token_;
  Compute compute_;
  std::map<std::string, std::unique_ptr<core::EventLoop::Timer>> timers_;
};

// The tool task's calculator: the value of the call's expression (rl::ArithmeticTask::tool_answer);
// a call in the episode's max_turns-th turn ends it.
std::unique_ptr<Environment> make_task_environment(core::EventLoop& loop,
                                                   const rl::ArithmeticTask& task,
                                                   rl::EnvLatency latency);
// The simulated workload's: `tokens` pseudo-random tokens in [0, vocab) other than the call
// token, drawn from the episode's id and turn.
std::unique_ptr<Environment> make_sim_environment(core::EventLoop& loop, std::int32_t call_token,
                                                  std::int32_t vocab, std::uint32_t tokens,
                                                  rl::EnvLatency latency);

}  // namespace sluice::rollout
