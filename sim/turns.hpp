// How the simulator splits an episode into model turns (rollout.sim.turns > 1): the simulator's
// rollouts (sim_rollout.cpp) and the job's limit (sim/limit.hpp) both count turns this way.
//
// An episode of `total` model tokens and `turns` turns: turn k (1-based) ends at
// round(total x k / turns) model tokens, and at least one model token after the turn before it;
// each turn but the last ends with a call, which the environment answers with `env_tokens` tokens
// (they join the sequence without a decode step). The last turn is turn `turns`, or the first
// whose end reaches `total`.
//
// Thread safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

namespace sluice::sim {

struct TurnEnd {
  std::uint64_t end = 0;  // the sequence's generated tokens (model and answers) at the turn's end
  bool last = true;       // the turn ends the episode (no call)
};

// Turn `k` (>= 1) of an episode with `generated` tokens so far (model tokens and the k - 1
// answers before it).
inline TurnEnd turn_end(std::uint64_t total, std::uint32_t turns, std::uint32_t k,
                        std::uint64_t generated, std::uint64_t env_tokens) {
  if (turns <= 1) return {total, true};
  const std::uint64_t env = (k - 1) * env_tokens;
  const std::uint64_t model = generated >= env ? generated - env : 0;
  auto end = static_cast<std::uint64_t>(
      std::llround(static_cast<double>(total) * static_cast<double>(k) / turns));
  if (end < model + 1) end = model + 1;
  if (k >= turns || end >= total) return {total + env, true};
  return {end + env, false};
}

// The calls an episode of `total` model tokens makes when every turn runs to its end.
inline std::uint32_t episode_calls(std::uint64_t total, std::uint32_t turns,
                                   std::uint64_t env_tokens) {
  std::uint32_t calls = 0;
  std::uint64_t generated = 0;
  for (std::uint32_t k = 1;; ++k) {
    const TurnEnd e = turn_end(total, turns, k, generated, env_tokens);
    if (e.last) return calls;
    ++calls;
    generated = e.end + env_tokens;
  }
}

}  // namespace sluice::sim
