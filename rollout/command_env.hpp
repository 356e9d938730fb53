// An environment in another process, in any language: the rollout starts `command` and speaks
// JSON lines with it, one object a line, over the process's stdin and stdout. The Python helper
// `sluice.env.serve` runs an object's reset() and step() (plain or async) this way.
//
//   to it    {"op": "reset", "episode": ID, "prompt": [ids], "text": "..."}
//            {"op": "step", "episode": ID, "action": [ids], "text": "..."}   the model's last turn
//   from it  {"episode": ID, "observation": [ids] (or "text": "..."), "reward": R, "done": B}
//
// reset comes when an episode starts, before the model's first turn; its observation (possibly
// empty) is the first thing the model reads after the prompt. A model turn ends at the call token
// (rollout.env_call_token, EOS by default); step then carries the turn's tokens. done ends the
// episode with `reward` (the rollout's scorer gives it when absent). Answers may come in any order.
//
// Failures end their episode and are counted (the job goes on): an answer that is not JSON, names
// no pending episode, or holds tokens outside the vocabulary is dropped and logged, and its episode
// ends when rollout.env_timeout_ms passes; an answer with {"error": "..."} ends its episode at
// once; a process that exits fails every pending episode, and the next one starts it again.
//
// Thread safety: loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "rollout/environment.hpp"

namespace sluice::rollout {

struct CommandEnvOptions {
  std::vector<std::string> argv;  // argv[0] is the program
  std::string cwd;                // its working directory (empty: the rollout's)
  std::string stderr_path;        // its stderr is appended here (empty: the rollout's)
  std::int32_t call_token = 2;    // ends a model turn
  std::int32_t vocab = 0;         // token ids lie in [0, vocab)
};

class CommandEnvironment final : public Environment {
 public:
  static core::Result<std::unique_ptr<CommandEnvironment>> create(core::EventLoop& loop,
                                                                  CommandEnvOptions options);
  ~CommandEnvironment() override;
  std::int32_t call_token() const override { return options_.call_token; }
  void answer(const SequenceState& s, Done done) override;
  void cancel(const std::string& trajectory_id) override { pending_.erase(trajectory_id); }
  std::size_t pending() const override { return pending_.size(); }
  bool resets() const override { return true; }

 private:
  CommandEnvironment(core::EventLoop& loop, CommandEnvOptions options)
      : loop_(&loop), options_(std::move(options)) {}
  core::Status start();
  void poll();
  void take(const std::string& line);
  void fail_all(const std::string& why);

  core::EventLoop* loop_;
  CommandEnvOptions options_;
  std::unique_ptr<core::Subprocess> proc_;
  std::unique_ptr<core::EventLoop::Timer> poller_;
  std::map<std::string, Done> pending_;
  std::uint64_t garbage_ = 0;  // answers dropped as malformed
};

}  // namespace sluice::rollout
