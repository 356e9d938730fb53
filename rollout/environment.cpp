#include "rollout/environment.hpp"

#include <cmath>

#include "core/checksum.hpp"
#include "core/splitmix.hpp"

namespace sluice::rollout {

void TimedEnvironment::answer(const SequenceState& s, Done done) {
  const std::string id = s.trajectory_id;
  core::Result<EnvAnswer> result = compute_(s);
  const double ms = latency_.delay_ms(id, s.turns);
  const auto delay = core::Millis(static_cast<std::int64_t>(std::ceil(ms)));
  timers_[id] =
      loop_->after(delay, [this, id, done = std::move(done), result = std::move(result)]() mutable {
        // The timer (and this closure) is destroyed by the erase: keep what is needed first.
        Done call = std::move(done);
        core::Result<EnvAnswer> r = std::move(result);
        const std::string key = id;
        timers_.erase(key);
        call(std::move(r));
      });
}

std::unique_ptr<Environment> make_task_environment(core::EventLoop& loop,
                                                   const rl::ArithmeticTask& task,
                                                   rl::EnvLatency latency) {
  const std::uint32_t max_turns = task.config().max_turns;
  return std::make_unique<TimedEnvironment>(
      loop, latency, rl::ArithmeticTask::call_token(),
      [task, max_turns](const SequenceState& s) -> core::Result<EnvAnswer> {
        EnvAnswer a;
        if (s.turns >= max_turns) {
          a.done = true;
          return a;
        }
        SLUICE_ASSIGN_OR_RETURN(a.tokens, task.tool_answer(s.generated));
        return a;
      });
}

std::unique_ptr<Environment> make_sim_environment(core::EventLoop& loop, std::int32_t call_token,
                                                  std::int32_t vocab, std::uint32_t tokens,
                                                  rl::EnvLatency latency) {
  return std::make_unique<TimedEnvironment>(
      loop, latency, call_token,
      [call_token, vocab, tokens](const SequenceState& s) -> core::Result<EnvAnswer> {
        EnvAnswer a;
        std::uint64_t state = core::mix64(
            core::chunk_checksum(s.trajectory_id.data(), s.trajectory_id.size()) ^ s.turns);
        for (std::uint32_t i = 0; i < tokens; ++i) {
          auto t = static_cast<std::int32_t>(core::splitmix64(state) %
                                             static_cast<std::uint64_t>(vocab));
          if (t == call_token) t = (t + 1) % vocab;
          a.tokens.push_back(t);
        }
        return a;
      });
}

}  // namespace sluice::rollout
