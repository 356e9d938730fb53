// Token sampling with a deterministic random generator whose whole state is one uint64, so a
// sequence can be moved to another process (its tokens, its KV cache rebuilt by prefill, and this
// one number) and continue exactly as it would have.
//
// Thread safety: pure functions; the caller owns the state it passes.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.hpp"

namespace sluice::model {

// SplitMix64: advances `state` and returns the next 64 random bits.
std::uint64_t next_random(std::uint64_t& state);
// A uniform double in [0, 1) from the next 53 random bits.
double next_uniform(std::uint64_t& state);

struct Sampled {
  std::int32_t token = 0;
  // log p(token) under the distribution actually sampled from, softmax(logits / temperature).
  // For greedy decoding (a point mass) it is log softmax(logits) at temperature 1 instead, the
  // only informative number.
  float logprob = 0.0f;
};

// Draws a token from softmax(logits / temperature). Temperature 0 (or below) means greedy: the
// first largest logit wins and the state is left untouched; otherwise exactly one draw is taken
// from `rng_state`. Does not allocate. Empty logits or a non-finite temperature are
// invalid_argument.
core::Result<Sampled> sample(std::span<const float> logits, float temperature,
                             std::uint64_t& rng_state);

}  // namespace sluice::model
