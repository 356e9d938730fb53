// The dtype the actor publishes its weights in (TrainerConfig::publish_dtype). The policy's master
// weights stay as they are (fp32 for the reference GPT); "bf16" rounds each F32 tensor to BF16
// (round-to-nearest-even, format/bf16.hpp) into a buffer the actor owns, and publishes that: half
// the bytes, and since one RL update moves few weights across a bf16 rounding boundary,
// consecutive versions differ in few values and their deltas are small. Rollouts generate from
// the bf16 values (rollout::ModelEngine widens them on load).
//
// Thread safety: pure functions over caller-owned buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actor/publisher.hpp"
#include "core/status.hpp"

namespace sluice::actor {

// "f32" (publish as held) or "bf16"; invalid_argument naming the value otherwise.
core::Status check_publish_dtype(const std::string& dtype);

// The tensors to publish for `dtype`: for "f32", `tensors` themselves; for "bf16", the same
// tensors rounded into `storage` (resized to the sum of their bf16 sizes, each tensor at its
// offset there; the views point into it and live as long as it is untouched). invalid_argument
// for a tensor that is not F32 or whose bytes are not 4 x its shape's elements;
// failed_precondition for a tensor in device memory (rounded on the host only).
core::Result<std::vector<TensorView>> tensors_to_publish(const std::vector<TensorView>& tensors,
                                                         const std::string& dtype,
                                                         std::vector<std::uint8_t>& storage);

}  // namespace sluice::actor
