// The reference GPT as the actor's policy: a supervised warm start, then one GRPO or PPO update
// per global batch (actor/learner.hpp); its parameters are the published tensors.
//
// Thread safety: the actor's thread only.
#pragma once

#include <memory>

#include "actor/learner.hpp"
#include "actor/policy.hpp"

namespace sluice::actor {

core::Result<std::unique_ptr<Policy>> make_gpt_policy(const LearnerConfig& config);

}  // namespace sluice::actor
