#include "actor/trainer_config.hpp"

#include <fmt/format.h>

#include <cmath>

#include "actor/publish_dtype.hpp"
#include "wire/transfer.hpp"

namespace sluice::actor {

core::Status TrainerConfig::validate() const {
  if (batch_trajectories == 0) return core::invalid_argument("batch_trajectories must be >= 1");
  if (group_size == 0 || batch_trajectories % group_size != 0) {
    return core::invalid_argument(
        fmt::format("batch_trajectories ({}) must be a multiple of group_size ({})",
                    batch_trajectories, group_size));
  }
  if (policy != "sim" && policy != "gpt") {
    return core::invalid_argument(fmt::format("policy must be sim or gpt, not '{}'", policy));
  }
  if (policy == "gpt") SLUICE_TRY(learner.validate().with_context("learner"));
  if (staleness_policy != "drop" && staleness_policy != "downweight") {
    return core::invalid_argument(
        fmt::format("staleness_policy must be drop or downweight, not '{}'", staleness_policy));
  }
  if (weight_bytes < 16) return core::invalid_argument("weight_bytes must be at least 16");
  if (chunk_bytes == 0) return core::invalid_argument("chunk_bytes must be at least 1");
  SLUICE_TRY(check_publish_dtype(publish_dtype));
  if (publish_dtype == "bf16" && policy != "gpt") {
    return core::invalid_argument(
        "publish_dtype bf16 needs policy gpt: the simulated trainer's bytes are not fp32 values");
  }
  if (train_ms_per_token < 0 || train_ms_fixed < 0) {
    return core::invalid_argument("training times must not be negative");
  }
  if (!(checkpoint_every_s >= 0) || !std::isfinite(checkpoint_every_s)) {
    return core::invalid_argument("checkpoint_every_s must be a finite number >= 0");
  }
  if (!(checkpoint_idle_s >= 0) || !std::isfinite(checkpoint_idle_s)) {
    return core::invalid_argument("checkpoint_idle_s must be a finite number >= 0");
  }
  if (heartbeat_ms == 0) return core::invalid_argument("heartbeat_ms must be at least 1");
  if (manager_call_ms == 0) return core::invalid_argument("manager_call_ms must be at least 1");
  if (store_lease_ttl_ms == 0) {
    return core::invalid_argument("store_lease_ttl_ms must be at least 1");
  }
  return core::check_stream_encryption(stream_encryption, security.mode == "curve", "actor");
}

}  // namespace sluice::actor
