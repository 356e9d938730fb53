// Compiled when SLUICE_ENABLE_CUDA is off (device_digest.cu otherwise).
#include "core/device_digest.hpp"

namespace sluice::core {

bool device_digest_available() {
  return false;
}

Result<std::vector<Digest>> device_chunk_digests(const std::vector<DeviceChunk>& /*chunks*/) {
  return failed_precondition("built without CUDA: no device to compute digests on");
}

}  // namespace sluice::core
