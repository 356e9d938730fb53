#include "relay/relay_config.hpp"

#include <string>

#include "format/manifest.hpp"
#include "weightstore/protocol.hpp"
#include "wire/transfer.hpp"

namespace sluice::relay {

using core::Status;

Status RelayConfig::validate() const {
  if (keep_versions == 0) return core::invalid_argument("keep_versions must be at least 1");
  if (poll_ms == 0) return core::invalid_argument("poll_ms must be positive");
  if (follow_poll_ms == 0 || reask_ms == 0)
    return core::invalid_argument("follow_poll_ms and reask_ms must be positive");
  if (latest_wait_ms > weightstore::kMaxLongPollMs || follow_wait_ms > weightstore::kMaxLongPollMs)
    return core::invalid_argument("latest_wait_ms and follow_wait_ms must be at most " +
                                  std::to_string(weightstore::kMaxLongPollMs));
  if (in_flight == 0) return core::invalid_argument("in_flight must be positive");
  if (store_lease_ttl_ms == 0) return core::invalid_argument("store_lease_ttl_ms must be positive");
  if (max_version_bytes == 0) return core::invalid_argument("max_version_bytes must be positive");
  if (abandon_after_ms == 0) return core::invalid_argument("abandon_after_ms must be positive");
  if (model.empty()) return core::invalid_argument("model must not be empty");
  if (share_tp_size > core::kMaxTensorParallel)
    return core::invalid_argument("share_tp_size must be at most " +
                                  std::to_string(core::kMaxTensorParallel));
  if (share_tp_size > 0 && share_rank >= share_tp_size)
    return core::invalid_argument("share_rank " + std::to_string(share_rank) +
                                  " is not below share_tp_size " + std::to_string(share_tp_size));
  if (share_tp_size > 0 && make_deltas)
    return core::invalid_argument("a host-share relay (share_tp_size) makes no deltas");
  return core::check_stream_encryption(stream_encryption, security.mode == "curve", "relay");
}

}  // namespace sluice::relay
