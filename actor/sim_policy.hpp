// The simulated policy: training waits a time proportional to the batch's tokens; each update
// stamps its number into the weight bytes so versions differ. Its checkpoint is the update count
// and the weight bytes.
//
// Thread safety: the actor's thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "actor/policy.hpp"

namespace sluice::actor {

struct SimPolicyOptions {
  std::uint64_t weight_bytes = 16u << 20;  // >= 16
  double train_ms_fixed = 0.0;             // per step
  double train_ms_per_token = 0.01;        // per trained token
};

std::unique_ptr<Policy> make_sim_policy(const SimPolicyOptions& options);

}  // namespace sluice::actor
