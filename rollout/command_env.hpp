// An environment in another process, in any language: the rollout starts `command` and speaks
// JSON lines with it, one object a line, over the process's stdin and stdout. The Python helper
// `sluice.env.serve` runs an object's reset() and step() (plain or async) this way.
//
//   to it    {"op": "reset", "episode": ID, "prompt": [ids], "text": "..."}
//            {"op": "step", "episode": ID, "action": [ids], "text": "..."}   the model's last turn
//            {"op": "close", "episode": ID}   the episode is over here: free it (no answer)
//   from it  {"episode": ID, "observation": [ids] (or "text": "..."), "reward": R, "done": B}
//
// "op" and "episode" come first in every line the rollout writes, so a reader that must refuse
// a line (too long) can still name its episode. reset comes when an episode starts, before the
// model's first turn; its observation (possibly empty) is the first thing the model reads after
// the prompt. A model turn ends at the call token (rollout.env_call_token, EOS by default); step
// then carries the turn's tokens. done ends the episode with `reward` (the rollout's scorer gives
// it when absent). Answers may come in any order; one episode has one message in flight at most.
// close comes once an episode ends for any reason (done, failed, timed out, abandoned, finished
// without a call) or leaves this rollout; a close for an episode the program does not hold is to
// be ignored.
//
// An episode that moves (to another rollout, resumed after a rollout died, handed back) carries
// its tokens but not the program's state. Where it arrives the program has never seen it, so
// before its next step the rollout replays it: reset, then one step for each model turn recorded
// so far, marked "replay": true, each sent once the previous answer came; the answers of the
// replay are discarded (the recorded observations stand) and one that ends the episode or fails
// ends it. A program whose state follows from the actions it was given is rebuilt exactly.
//
// Failures end their episode and are counted (the job goes on): an answer that is not JSON, names
// no pending episode, or holds tokens outside the vocabulary is dropped and logged, and its episode
// ends when rollout.env_timeout_ms passes; an answer with {"error": "..."} ends its episode at
// once; a process that exits fails every pending episode, and the next one starts it again.
// Nothing here blocks the rollout's thread: what the program's stdin cannot take now waits in a
// buffer; a program that takes none of it for `stall_timeout` is killed (its episodes fail, the
// next episode starts it again), so no line is ever left half-written to a program that goes on.
// A line from the program longer than `max_line` bytes is dropped as it comes (never held whole)
// and fails every episode pending there (which one it answered is unknown).
//
// Thread safety: loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
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
  std::string rollout_id;         // given to it as SLUICE_ROLLOUT_ID (empty: not set)
  std::int32_t call_token = 2;    // ends a model turn
  std::int32_t vocab = 0;         // token ids lie in [0, vocab)
  std::size_t max_line = std::size_t{8} << 20;  // longest line taken from it, in bytes; >= 1
  // A program that takes nothing written to it for this long is killed and started again.
  core::Millis stall_timeout{120000};
};

// The model's turns in `s`, in order: each run of sampled tokens up to and including the call
// token (a run cut by the environment's tokens ends a turn too). The last is the turn just ended
// when `s` awaits its environment.
std::vector<std::vector<std::int32_t>> model_turns(const SequenceState& s);

class CommandEnvironment final : public Environment {
 public:
  static core::Result<std::unique_ptr<CommandEnvironment>> create(core::EventLoop& loop,
                                                                  CommandEnvOptions options);
  ~CommandEnvironment() override;
  std::int32_t call_token() const override { return options_.call_token; }
  void answer(const SequenceState& s, Done done) override;
  void cancel(const std::string& trajectory_id) override { forget(trajectory_id); }
  void close(const std::string& trajectory_id) override;
  void retain(const std::set<std::string>& live) override;
  std::size_t pending() const override { return pending_.size(); }
  bool resets() const override { return true; }
  EnvFaults faults() const override { return faults_; }
  // Episodes the running program holds (reset there and not closed yet).
  std::size_t open() const { return open_.size(); }
  // Bytes written to the program's stdin, and bytes waiting for room there.
  std::uint64_t written() const { return written_; }
  std::size_t unwritten() const { return out_.size(); }

 private:
  // An episode's call: the lines to send, one at a time (a replay's, then the call's own), and
  // the one whose answer is awaited.
  struct Pending {
    Done done;
    std::vector<std::string> lines;
    std::size_t next = 0;
  };
  CommandEnvironment(core::EventLoop& loop, CommandEnvOptions options)
      : loop_(&loop), options_(std::move(options)) {}
  core::Status start();
  void poll();
  void take(const std::string& line);
  // Queues a line for the program's stdin and writes what it takes now.
  void send(const std::string& line);
  void flush();
  // The program is of no more use: it is killed, its episodes fail, the next one starts another.
  void broken(const std::string& why);
  void fail_all(const std::string& why);
  // Drops an episode's call that is still awaited: its answer, when it comes, is no fault.
  void forget(const std::string& id);

  core::EventLoop* loop_;
  CommandEnvOptions options_;
  std::unique_ptr<core::Subprocess> proc_;
  std::unique_ptr<core::EventLoop::Timer> poller_;
  std::map<std::string, Pending> pending_;
  std::set<std::string> open_;  // episodes reset in the running program and not closed
  // Calls dropped while the program still owed their answer (the last few thousand, oldest
  // first): an answer for one is late, not garbage.
  std::deque<std::string> forgotten_order_;
  std::set<std::string> forgotten_;
  std::string out_;                    // lines the program's stdin has not taken yet
  core::Clock::time_point out_since_;  // when out_ last got smaller (or filled)
  std::uint64_t written_ = 0;
  EnvFaults faults_;
};

}  // namespace sluice::rollout
